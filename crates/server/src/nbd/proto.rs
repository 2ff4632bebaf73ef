//! NBD wire constants and encoders (the NBD project's `doc/proto.md`).

use bytes::{BufMut, Bytes, BytesMut};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// Extended headers (`NBD_OPT_EXTENDED_HEADERS`): 32-byte requests and replies.
pub const EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;
pub const EXTENDED_REPLY_MAGIC: u32 = 0x6e8a_278c;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const FLAG_NO_ZEROES: u16 = 2;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const FLAG_C_NO_ZEROES: u32 = 2;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;
pub const REP_ERR_EXT_HEADER_REQD: u32 = (1 << 31) + 10;

// Info types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_ROTATIONAL: u16 = 1 << 4;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;

// Commands and command flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Extended headers only: the header's length is a payload that follows (WRITE's data).
pub const CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_BLOCK_STATUS_EXT: u16 = 6;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// Block status flags of `base:allocation`.
pub const STATE_HOLE: u32 = 1;
pub const STATE_ZERO: u32 = 2;

// Errors on the wire.
pub const EPERM: u32 = 1;
pub const EINVAL: u32 = 22;
pub const EOVERFLOW: u32 = 75;

pub const REQUEST_HEADER_BYTES: usize = 28;
pub const EXTENDED_REQUEST_HEADER_BYTES: usize = 32;
/// Largest read or write served (as the block size info advertises).
pub const MAX_PAYLOAD_BYTES: u32 = 32 << 20;
/// Largest option payload accepted during the handshake.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;

pub fn greeting() -> Bytes {
    let mut b = BytesMut::with_capacity(18);
    b.put_u64(NBDMAGIC);
    b.put_u64(IHAVEOPT);
    b.put_u16(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    b.freeze()
}

pub fn option_reply(opt: u32, kind: u32, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(20 + data.len());
    b.put_u64(OPT_REPLY_MAGIC);
    b.put_u32(opt);
    b.put_u32(kind);
    b.put_u32(data.len() as u32);
    b.put_slice(data);
    b.freeze()
}

/// An option error reply carrying a human-readable message.
pub fn option_error(opt: u32, kind: u32, msg: &str) -> Bytes {
    option_reply(opt, kind, msg.as_bytes())
}

pub fn simple_reply_header(error: u32, handle: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(16);
    b.put_u32(SIMPLE_REPLY_MAGIC);
    b.put_u32(error);
    b.put_u64(handle);
    b.freeze()
}

/// How transmission-phase messages are framed, as negotiated: simple replies only (the
/// default), structured replies (`NBD_OPT_STRUCTURED_REPLY`: chunks for reads and block
/// status), or extended headers (`NBD_OPT_EXTENDED_HEADERS`: 32-byte requests with 64-bit
/// lengths, and every reply a 32-byte chunk that also echoes the request's offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Simple,
    Structured,
    Extended,
}

impl Framing {
    /// Replies may be chunks (reads must be, block status needs them).
    pub fn chunked(self) -> bool {
        self != Framing::Simple
    }

    pub fn request_header_bytes(self) -> usize {
        if self == Framing::Extended {
            EXTENDED_REQUEST_HEADER_BYTES
        } else {
            REQUEST_HEADER_BYTES
        }
    }

    /// Start a reply chunk marked done: the structured header (20 bytes) or the extended
    /// one (32 bytes, with `req_offset`, the offset of the request it answers), announcing
    /// `payload_len` bytes, of which the caller appends `appended` to this buffer (a read's
    /// data goes out as a buffer of its own).
    pub fn chunk(
        self,
        ty: u16,
        handle: u64,
        req_offset: u64,
        payload_len: usize,
        appended: usize,
    ) -> BytesMut {
        let mut b = BytesMut::with_capacity(32 + appended);
        if self == Framing::Extended {
            b.put_u32(EXTENDED_REPLY_MAGIC);
            b.put_u16(REPLY_FLAG_DONE);
            b.put_u16(ty);
            b.put_u64(handle);
            b.put_u64(req_offset);
            b.put_u64(payload_len as u64);
        } else {
            b.put_u32(STRUCTURED_REPLY_MAGIC);
            b.put_u16(REPLY_FLAG_DONE);
            b.put_u16(ty);
            b.put_u64(handle);
            b.put_u32(payload_len as u32);
        }
        b
    }

    /// Header of an OFFSET_DATA chunk for a read of `data_len` bytes at `offset` (the data
    /// follows). One chunk answers the whole read, so its offset is the request's.
    pub fn data_header(self, handle: u64, offset: u64, data_len: usize) -> Bytes {
        let mut b = self.chunk(REPLY_TYPE_OFFSET_DATA, handle, offset, 8 + data_len, 8);
        b.put_u64(offset);
        b.freeze()
    }

    /// Success without data: a NONE chunk, or with simple framing a simple reply.
    pub fn done(self, handle: u64, req_offset: u64) -> Bytes {
        match self {
            Framing::Simple => simple_reply_header(0, handle),
            _ => self
                .chunk(REPLY_TYPE_NONE, handle, req_offset, 0, 0)
                .freeze(),
        }
    }

    /// An ERROR chunk carrying a message (at most the protocol's 4096-byte string).
    pub fn error_chunk(self, handle: u64, req_offset: u64, error: u32, msg: &str) -> Bytes {
        let m = &msg.as_bytes()[..msg.len().min(4096)];
        let n = 6 + m.len();
        let mut b = self.chunk(REPLY_TYPE_ERROR, handle, req_offset, n, n);
        b.put_u32(error);
        b.put_u16(m.len() as u16);
        b.put_slice(m);
        b.freeze()
    }
}

/// A transmission-phase request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub cmd: u16,
    pub handle: u64,
    pub offset: u64,
    /// A 32-bit field in compact requests, 64-bit in extended ones.
    pub length: u64,
}

/// Parse a request header of `framing`'s size from the front of `b` (which holds at least
/// that many bytes); `Err` with the magic found if it is not the one negotiated (the
/// connection must close).
pub fn parse_request(b: &[u8], framing: Framing) -> Result<RequestHeader, u32> {
    let be32 = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or_default());
    let be64 = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let extended = framing == Framing::Extended;
    let magic = be32(0);
    let expect = if extended {
        EXTENDED_REQUEST_MAGIC
    } else {
        REQUEST_MAGIC
    };
    if magic != expect {
        return Err(magic);
    }
    Ok(RequestHeader {
        flags: u16::from_be_bytes([b[4], b[5]]),
        cmd: u16::from_be_bytes([b[6], b[7]]),
        handle: be64(8),
        offset: be64(16),
        length: if extended { be64(24) } else { be32(24) as u64 },
    })
}
