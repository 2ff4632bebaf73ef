//! NBD wire constants and encoders (the NBD project's `doc/proto.md`).

use bytes::{BufMut, Bytes, BytesMut};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

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

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// Block status flags of `base:allocation`.
pub const STATE_HOLE: u32 = 1;
pub const STATE_ZERO: u32 = 2;

// Errors on the wire.
pub const EPERM: u32 = 1;
pub const EINVAL: u32 = 22;
pub const EOVERFLOW: u32 = 75;

pub const REQUEST_HEADER_BYTES: usize = 28;
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

/// Header of a structured OFFSET_DATA chunk (the data follows) marked done.
pub fn structured_data_header(handle: u64, offset: u64, data_len: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(28);
    b.put_u32(STRUCTURED_REPLY_MAGIC);
    b.put_u16(REPLY_FLAG_DONE);
    b.put_u16(REPLY_TYPE_OFFSET_DATA);
    b.put_u64(handle);
    b.put_u32(8 + data_len as u32);
    b.put_u64(offset);
    b.freeze()
}

pub fn structured_done(handle: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(20);
    b.put_u32(STRUCTURED_REPLY_MAGIC);
    b.put_u16(REPLY_FLAG_DONE);
    b.put_u16(REPLY_TYPE_NONE);
    b.put_u64(handle);
    b.put_u32(0);
    b.freeze()
}

pub fn structured_error(handle: u64, error: u32, msg: &str) -> Bytes {
    let m = &msg.as_bytes()[..msg.len().min(4096)];
    let mut b = BytesMut::with_capacity(26 + m.len());
    b.put_u32(STRUCTURED_REPLY_MAGIC);
    b.put_u16(REPLY_FLAG_DONE);
    b.put_u16(REPLY_TYPE_ERROR);
    b.put_u64(handle);
    b.put_u32(6 + m.len() as u32);
    b.put_u32(error);
    b.put_u16(m.len() as u16);
    b.put_slice(m);
    b.freeze()
}

/// A transmission-phase request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub cmd: u16,
    pub handle: u64,
    pub offset: u64,
    pub length: u32,
}

/// Parse a request header; `Err` if the magic is wrong (the connection must close).
pub fn parse_request(b: &[u8; REQUEST_HEADER_BYTES]) -> Result<RequestHeader, u32> {
    let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    if magic != REQUEST_MAGIC {
        return Err(magic);
    }
    Ok(RequestHeader {
        flags: u16::from_be_bytes([b[4], b[5]]),
        cmd: u16::from_be_bytes([b[6], b[7]]),
        handle: u64::from_be_bytes(b[8..16].try_into().unwrap_or([0; 8])),
        offset: u64::from_be_bytes(b[16..24].try_into().unwrap_or([0; 8])),
        length: u32::from_be_bytes([b[24], b[25], b[26], b[27]]),
    })
}
