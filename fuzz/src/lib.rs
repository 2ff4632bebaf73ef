//! What each fuzz target does with its input. Besides "no panic", each checks a property:
//! the NBD connection's output accounting stays exact and every request is answered once;
//! a decoder's result re-encodes to bytes that decode to the same value.
//!
//! On-disk structures are sealed with a CRC, so random bytes almost never get past the
//! check. Each decoder target therefore decodes the input twice: as it is, and "sealed"
//! (the structure's magic written at the front and a valid CRC at the end), which lets the
//! fuzzer explore the parser behind the checksum.

use bytes::Bytes;
use tiervisor_engine::journal::Block;
use tiervisor_engine::journal::checkpoint::{CkptChunkHeader, decode_state};
use tiervisor_engine::layout::{
    BLOCK_BYTES, JournalHeader, Superblock, VOLTAB_SLOT_BYTES, VolumeTable, decode_superblock_pair,
};
use tiervisor_engine::{Medium, StatusExtent, VolumeId};
use tiervisor_server::nbd::conn::{Conn, Export};
use tiervisor_server::nbd::proto::CMD_READ;
use tiervisor_server::tls::TlsMode;

fn exports() -> Vec<Export> {
    let e = |name: &str, volume, size_bytes, read_only| Export {
        name: name.into(),
        description: format!("fuzz {name}"),
        volume: VolumeId(volume),
        size_bytes,
        rotational: false,
        read_only,
        deleted: false,
    };
    vec![e("vm1", 0, 1 << 30, false), e("ro", 1, 1 << 20, true)]
}

/// The bytes a client sends to get from the greeting to transmission on `vm1` with
/// structured replies (or, `extended`, extended headers) and `base:allocation` (the
/// requests target starts from here).
pub fn handshake_prefix(extended: bool) -> Vec<u8> {
    let opt = |o: u32, d: &[u8]| {
        let mut b = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
        b.extend_from_slice(&o.to_be_bytes());
        b.extend_from_slice(&(d.len() as u32).to_be_bytes());
        b.extend_from_slice(d);
        b
    };
    let mut meta = 3u32.to_be_bytes().to_vec();
    meta.extend_from_slice(b"vm1");
    meta.extend_from_slice(&1u32.to_be_bytes());
    meta.extend_from_slice(&15u32.to_be_bytes());
    meta.extend_from_slice(b"base:allocation");
    let mut go = 3u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"vm1");
    go.extend_from_slice(&0u16.to_be_bytes());
    let mut b = 3u32.to_be_bytes().to_vec();
    b.extend(opt(if extended { 11 } else { 8 }, &[]));
    b.extend(opt(10, &meta));
    b.extend(opt(7, &go));
    b
}

/// Feed `data` to a connection in pieces (cut where the input says), answering every
/// request as an engine would, and check the connection's bookkeeping. `tls_by_input`: the
/// first byte also picks the TLS policy (off, on, require); after an acknowledged
/// `NBD_OPT_STARTTLS` the rest of that piece is taken as the TLS handshake (as the stream
/// takes it) and later pieces as the plaintext TLS delivers.
fn drive_conn(prefix: &[u8], data: &[u8], tls_by_input: bool) {
    let ex = exports();
    let mut c = Conn::new();
    let mut reqs = Vec::new();
    c.inbuf.extend_from_slice(prefix);
    c.process(&ex, &mut reqs);
    // The first byte picks the piece size, so split headers and payloads get exercised.
    let (step, body) = match data.split_first() {
        Some((&s, rest)) => {
            if tls_by_input {
                c.tls_mode = [TlsMode::Off, TlsMode::On, TlsMode::Require][s as usize % 3];
            }
            (1 + (s & 0x7f) as usize * 7, rest)
        }
        None => (1, data),
    };
    for piece in body.chunks(step) {
        if c.closing.is_some() {
            break;
        }
        c.inbuf.extend_from_slice(piece);
        c.process(&ex, &mut reqs);
        let queries = std::mem::take(&mut c.status_queries);
        let answered = reqs.len() + queries.len();
        let before = c.in_flight;
        assert!(
            before as usize >= answered,
            "in_flight below outstanding requests"
        );
        for r in reqs.drain(..) {
            let data = (r.cmd == CMD_READ).then(|| Bytes::from(vec![0u8; r.length as usize]));
            c.reply(r.handle, r.cmd, r.offset, Ok(()), data);
        }
        for q in queries {
            let e = StatusExtent {
                length_bytes: q.length,
                hole: true,
                zero: true,
            };
            c.status_reply(q.handle, q.offset, Ok(vec![e]));
        }
        assert_eq!(c.in_flight as usize, before as usize - answered);
        let queued: usize = c.out.iter().map(|b| b.len()).sum();
        assert_eq!(queued, c.out_bytes, "output accounting drifted");
        // Drain the output in two uneven steps, as a socket would.
        let half = c.out_bytes / 3;
        c.consumed(half);
        let rest = c.out_bytes;
        c.consumed(rest);
        assert!(c.out.is_empty() && c.out_bytes == 0);
        if c.wants_tls() {
            assert!(c.tls_mode != TlsMode::Off, "STARTTLS accepted with TLS off");
            let _handshake = c.tls_started();
            assert!(c.inbuf.is_empty() && !c.wants_tls());
        }
        assert!(
            c.tls_mode != TlsMode::Require || c.tls_active() || !c.in_transmission(),
            "transmission without TLS where TLS is required"
        );
    }
}

/// NBD from the greeting on: flags, options, then whatever follows.
pub fn nbd_handshake(data: &[u8]) {
    drive_conn(&[], data, true);
}

/// NBD in transmission (block status negotiated): requests. The first byte's top bit
/// picks extended headers (32-byte requests, 64-bit lengths) or structured replies.
pub fn nbd_requests(data: &[u8]) {
    let extended = data.first().is_some_and(|b| b & 0x80 != 0);
    drive_conn(&handshake_prefix(extended), data, false);
}

/// `data` as a `len`-byte structure: magic at the front, a valid CRC32C at the end.
pub fn sealed(data: &[u8], len: usize, magic: &[u8]) -> Vec<u8> {
    let mut b = data.to_vec();
    b.resize(len, 0);
    b[..magic.len()].copy_from_slice(magic);
    let crc = crc32c::crc32c(&b[..len - 4]);
    b[len - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

const SB_MAGIC: &[u8] = b"TVPOOL01";
const VT_MAGIC: &[u8] = b"TVVOLTAB";
const JH_MAGIC: &[u8] = b"TVJHEAD1";
const CKPT_MAGIC: &[u8] = b"TVCKPT01";
const STATE_MAGIC: &[u8] = b"TVSTATE1";

pub fn superblock(data: &[u8]) {
    let _ = decode_superblock_pair(data);
    let bs = BLOCK_BYTES as usize;
    if let Ok(sb) = Superblock::decode(&sealed(data, bs, SB_MAGIC)) {
        // Names are stored in 63 bytes: a decoded one always fits, so it round-trips.
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb.clone()));
        assert!(matches!(sb.medium, Medium::Ssd | Medium::Hdd));
    }
}

pub fn volume_table(data: &[u8]) {
    let _ = VolumeTable::decode(data);
    if let Some(vt) = VolumeTable::decode(&sealed(data, VOLTAB_SLOT_BYTES as usize, VT_MAGIC)) {
        // Compared as bytes, not as structs: a recorded job's `gamma` is an f64 kept by its
        // bits, and a NaN there (refused when the job resumes, by `MigrationParams::validate`)
        // is unequal to itself though it round-trips exactly.
        let bytes = vt.encode();
        let again = VolumeTable::decode(&bytes).map(|t| t.encode());
        assert_eq!(again.as_deref(), Some(&bytes[..]));
    }
}

/// Journal blocks and journal headers (the first byte picks which).
pub fn journal(data: &[u8]) {
    let bs = BLOCK_BYTES as usize;
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let _ = Block::decode(rest);
        // The block magic is a little-endian u32; take it from a real block.
        let magic = empty_block().encode()[..4].to_vec();
        if let Some(b) = Block::decode(&sealed(rest, bs, &magic)) {
            assert_eq!(Block::decode(&b.encode()), Some(b.clone()));
        }
    } else {
        let _ = JournalHeader::decode(rest);
        if let Some(h) = JournalHeader::decode(&sealed(rest, bs, JH_MAGIC)) {
            assert_eq!(JournalHeader::decode(&h.encode()), Some(h));
        }
    }
}

fn empty_block() -> Block {
    Block {
        volume_id: 0,
        block_seq: 0,
        mount_generation: 0,
        prev_crc: 0,
        first_record_seq: 0,
        records: Vec::new(),
    }
}

/// Checkpoint chunk headers (with their payload CRC made valid) and state payloads.
pub fn checkpoint(data: &[u8]) {
    let _ = CkptChunkHeader::decode(data);
    let hb = 64usize;
    let mut chunk = sealed(data, hb.max(data.len()), CKPT_MAGIC);
    if chunk.len() >= hb {
        // Make the payload CRC match whatever length the input names (bounded by it).
        let n = u32::from_le_bytes(chunk[35..39].try_into().unwrap_or_default()) as usize;
        let n = n.min(chunk.len() - hb);
        chunk[35..39].copy_from_slice(&(n as u32).to_le_bytes());
        let crc = crc32c::crc32c(&chunk[hb..hb + n]);
        chunk[39..43].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c::crc32c(&chunk[..hb - 4]);
        chunk[hb - 4..hb].copy_from_slice(&hcrc.to_le_bytes());
        if let Some((h, payload)) = CkptChunkHeader::decode(&chunk) {
            assert_eq!(payload.len(), h.payload_bytes as usize);
        }
    }
    // The state payload: the map size is what the volume's configuration expects; take
    // it from the input, small, so the decoder's allocation stays bounded as in real use.
    let expect = data.first().copied().unwrap_or(0) as u64;
    let mut state = STATE_MAGIC.to_vec();
    state.extend_from_slice(&expect.to_le_bytes());
    state.extend_from_slice(data.get(1..).unwrap_or_default());
    let _ = decode_state(data, expect);
    if let Some((map, overlay)) = decode_state(&state, expect) {
        assert_eq!(map.len(), expect);
        let mut last_end = 0;
        for (s, e, _) in overlay.iter() {
            assert!(s < e && s >= last_end, "overlay extents overlap");
            last_end = e;
        }
    }
}

/// A trace file of any format (the first byte picks the reading options): a trace that
/// loads has requests, each of at least one byte, ending within 2^64, in arrival order.
pub fn trace(data: &[u8]) {
    use tiervisor_workload::trace::{AssumeOp, BlkEvent, LoadOptions};
    use tiervisor_workload::{Trace, TraceFormat};
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let formats = TraceFormat::all();
    let opts = LoadOptions {
        format: match pick as usize % (formats.len() + 1) {
            0 => None,
            i => Some(formats[i - 1]),
        },
        blkparse_event: if pick & 0x80 != 0 {
            BlkEvent::Queue
        } else {
            BlkEvent::Issue
        },
        block_size_bytes: (pick & 0x40 != 0).then_some(4096),
        assume_op: (pick & 0x20 != 0).then_some(AssumeOp::Mix {
            read_fraction: 0.5,
            seed: 1,
        }),
        spread_ticks: pick & 0x10 != 0,
    };
    if let Ok(t) = Trace::parse_with("fuzz", text, &opts) {
        assert!(!t.records.is_empty());
        for r in &t.records {
            assert!(r.len_bytes > 0);
            assert!(r.offset_bytes.checked_add(r.len_bytes).is_some());
        }
        assert!(t.records.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        let _ = t.warnings();
    }
}
