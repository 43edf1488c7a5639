//! Security contexts of new objects (FUSE_SECURITY_CTX): the guest kernel's LSM names a context
//! for each object it creates (mkdir, mknod, symlink, create, tmpfile) and sends it as a
//! request extension after the request's own arguments. The server parses it here (a pure
//! function of guest bytes, checked field by field) and hands it to the filesystem in the
//! request ([`super::Request::secctx`]); the create operations set it on the new host object
//! before the object gets its name (`fs/ops/create.rs`).

use std::ffi::CString;

use vm_memory::ByteValued;

use crate::sys::abi::fuse::{ExtHeader, Secctx, MAX_NR_SECCTX};

/// One security context: the xattr name the guest's LSM uses (`security.selinux`) and the
/// value to set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecContext {
    /// The guest's xattr name (mapped by `--xattrmap` before use).
    pub name: CString,
    /// The context.
    pub value: Vec<u8>,
}

/// Why an extension block was refused (the request then answers EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtError {
    /// Sizes that do not add up, or a field outside its bounds.
    Malformed,
    /// An extension type that was not negotiated, or one sent twice.
    Unexpected,
}

/// Linux's XATTR_NAME_MAX and XATTR_SIZE_MAX.
const NAME_MAX: usize = 255;
const VALUE_MAX: usize = 65536;

fn take<T: ByteValued>(bytes: &[u8]) -> Result<(T, &[u8]), ExtError> {
    if bytes.len() < size_of::<T>() {
        return Err(ExtError::Malformed);
    }
    let (head, rest) = bytes.split_at(size_of::<T>());
    Ok((
        T::from_slice(head).copied().ok_or(ExtError::Malformed)?,
        rest,
    ))
}

/// Parses a request's extension block (`total_extlen * 8` bytes at its end): the security
/// context, if one was sent and is not empty. Only security contexts may appear, once.
pub fn parse(mut block: &[u8]) -> Result<Option<SecContext>, ExtError> {
    let mut found = None;
    let mut seen = false;
    while !block.is_empty() {
        let (h, _) = take::<ExtHeader>(block)?;
        let size = h.size as usize;
        if size < size_of::<ExtHeader>() || !size.is_multiple_of(8) || size > block.len() {
            return Err(ExtError::Malformed);
        }
        let (this, rest) = block.split_at(size);
        block = rest;
        if h.ext_type > MAX_NR_SECCTX || seen {
            return Err(ExtError::Unexpected);
        }
        seen = true;
        found = parse_contexts(h.ext_type, &this[size_of::<ExtHeader>()..])?;
    }
    Ok(found)
}

/// The body of a security-context extension holding `n` contexts: none, or one (the kernel
/// sends at most one; virtiofsd refuses more, and so does this).
fn parse_contexts(n: u32, body: &[u8]) -> Result<Option<SecContext>, ExtError> {
    match n {
        0 => return Ok(None),
        1 => {}
        _ => return Err(ExtError::Malformed),
    }
    let (c, rest) = take::<Secctx>(body)?;
    let nul = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(ExtError::Malformed)?;
    let (name, rest) = (&rest[..nul], &rest[nul + 1..]);
    let size = c.size as usize;
    if name.is_empty() || name.len() > NAME_MAX || size > VALUE_MAX || size > rest.len() {
        return Err(ExtError::Malformed);
    }
    // What follows the value is padding to 8 bytes.
    if rest.len() - size >= 8 {
        return Err(ExtError::Malformed);
    }
    Ok(Some(SecContext {
        name: CString::new(name).map_err(|_| ExtError::Malformed)?,
        value: rest[..size].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(n: u32, name: &[u8], value: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        if n > 0 {
            body.extend_from_slice(&(value.len() as u32).to_ne_bytes());
            body.extend_from_slice(&0u32.to_ne_bytes());
            body.extend_from_slice(name);
            body.push(0);
            body.extend_from_slice(value);
        }
        let size = (8 + body.len()).next_multiple_of(8);
        let mut out = Vec::new();
        out.extend_from_slice(&(size as u32).to_ne_bytes());
        out.extend_from_slice(&n.to_ne_bytes());
        out.extend_from_slice(&body);
        out.resize(size, 0);
        out
    }

    #[test]
    fn a_context_as_the_kernel_sends_it() {
        let b = ext(1, b"security.selinux", b"system_u:object_r:tmp_t:s0\0");
        let c = parse(&b).unwrap().unwrap();
        assert_eq!(c.name.to_bytes(), b"security.selinux");
        assert_eq!(c.value, b"system_u:object_r:tmp_t:s0\0");
        assert_eq!(parse(&ext(0, b"", b"")), Ok(None));
        assert_eq!(parse(&[]), Ok(None));
    }

    #[test]
    fn malformed_blocks_are_refused() {
        let good = ext(1, b"security.selinux", b"ctx");
        // Truncated anywhere.
        for cut in 1..good.len() {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        // Two contexts, a value longer than the block, no NUL, an empty name, a header
        // size that is not a multiple of 8, groups (not negotiated), two extensions.
        assert_eq!(parse(&ext(2, b"a", b"b")), Err(ExtError::Malformed));
        let mut long = good.clone();
        long[8..12].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(parse(&long), Err(ExtError::Malformed));
        let mut no_nul = ext(1, b"security.selinux", b"");
        for b in &mut no_nul[16..] {
            *b = b'x';
        }
        assert_eq!(parse(&no_nul), Err(ExtError::Malformed));
        assert_eq!(parse(&ext(1, b"", b"v")), Err(ExtError::Malformed));
        let mut odd = good.clone();
        odd[0..4].copy_from_slice(&(good.len() as u32 - 1).to_ne_bytes());
        assert_eq!(parse(&odd), Err(ExtError::Malformed));
        let mut groups = ext(0, b"", b"");
        groups[4..8].copy_from_slice(&32u32.to_ne_bytes());
        assert_eq!(parse(&groups), Err(ExtError::Unexpected));
        let twice = [good.clone(), good.clone()].concat();
        assert_eq!(parse(&twice), Err(ExtError::Unexpected));
        let mut padded = good.clone();
        padded[0..4].copy_from_slice(&(good.len() as u32 + 8).to_ne_bytes());
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(parse(&padded), Err(ExtError::Malformed));
    }
}
