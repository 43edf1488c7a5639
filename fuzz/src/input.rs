//! A cursor over fuzzer bytes that never runs out: every read past the end yields zeros, so
//! that every input decodes to something. Knows no format.

/// A cursor over fuzzer bytes.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    /// Reads `data` from its start.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// Up to `n` next bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = end;
        &self.data[start..end]
    }

    /// The next byte, 0 past the end.
    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    /// Little-endian, zero-filled past the end.
    pub fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let s = self.bytes(2);
        b[..s.len()].copy_from_slice(s);
        u16::from_le_bytes(b)
    }

    /// Little-endian, zero-filled past the end.
    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let s = self.bytes(4);
        b[..s.len()].copy_from_slice(s);
        u32::from_le_bytes(b)
    }

    /// Little-endian, zero-filled past the end.
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let s = self.bytes(8);
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b)
    }

    /// A byte string: a length byte, then that many bytes.
    pub fn blob(&mut self) -> &'a [u8] {
        let n = self.u8() as usize;
        self.bytes(n)
    }

    /// A size or offset: mostly small or at a page edge, sometimes raw.
    pub fn size(&mut self) -> u64 {
        match self.u8() {
            b @ 0..=0x7f => u64::from(b),
            b @ 0x80..=0xbf => u64::from(b - 0x80) * 4096,
            b @ 0xc0..=0xdf => (u64::from(b - 0xc0) << 20) + u64::from(self.u8()),
            0xe0 => u64::MAX,
            0xe1 => i64::MAX as u64,
            0xe2 => 1 << 32,
            _ => self.u64(),
        }
    }
}
