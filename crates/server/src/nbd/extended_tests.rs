//! Extended headers (`NBD_OPT_EXTENDED_HEADERS`): negotiation, 32-byte requests with 64-bit
//! lengths, every reply an extended chunk, `NBD_REPLY_TYPE_BLOCK_STATUS_EXT`. Each test here
//! fails on the server before extended headers (which refused option 11 as unsupported).

use bytes::Bytes;
use tiervisor_engine::{Errno, ReqKind, StatusExtent, VolumeId};

use super::conn::{Closing, Conn, Export, WireRequest};
use super::proto::*;
use crate::tls::TlsMode;

const GIB: u64 = 1 << 30;

fn exports() -> Vec<Export> {
    let e = |name: &str, volume, size_bytes, read_only| Export {
        name: name.into(),
        description: String::new(),
        volume: VolumeId(volume),
        size_bytes,
        rotational: false,
        read_only,
        deleted: false,
    };
    vec![e("big", 0, 128 * GIB, false), e("ro", 1, GIB, true)]
}

fn out(c: &mut Conn) -> Vec<u8> {
    let v: Vec<u8> = c.out.iter().flat_map(|b| b.iter().copied()).collect();
    let n = c.out_bytes;
    c.consumed(n);
    v
}

fn opt(o: u32, data: &[u8]) -> Vec<u8> {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&o.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

fn name(n: &str) -> Vec<u8> {
    let mut d = (n.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(n.as_bytes());
    d
}

fn go(export: &str) -> Vec<u8> {
    let mut d = name(export);
    d.extend_from_slice(&0u16.to_be_bytes());
    opt(OPT_GO, &d)
}

fn set_meta(export: &str) -> Vec<u8> {
    let mut d = name(export);
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend(name("base:allocation"));
    opt(OPT_SET_META_CONTEXT, &d)
}

/// Option replies as (option, reply type).
fn option_replies(mut b: &[u8]) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    while b.len() >= 20 {
        assert_eq!(&b[0..8], &OPT_REPLY_MAGIC.to_be_bytes());
        let o = u32::from_be_bytes(b[8..12].try_into().unwrap());
        let t = u32::from_be_bytes(b[12..16].try_into().unwrap());
        let n = u32::from_be_bytes(b[16..20].try_into().unwrap()) as usize;
        v.push((o, t));
        b = &b[20 + n..];
    }
    assert!(b.is_empty());
    v
}

/// An extended request: 32 bytes, 64-bit length.
fn ereq(flags: u16, cmd: u16, handle: u64, off: u64, len: u64) -> Vec<u8> {
    let mut b = EXTENDED_REQUEST_MAGIC.to_be_bytes().to_vec();
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// An extended reply chunk as the wire has it.
#[derive(Debug)]
struct Chunk {
    flags: u16,
    ty: u16,
    handle: u64,
    offset: u64,
    payload: Vec<u8>,
}

impl Chunk {
    fn error(&self) -> u32 {
        assert_eq!(self.ty, REPLY_TYPE_ERROR, "{self:?}");
        u32::from_be_bytes(self.payload[0..4].try_into().unwrap())
    }
}

/// Split output into extended chunks; anything else (a simple reply, a 20-byte structured
/// chunk, a short tail) fails the test.
fn chunks(mut b: &[u8]) -> Vec<Chunk> {
    let mut v = Vec::new();
    while !b.is_empty() {
        assert!(b.len() >= 32, "short reply {b:?}");
        let be64 = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
        let magic = u32::from_be_bytes(b[0..4].try_into().unwrap());
        assert_eq!(magic, EXTENDED_REPLY_MAGIC, "not an extended reply");
        let n = be64(24) as usize;
        v.push(Chunk {
            flags: u16::from_be_bytes([b[4], b[5]]),
            ty: u16::from_be_bytes([b[6], b[7]]),
            handle: be64(8),
            offset: be64(16),
            payload: b[32..32 + n].to_vec(),
        });
        b = &b[32 + n..];
    }
    v
}

/// Greeting to transmission on `big` with extended headers (after structured replies when
/// asked) and `base:allocation`.
fn extended(structured_first: bool) -> Conn {
    let mut c = Conn::new();
    out(&mut c);
    c.inbuf.extend_from_slice(&3u32.to_be_bytes());
    if structured_first {
        c.inbuf.extend(opt(OPT_STRUCTURED_REPLY, &[]));
    }
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    c.inbuf.extend(set_meta("big"));
    c.inbuf.extend(go("big"));
    c.process(&exports(), &mut Vec::new());
    let r = option_replies(&out(&mut c));
    assert!(r.iter().all(|x| x.1 != REP_ERR_UNSUP), "{r:?}");
    assert!(c.in_transmission() && c.framing() == Framing::Extended);
    c
}

fn run(c: &mut Conn, bytes: &[u8]) -> Vec<WireRequest> {
    let mut reqs = Vec::new();
    c.inbuf.extend_from_slice(bytes);
    c.process(&exports(), &mut reqs);
    reqs
}

#[test]
fn negotiation_follows_the_spec() {
    let ex = exports();
    // Without structured replies; with data refused; twice refused; structured replies
    // afterwards refused with EXT_HEADER_REQD; SET_META_CONTEXT needs no structured replies.
    let mut c = Conn::new();
    out(&mut c);
    c.inbuf.extend_from_slice(&3u32.to_be_bytes());
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, b"x"));
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    c.inbuf.extend(opt(OPT_STRUCTURED_REPLY, &[]));
    c.inbuf.extend(set_meta("big"));
    c.inbuf.extend(go("big"));
    c.process(&ex, &mut Vec::new());
    let types: Vec<u32> = option_replies(&out(&mut c)).iter().map(|r| r.1).collect();
    assert_eq!(
        types,
        vec![
            REP_ERR_INVALID,
            REP_ACK,
            REP_ERR_INVALID,
            REP_ERR_EXT_HEADER_REQD,
            REP_META_CONTEXT,
            REP_ACK,
            REP_INFO,
            REP_ACK
        ]
    );
    assert_eq!(c.framing(), Framing::Extended);
    // After structured replies it upgrades them.
    assert_eq!(extended(true).framing(), Framing::Extended);

    // NBD_OPT_EXPORT_NAME is forbidden after extended headers and cannot fail politely.
    let mut d = Conn::new();
    d.inbuf.extend_from_slice(&3u32.to_be_bytes());
    d.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    d.inbuf.extend(opt(OPT_EXPORT_NAME, b"big"));
    d.process(&ex, &mut Vec::new());
    assert!(matches!(d.closing, Some(Closing::Abort(_))) && !d.in_transmission());

    // STARTTLS forgets extended headers and the contexts: compact requests follow.
    let mut t = Conn::new();
    t.tls_mode = TlsMode::On;
    out(&mut t);
    t.inbuf.extend_from_slice(&3u32.to_be_bytes());
    t.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    t.inbuf.extend(set_meta("big"));
    t.inbuf.extend(opt(OPT_STARTTLS, &[]));
    t.process(&ex, &mut Vec::new());
    assert!(t.wants_tls());
    t.tls_started();
    assert_eq!(t.framing(), Framing::Simple);
    t.inbuf.extend(go("big"));
    let mut compact = REQUEST_MAGIC.to_be_bytes().to_vec();
    compact.extend_from_slice(&0u16.to_be_bytes());
    compact.extend_from_slice(&CMD_BLOCK_STATUS.to_be_bytes());
    compact.extend_from_slice(&7u64.to_be_bytes());
    compact.extend_from_slice(&0u64.to_be_bytes());
    compact.extend_from_slice(&4096u32.to_be_bytes());
    out(&mut t);
    assert!(run(&mut t, &compact).is_empty());
    assert!(t.in_transmission() && t.closing.is_none());
    assert!(t.status_queries.is_empty(), "contexts survived STARTTLS");
    let o = out(&mut t);
    // GO's replies, then a simple EINVAL reply (16 bytes) for the block status.
    let tail = &o[o.len() - 16..];
    assert_eq!(&tail[0..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(&tail[4..8], &EINVAL.to_be_bytes());
}

#[test]
fn transmission_flags_offer_df_with_extended_headers() {
    let mut c = Conn::new();
    out(&mut c);
    c.inbuf.extend_from_slice(&3u32.to_be_bytes());
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    c.inbuf.extend(go("big"));
    c.process(&exports(), &mut Vec::new());
    let o = out(&mut c);
    // ACK (20), then NBD_REP_INFO: header (20), type (2), size (8), flags (2).
    let info = &o[20..];
    assert_eq!(&info[12..16], &REP_INFO.to_be_bytes());
    let tf = u16::from_be_bytes([info[30], info[31]]);
    assert!(tf & TFLAG_SEND_DF != 0);
}

#[test]
fn every_command_gets_an_extended_reply_echoing_handle_and_offset() {
    let mut c = extended(false);
    let mut bytes = ereq(0, CMD_READ, 1, 4096, 8);
    bytes.extend(ereq(
        CMD_FLAG_PAYLOAD_LEN | CMD_FLAG_FUA,
        CMD_WRITE,
        2,
        8192,
        5,
    ));
    bytes.extend_from_slice(b"hello");
    bytes.extend(ereq(0, CMD_FLUSH, 3, 0, 0));
    bytes.extend(ereq(0, CMD_TRIM, 4, GIB, 6 * GIB));
    bytes.extend(ereq(
        CMD_FLAG_NO_HOLE,
        CMD_WRITE_ZEROES,
        5,
        2 * GIB,
        5 * GIB,
    ));
    bytes.extend(ereq(0, CMD_CACHE, 6, 0, 8 * GIB));
    bytes.extend(ereq(
        CMD_FLAG_REQ_ONE,
        CMD_BLOCK_STATUS,
        7,
        3 * GIB,
        5 * GIB,
    ));
    bytes.extend(ereq(0, 99, 8, 12, 0)); // unknown command
    bytes.extend(ereq(0, CMD_READ, 9, 0, 0)); // an empty read
    let reqs = run(&mut c, &bytes);
    assert!(c.closing.is_none());
    let kinds: Vec<(u64, ReqKind, u64)> =
        reqs.iter().map(|r| (r.handle, r.kind, r.length)).collect();
    assert_eq!(
        kinds,
        vec![
            (1, ReqKind::Read, 8),
            (2, ReqKind::Write, 5),
            (3, ReqKind::Flush, 0),
            (4, ReqKind::Trim, 6 * GIB),
            (5, ReqKind::WriteZeroes, 5 * GIB),
            (9, ReqKind::Read, 0),
        ]
    );
    assert_eq!(reqs[1].payload.as_deref(), Some(&b"hello"[..]));
    assert!(reqs[1].fua && reqs[4].no_hole);
    let queries = std::mem::take(&mut c.status_queries);
    assert_eq!((queries.len(), queries[0].length), (1, 5 * GIB));
    // The engine answers; one extent longer than 4 GiB.
    for r in &reqs {
        let data = (r.cmd == CMD_READ).then(|| Bytes::from(vec![7u8; r.length as usize]));
        c.reply(r.handle, r.cmd, r.offset, Ok(()), data);
    }
    let one = StatusExtent {
        length_bytes: 5 * GIB,
        hole: true,
        zero: true,
    };
    c.status_reply(7, queries[0].offset, Ok(vec![one]));
    c.reply(10, CMD_WRITE, 777, Err(Errno::NoSpc), None);
    let got = chunks(&out(&mut c));
    let summary: Vec<(u64, u16, u64)> = got.iter().map(|x| (x.handle, x.ty, x.offset)).collect();
    assert_eq!(
        summary,
        vec![
            (6, REPLY_TYPE_NONE, 0), // CACHE, answered at once
            (8, REPLY_TYPE_ERROR, 12),
            (1, REPLY_TYPE_OFFSET_DATA, 4096),
            (2, REPLY_TYPE_NONE, 8192),
            (3, REPLY_TYPE_NONE, 0),
            (4, REPLY_TYPE_NONE, GIB),
            (5, REPLY_TYPE_NONE, 2 * GIB),
            (9, REPLY_TYPE_NONE, 0),
            (7, REPLY_TYPE_BLOCK_STATUS_EXT, 3 * GIB),
            (10, REPLY_TYPE_ERROR, 777),
        ]
    );
    assert!(got.iter().all(|x| x.flags == REPLY_FLAG_DONE));
    assert_eq!(got[1].error(), EINVAL);
    assert_eq!(got[9].error(), 28); // ENOSPC
    // OFFSET_DATA: the data's offset, then the data.
    let data = &got[2].payload;
    assert_eq!(&data[..8], &4096u64.to_be_bytes());
    assert_eq!(&data[8..], &[7u8; 8]);
    // BLOCK_STATUS_EXT: context id, descriptor count, 64-bit length and flags.
    let bs = &got[8].payload;
    assert_eq!(bs.len(), 8 + 16);
    assert_eq!(&bs[0..4], &super::meta::BASE_ALLOCATION_ID.to_be_bytes());
    assert_eq!(&bs[4..8], &1u32.to_be_bytes());
    assert_eq!(&bs[8..16], &(5 * GIB).to_be_bytes());
    assert_eq!(&bs[16..24], &3u64.to_be_bytes());
    assert_eq!(c.in_flight, 0);
}

#[test]
fn block_status_beyond_4_gib_and_contexts_set_before_extended_headers() {
    // SET_META_CONTEXT after structured replies, then extended headers: the context
    // stays, and is answered with the 64-bit reply type.
    let mut c = Conn::new();
    out(&mut c);
    c.inbuf.extend_from_slice(&3u32.to_be_bytes());
    c.inbuf.extend(opt(OPT_STRUCTURED_REPLY, &[]));
    c.inbuf.extend(set_meta("big"));
    c.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    c.inbuf.extend(go("big"));
    c.process(&exports(), &mut Vec::new());
    out(&mut c);
    let mut bytes = ereq(0, CMD_BLOCK_STATUS, 1, 0, 8 * GIB);
    // A whole 128 GiB export: looked at for its first 64 GiB.
    bytes.extend(ereq(0, CMD_BLOCK_STATUS, 2, 0, 128 * GIB));
    bytes.extend(ereq(0, CMD_BLOCK_STATUS, 3, 64 * GIB, 64 * GIB + 1)); // past the end
    bytes.extend(ereq(0, CMD_BLOCK_STATUS, 4, 0, 0));
    assert!(run(&mut c, &bytes).is_empty());
    let q: Vec<(u64, u64)> = c
        .status_queries
        .iter()
        .map(|q| (q.handle, q.length))
        .collect();
    assert_eq!(
        q,
        vec![(1, 8 * GIB), (2, super::meta::MAX_STATUS_QUERY_BYTES)]
    );
    let errs: Vec<(u64, u32)> = chunks(&out(&mut c))
        .iter()
        .map(|x| (x.handle, x.error()))
        .collect();
    assert_eq!(errs, vec![(3, EINVAL), (4, EINVAL)]);
    let runs = vec![
        StatusExtent {
            length_bytes: 4 * GIB + 4096,
            hole: false,
            zero: false,
        },
        StatusExtent {
            length_bytes: 4 * GIB - 4096,
            hole: true,
            zero: true,
        },
    ];
    c.status_reply(1, 0, Ok(runs));
    let got = chunks(&out(&mut c));
    let p = &got[0].payload;
    assert_eq!(got[0].ty, REPLY_TYPE_BLOCK_STATUS_EXT);
    assert_eq!(&p[4..8], &2u32.to_be_bytes());
    assert_eq!(&p[8..16], &(4 * GIB + 4096).to_be_bytes());
    assert_eq!(&p[24..32], &(4 * GIB - 4096).to_be_bytes());
    assert_eq!(&p[32..40], &3u64.to_be_bytes());
}

#[test]
fn lengths_the_server_cannot_serve_are_refused_and_the_stream_stays_in_sync() {
    let mut c = extended(false);
    let max = MAX_PAYLOAD_BYTES as u64;
    let mut bytes = ereq(0, CMD_READ, 1, 0, max + 1);
    bytes.extend(ereq(0, CMD_READ, 2, 0, 8 * GIB)); // a 64-bit read
    // WRITE without PAYLOAD_LEN, as QEMU 10 sends it: the payload follows all the same.
    bytes.extend(ereq(0, CMD_WRITE, 3, 0, 4));
    bytes.extend_from_slice(b"qemu");
    bytes.extend(ereq(CMD_FLAG_PAYLOAD_LEN, CMD_FLUSH, 4, 0, 6)); // a payload FLUSH lacks
    bytes.extend_from_slice(b"junk!!");
    // BLOCK_STATUS's payload form is not advertised (NBD_FLAG_BLOCK_STATUS_PAYLOAD).
    bytes.extend(ereq(CMD_FLAG_PAYLOAD_LEN, CMD_BLOCK_STATUS, 5, 0, 12));
    bytes.extend_from_slice(&[0; 12]);
    bytes.extend(ereq(1 << 9, CMD_TRIM, 6, 0, 4096)); // unknown flag
    bytes.extend(ereq(CMD_FLAG_PAYLOAD_LEN, CMD_WRITE, 7, 0, 4));
    bytes.extend_from_slice(b"good");
    let reqs = run(&mut c, &bytes);
    assert!(c.closing.is_none());
    let got: Vec<(u64, Option<&[u8]>)> = reqs
        .iter()
        .map(|r| (r.handle, r.payload.as_deref()))
        .collect();
    assert_eq!(got, vec![(3, Some(&b"qemu"[..])), (7, Some(&b"good"[..]))]);
    let errs: Vec<(u64, u32)> = chunks(&out(&mut c))
        .iter()
        .map(|x| (x.handle, x.error()))
        .collect();
    assert_eq!(
        errs,
        vec![
            (1, EOVERFLOW),
            (2, EOVERFLOW),
            (4, EINVAL),
            (5, EINVAL),
            (6, EINVAL)
        ]
    );
    // Writes to a read-only export: EPERM, in an extended chunk.
    let mut r = Conn::new();
    r.inbuf.extend_from_slice(&3u32.to_be_bytes());
    r.inbuf.extend(opt(OPT_EXTENDED_HEADERS, &[]));
    r.inbuf.extend(go("ro"));
    r.process(&exports(), &mut Vec::new());
    out(&mut r);
    let mut w = ereq(CMD_FLAG_PAYLOAD_LEN, CMD_WRITE, 1, 0, 3);
    w.extend_from_slice(b"abc");
    w.extend(ereq(0, CMD_TRIM, 2, 0, 4 * GIB - 1)); // beyond the export, still EPERM
    assert!(run(&mut r, &w).is_empty());
    let errs: Vec<u32> = chunks(&out(&mut r)).iter().map(|x| x.error()).collect();
    assert_eq!(errs, vec![EPERM, EPERM]);
}

#[test]
fn malformed_extended_headers_close_the_connection() {
    // A payload beyond the advertised maximum: hard disconnect (the spec's SHOULD).
    for (flags, cmd) in [
        (CMD_FLAG_PAYLOAD_LEN, CMD_WRITE),
        (0, CMD_WRITE),
        (CMD_FLAG_PAYLOAD_LEN, CMD_TRIM),
    ] {
        let mut c = extended(false);
        let n = MAX_PAYLOAD_BYTES as u64 + 1;
        run(&mut c, &ereq(flags, cmd, 1, 0, n));
        assert!(
            matches!(c.closing, Some(Closing::Abort(_))),
            "{flags} {cmd}"
        );
    }
    // A compact header after extended headers were negotiated.
    let mut d = extended(false);
    let mut compact = REQUEST_MAGIC.to_be_bytes().to_vec();
    compact.extend_from_slice(&[0; 28]);
    run(&mut d, &compact);
    assert!(matches!(d.closing, Some(Closing::Abort(ref m)) if m.contains("magic")));
    // And an extended one on a compact connection.
    let mut e = Conn::new();
    e.inbuf.extend_from_slice(&3u32.to_be_bytes());
    e.inbuf.extend(go("big"));
    e.process(&exports(), &mut Vec::new());
    assert!(e.in_transmission() && e.framing() == Framing::Simple);
    run(&mut e, &ereq(0, CMD_FLUSH, 1, 0, 0));
    assert!(matches!(e.closing, Some(Closing::Abort(_))));
    // A header split across reads waits for its last byte.
    let mut f = extended(false);
    let h = ereq(0, CMD_FLUSH, 1, 0, 0);
    assert!(run(&mut f, &h[..31]).is_empty());
    assert_eq!(run(&mut f, &h[31..]).len(), 1);
}
