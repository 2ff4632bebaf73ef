//! Metadata contexts (`NBD_OPT_LIST_META_CONTEXT`, `NBD_OPT_SET_META_CONTEXT`) and the
//! `NBD_CMD_BLOCK_STATUS` reply. The only context offered is `base:allocation`: holes and
//! zeros from the engine's content mapping table, so clients skip what was never written.

use bytes::{BufMut, Bytes, BytesMut};
use tiervisor_engine::StatusExtent;

use super::proto::*;

pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id `base:allocation` gets on this server (any value is allowed; ours is fixed).
pub const BASE_ALLOCATION_ID: u32 = 1;
/// Runs in one block-status reply (8 bytes each); the client asks again for the rest.
pub const MAX_STATUS_EXTENTS: usize = 8192;
/// The longest range one block-status query looks at (a longer request is answered for
/// its first 64 GiB, which the protocol allows: the length is a hint). Compact requests
/// stop at 4 GiB; 64-bit ones could ask for a whole export, which the engine walks chunk
/// by chunk on the shard's thread (64 GiB: 2^20 chunks of the smallest size, 64 KiB).
pub const MAX_STATUS_QUERY_BYTES: u64 = 64 << 30;
/// Longest export name or query accepted, as the protocol's string limit.
const MAX_STRING_BYTES: usize = 4096;

/// A meta-context option's payload: the export it is for and the queries.
#[derive(Debug, PartialEq, Eq)]
pub struct MetaRequest<'a> {
    pub export: &'a [u8],
    pub queries: Vec<&'a [u8]>,
}

/// Why a meta-context payload was refused (the reply type and a message).
pub type MetaError = (u32, &'static str);

/// Parse `u32 name length, name, u32 query count, (u32 length, query)*`.
pub fn parse_request(data: &[u8]) -> Result<MetaRequest<'_>, MetaError> {
    const BAD: MetaError = (REP_ERR_INVALID, "malformed meta context payload");
    let mut rest = data;
    let export = take_string(&mut rest).ok_or(BAD)?;
    let n = take_u32(&mut rest).ok_or(BAD)? as usize;
    // Each query needs at least its 4-byte length: bound the count by the payload.
    if n > rest.len() / 4 {
        return Err(BAD);
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(take_string(&mut rest).ok_or(BAD)?);
    }
    if !rest.is_empty() {
        return Err(BAD);
    }
    if export.len() > MAX_STRING_BYTES || queries.iter().any(|q| q.len() > MAX_STRING_BYTES) {
        return Err((
            REP_ERR_TOO_BIG,
            "export name or query longer than 4096 bytes",
        ));
    }
    Ok(MetaRequest { export, queries })
}

fn take_u32(b: &mut &[u8]) -> Option<u32> {
    let (head, tail) = b.split_first_chunk::<4>()?;
    *b = tail;
    Some(u32::from_be_bytes(*head))
}

fn take_string<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = take_u32(b)? as usize;
    if b.len() < n {
        return None;
    }
    let (s, tail) = b.split_at(n);
    *b = tail;
    Some(s)
}

/// Whether a query selects `base:allocation`. For LIST, the empty list and the namespace
/// query `base:` select every context of the namespace; SET needs the exact name.
pub fn selects_allocation(queries: &[&[u8]], list: bool) -> bool {
    if list && queries.is_empty() {
        return true;
    }
    queries
        .iter()
        .any(|q| *q == BASE_ALLOCATION.as_bytes() || (list && *q == b"base:"))
}

/// The `NBD_REP_META_CONTEXT` reply naming `base:allocation`.
pub fn context_reply(opt: u32) -> Bytes {
    let mut d = BytesMut::with_capacity(4 + BASE_ALLOCATION.len());
    d.put_u32(BASE_ALLOCATION_ID);
    d.put_slice(BASE_ALLOCATION.as_bytes());
    option_reply(opt, REP_META_CONTEXT, &d)
}

/// The block-status chunk (marked done) for `base:allocation`: `NBD_REPLY_TYPE_BLOCK_STATUS`
/// (32-bit extent lengths) with structured replies, `NBD_REPLY_TYPE_BLOCK_STATUS_EXT`
/// (64-bit lengths and flags, and a descriptor count) with extended headers.
pub fn block_status_reply(
    framing: Framing,
    handle: u64,
    req_offset: u64,
    extents: &[StatusExtent],
) -> Bytes {
    let flags = |e: &StatusExtent| {
        let mut f = 0;
        if e.hole {
            f |= STATE_HOLE;
        }
        if e.zero {
            f |= STATE_ZERO;
        }
        f
    };
    if framing == Framing::Extended {
        let len = 8 + 16 * extents.len();
        let mut b = framing.chunk(REPLY_TYPE_BLOCK_STATUS_EXT, handle, req_offset, len, len);
        b.put_u32(BASE_ALLOCATION_ID);
        b.put_u32(extents.len() as u32);
        for e in extents {
            b.put_u64(e.length_bytes);
            b.put_u64(flags(e) as u64);
        }
        return b.freeze();
    }
    let len = 4 + 8 * extents.len();
    let mut b = framing.chunk(REPLY_TYPE_BLOCK_STATUS, handle, req_offset, len, len);
    b.put_u32(BASE_ALLOCATION_ID);
    for e in extents {
        // A compact request's length is 32-bit and a query covers no more, so every run fits.
        b.put_u32(u32::try_from(e.length_bytes).unwrap_or(u32::MAX));
        b.put_u32(flags(e));
    }
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(export: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = (export.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(export.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    #[test]
    fn payloads_parse_and_malformed_ones_are_refused() {
        let d = payload("vm1", &["base:allocation", "qemu:dirty-bitmap:x"]);
        let r = parse_request(&d).unwrap();
        assert_eq!(r.export, b"vm1");
        assert_eq!(
            r.queries,
            vec![&b"base:allocation"[..], b"qemu:dirty-bitmap:x"]
        );
        // Truncated anywhere, or with trailing bytes, or a huge query count.
        for cut in 0..d.len() {
            assert_eq!(parse_request(&d[..cut]).unwrap_err().0, REP_ERR_INVALID);
        }
        let mut long = d.clone();
        long.push(0);
        assert!(parse_request(&long).is_err());
        let mut many = payload("", &[]);
        many[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_request(&many).is_err());
        let big = "q".repeat(5000);
        assert_eq!(
            parse_request(&payload("vm1", &[&big])).unwrap_err().0,
            REP_ERR_TOO_BIG
        );
    }

    #[test]
    fn queries_select_base_allocation() {
        assert!(selects_allocation(&[], true));
        assert!(!selects_allocation(&[], false));
        assert!(selects_allocation(&[b"base:"], true));
        assert!(!selects_allocation(&[b"base:"], false));
        assert!(selects_allocation(&[b"x:y", b"base:allocation"], false));
        assert!(!selects_allocation(&[b"base:allocationx"], true));
    }

    #[test]
    fn block_status_reply_layout() {
        let e = [
            StatusExtent {
                length_bytes: 4096,
                hole: true,
                zero: true,
            },
            StatusExtent {
                length_bytes: 512,
                hole: false,
                zero: false,
            },
        ];
        let b = block_status_reply(Framing::Structured, 9, 0, &e);
        assert_eq!(b.len(), 20 + 4 + 16);
        assert_eq!(u16::from_be_bytes([b[6], b[7]]), REPLY_TYPE_BLOCK_STATUS);
        assert_eq!(u32::from_be_bytes(b[16..20].try_into().unwrap()), 20);
        assert_eq!(u32::from_be_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_be_bytes(b[24..28].try_into().unwrap()), 4096);
        assert_eq!(u32::from_be_bytes(b[28..32].try_into().unwrap()), 3);
        assert_eq!(u32::from_be_bytes(b[36..40].try_into().unwrap()), 0);
    }

    #[test]
    fn extended_block_status_reply_layout_carries_64_bit_lengths() {
        let e = [
            StatusExtent {
                length_bytes: 6 << 30,
                hole: true,
                zero: true,
            },
            StatusExtent {
                length_bytes: 1 << 20,
                hole: false,
                zero: false,
            },
        ];
        let b = block_status_reply(Framing::Extended, 9, 1 << 40, &e);
        let be32 = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
        let be64 = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
        assert_eq!(b.len(), 32 + 8 + 2 * 16);
        assert_eq!(be32(0), EXTENDED_REPLY_MAGIC);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), REPLY_FLAG_DONE);
        assert_eq!(
            u16::from_be_bytes([b[6], b[7]]),
            REPLY_TYPE_BLOCK_STATUS_EXT
        );
        assert_eq!((be64(8), be64(16), be64(24)), (9, 1 << 40, 8 + 32));
        assert_eq!((be32(32), be32(36)), (BASE_ALLOCATION_ID, 2));
        assert_eq!((be64(40), be64(48)), (6 << 30, 3));
        assert_eq!((be64(56), be64(64)), (1 << 20, 0));
    }
}
