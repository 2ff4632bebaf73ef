//! Little-endian encoding helpers for the on-disk formats.

pub(crate) struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn with_capacity(n: usize) -> Enc {
        Enc {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// A name as a length byte and a fixed 63-byte field.
    pub fn name(&mut self, s: &str) -> &mut Self {
        let b = s.as_bytes();
        let n = b.len().min(63);
        self.u8(n as u8);
        self.buf.extend_from_slice(&b[..n]);
        self.buf.resize(self.buf.len() + 63 - n, 0);
        self
    }
    pub fn pad_to(&mut self, len: usize) -> &mut Self {
        self.buf.resize(len, 0);
        self
    }
    /// Pad to `len` and store the CRC32C of everything before the last 4 bytes there.
    pub fn seal(mut self, len: usize) -> Vec<u8> {
        self.buf.resize(len - 4, 0);
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf
    }
}

pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_le_bytes([s[0], s[1]]))
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
    }
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        self.take(n)
    }
    pub fn name(&mut self) -> Option<String> {
        let n = self.u8()? as usize;
        let field = self.take(63)?;
        String::from_utf8(field.get(..n)?.to_vec()).ok()
    }
    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
}

/// Whether `buf[..len]` carries a valid CRC32C in its last 4 bytes.
pub(crate) fn sealed_ok(buf: &[u8], len: usize) -> bool {
    if buf.len() < len || len < 4 {
        return false;
    }
    let stored = u32::from_le_bytes([buf[len - 4], buf[len - 3], buf[len - 2], buf[len - 1]]);
    crc32c::crc32c(&buf[..len - 4]) == stored
}
