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

/// A `NBD_REPLY_TYPE_BLOCK_STATUS` chunk (marked done) for `base:allocation`.
pub fn block_status_reply(handle: u64, extents: &[StatusExtent]) -> Bytes {
    let len = 4 + 8 * extents.len();
    let mut b = BytesMut::with_capacity(20 + len);
    b.put_u32(STRUCTURED_REPLY_MAGIC);
    b.put_u16(REPLY_FLAG_DONE);
    b.put_u16(REPLY_TYPE_BLOCK_STATUS);
    b.put_u64(handle);
    b.put_u32(len as u32);
    b.put_u32(BASE_ALLOCATION_ID);
    for e in extents {
        // A query covers at most one request's u32 length, so every run fits.
        b.put_u32(u32::try_from(e.length_bytes).unwrap_or(u32::MAX));
        let mut flags = 0;
        if e.hole {
            flags |= STATE_HOLE;
        }
        if e.zero {
            flags |= STATE_ZERO;
        }
        b.put_u32(flags);
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
        let b = block_status_reply(9, &e);
        assert_eq!(b.len(), 20 + 4 + 16);
        assert_eq!(u16::from_be_bytes([b[6], b[7]]), REPLY_TYPE_BLOCK_STATUS);
        assert_eq!(u32::from_be_bytes(b[16..20].try_into().unwrap()), 20);
        assert_eq!(u32::from_be_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_be_bytes(b[24..28].try_into().unwrap()), 4096);
        assert_eq!(u32::from_be_bytes(b[28..32].try_into().unwrap()), 3);
        assert_eq!(u32::from_be_bytes(b[36..40].try_into().unwrap()), 0);
    }
}
