//! Typed one-call FUSE operations on a [`Device`]: build with `ops`, send, parse. FUSE error
//! replies surface as `Error::Errno`.

use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{AttrOut, EntryOut, InitOut, Kstatfs, OpenOut, WriteOut};

use crate::device::{Device, HIPRIO_QUEUE};
use crate::error::Result;
use crate::ops::{self, DirEntry};

impl Device {
    /// FUSE_INIT offering `flags`.
    pub fn init(&mut self, flags: u64) -> Result<InitOut> {
        self.send(&ops::init(flags))?.parse()
    }

    /// FUSE_LOOKUP (takes one lookup reference on success).
    pub fn lookup(&mut self, parent: u64, name: &[u8]) -> Result<EntryOut> {
        self.send(&ops::lookup(parent, name))?.parse()
    }

    /// FUSE_GETATTR.
    pub fn getattr(&mut self, nodeid: u64) -> Result<AttrOut> {
        self.send(&ops::getattr(nodeid, None))?.parse()
    }

    /// FUSE_OPEN.
    pub fn open(&mut self, nodeid: u64, flags: u32) -> Result<OpenOut> {
        self.send(&ops::open(nodeid, flags))?.parse()
    }

    /// FUSE_CREATE: the new entry and its open handle.
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: u32,
    ) -> Result<(EntryOut, OpenOut)> {
        let r = self.send(&ops::create(parent, name, mode, flags))?;
        let e: EntryOut = r.parse()?;
        let p = r.payload()?;
        let o = p
            .get(std::mem::size_of::<EntryOut>()..)
            .and_then(<OpenOut as vm_memory::ByteValued>::from_slice)
            .copied()
            .ok_or_else(|| crate::Error::BadReply("CREATE reply without open_out".into()))?;
        Ok((e, o))
    }

    /// FUSE_READ; returns the bytes read (short at EOF).
    pub fn read(&mut self, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        Ok(self
            .send(&ops::read(nodeid, fh, offset, size))?
            .payload()?
            .to_vec())
    }

    /// FUSE_WRITE; returns the byte count the backend reports.
    pub fn write(&mut self, nodeid: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let data: Arc<[u8]> = Arc::from(data);
        let w: WriteOut = self.send(&ops::write(nodeid, fh, offset, data))?.parse()?;
        Ok(w.size)
    }

    /// FUSE_RELEASE.
    pub fn release(&mut self, nodeid: u64, fh: u64) -> Result<()> {
        self.send(&ops::release(nodeid, fh))?.payload().map(drop)
    }

    /// FUSE_OPENDIR.
    pub fn opendir(&mut self, nodeid: u64) -> Result<OpenOut> {
        self.send(&ops::opendir(nodeid))?.parse()
    }

    /// FUSE_READDIR of up to `size` bytes from `offset`.
    pub fn readdir(
        &mut self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntry>> {
        let r = self.send(&ops::readdir(nodeid, fh, offset, size))?;
        Ok(ops::parse_dirents(r.payload()?, false))
    }

    /// FUSE_READDIRPLUS of up to `size` bytes from `offset`.
    pub fn readdirplus(
        &mut self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntry>> {
        let r = self.send(&ops::readdirplus(nodeid, fh, offset, size))?;
        Ok(ops::parse_dirents(r.payload()?, true))
    }

    /// Every entry of an open directory, READDIR page by page.
    pub fn readdir_all(&mut self, nodeid: u64, fh: u64) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut off = 0;
        loop {
            let page = self.readdir(nodeid, fh, off, 64 * 1024)?;
            match page.last() {
                None => return Ok(all),
                Some(last) => off = last.off,
            }
            all.extend(page);
        }
    }

    /// FUSE_RELEASEDIR.
    pub fn releasedir(&mut self, nodeid: u64, fh: u64) -> Result<()> {
        self.send(&ops::releasedir(nodeid, fh))?.payload().map(drop)
    }

    /// FUSE_UNLINK.
    pub fn unlink(&mut self, parent: u64, name: &[u8]) -> Result<()> {
        self.send(&ops::unlink(parent, name))?.payload().map(drop)
    }

    /// FUSE_RMDIR.
    pub fn rmdir(&mut self, parent: u64, name: &[u8]) -> Result<()> {
        self.send(&ops::rmdir(parent, name))?.payload().map(drop)
    }

    /// FUSE_MKDIR.
    pub fn mkdir(&mut self, parent: u64, name: &[u8], mode: u32) -> Result<EntryOut> {
        self.send(&ops::mkdir(parent, name, mode))?.parse()
    }

    /// FUSE_STATFS.
    pub fn statfs(&mut self, nodeid: u64) -> Result<Kstatfs> {
        self.send(&ops::statfs(nodeid))?
            .parse::<fuse_backend_rs::abi::fuse_abi::StatfsOut>()
            .map(|s| s.st)
    }

    /// FUSE_FORGET on the hiprio queue, as the Linux driver sends it; waits for the used entry.
    pub fn forget(&mut self, nodeid: u64, nlookup: u64) -> Result<()> {
        self.send_on(HIPRIO_QUEUE, &ops::forget(nodeid, nlookup))
            .map(drop)
    }
}
