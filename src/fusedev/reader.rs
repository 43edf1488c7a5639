//! One reader thread of a host mount: read a request from its own descriptor of the FUSE
//! connection into its own buffer, serve it through the protocol layer, write the reply in
//! one write. Ends when the mount goes away (ENODEV). Knows nothing of the union.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use fuse_backend_rs::abi::fuse_abi::InHeader;
use log::{debug, warn};
use vm_memory::VolatileSlice;

use super::buffer::{Aligned, READ_DATA, WRITE_DATA};
use super::transport::Device;
use crate::fuse::{Cursor, ServedFs, Server};
use crate::sys::fusedev::{read_request, write_reply};

/// Serves requests read from `fd` until the connection ends (the mount is gone): Ok then,
/// an error if the device fails otherwise.
pub fn serve<F: ServedFs>(server: &Server<F>, fd: &OwnedFd, device: Device) -> io::Result<()> {
    // A WRITE's payload and a READ's data on a page boundary: O_DIRECT branch files take them.
    let mut request = Aligned::new(device.request_buffer(), WRITE_DATA, device.page_size);
    let mut reply = Aligned::new(device.reply_buffer(), READ_DATA, device.page_size);
    let (request, reply) = (request.as_mut_slice(), reply.as_mut_slice());
    loop {
        let n = match read_request(fd.as_fd(), request) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // ENOENT: the request was interrupted before it was read.
                Some(libc::ENOENT | libc::EINTR | libc::EAGAIN) => continue,
                Some(libc::ENODEV) => return Ok(()),
                _ => return Err(e),
            },
        };
        let len = {
            let readable = [VolatileSlice::from(&mut request[..n])];
            let mut r = Cursor::new(&readable);
            let Ok(hdr) = r.read_obj::<InHeader>() else {
                warn!("a request of {n} bytes, shorter than its header: dropped");
                continue;
            };
            let writable = [VolatileSlice::from(&mut reply[..])];
            server.serve(&hdr, r, Cursor::new(&writable), &device)
        };
        if len == 0 {
            continue;
        }
        if let Err(e) = write_reply(fd.as_fd(), &reply[..len]) {
            match e.raw_os_error() {
                // The request was interrupted and is gone: its reply has no reader.
                Some(libc::ENOENT) => debug!("reply to an interrupted request dropped"),
                Some(libc::ENODEV) => return Ok(()),
                _ => warn!("cannot write a reply of {len} bytes: {e}"),
            }
        }
    }
}
