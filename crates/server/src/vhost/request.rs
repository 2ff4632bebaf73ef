//! virtio-blk requests (virtio 1.2, 5.2.6): a descriptor chain read as two byte streams,
//! the device-readable one (the 16-byte header, then write data or discard ranges) and the
//! device-writable one (read data or the device id, then the status byte). Any layout of
//! the buffers over descriptors is accepted, as VIRTIO_F_VERSION_1 requires.

use bytes::Bytes;
use tiervisor_engine::ReqKind;
use virtio_bindings::virtio_blk::*;
use virtio_queue::DescriptorChain;
use vm_memory::{Address as _, Bytes as _, GuestAddress, GuestMemory};

/// A guest buffer: address and length in bytes.
pub type Region = (GuestAddress, u32);

/// Largest read or write (the engine's `max_request_bytes`).
const MAX_DATA_BYTES: u64 = tiervisor_engine::config::MAX_REQUEST_BYTES;
const HEADER_BYTES: usize = 16;
const SECTOR_BYTES: u64 = 512;
/// The unmap flag of a discard or write-zeroes range.
const FLAG_UNMAP: u32 = 1;

pub enum Parsed {
    /// Answered without the engine: GET_ID, or a request refused.
    Now {
        writable: Vec<Region>,
        status: u8,
        data: Option<Vec<u8>>,
    },
    /// For the engine.
    Engine {
        kind: ReqKind,
        offset_bytes: u64,
        len_bytes: u64,
        no_hole: bool,
        payload: Option<Bytes>,
        writable: Vec<Region>,
    },
}

fn total(regions: &[Region]) -> u64 {
    regions.iter().map(|r| u64::from(r.1)).sum()
}

fn refuse(writable: Vec<Region>, status: u32) -> Parsed {
    Parsed::Now {
        writable,
        status: status as u8,
        data: None,
    }
}

/// Read `len` bytes of the readable stream from byte `skip` on.
fn read_stream<M: GuestMemory>(
    mem: &M,
    regions: &[Region],
    skip: u64,
    len: u64,
) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let (mut pos, mut filled) = (0u64, 0usize);
    for &(addr, n) in regions {
        let (start, end) = (pos, pos + u64::from(n));
        pos = end;
        if end <= skip || filled == out.len() {
            continue;
        }
        let from = skip.max(start) - start;
        let take = ((end - start - from) as usize).min(out.len() - filled);
        let a = addr.checked_add(from)?;
        mem.read_slice(&mut out[filled..filled + take], a).ok()?;
        filled += take;
    }
    (filled == out.len()).then_some(out)
}

/// What a request is checked against.
pub struct Target<'a> {
    pub size_bytes: u64,
    pub read_only: bool,
    /// GET_ID's answer (the volume name; at most 20 bytes are sent).
    pub id: &'a str,
}

/// Parse one chain.
pub fn parse<M, G>(mem: &G, chain: DescriptorChain<M>, t: &Target<'_>) -> Parsed
where
    M: std::ops::Deref<Target = G>,
    G: GuestMemory,
{
    let (size_bytes, read_only) = (t.size_bytes, t.read_only);
    let mut readable = Vec::new();
    let mut writable = Vec::new();
    let mut misordered = false;
    for d in chain {
        if d.is_write_only() {
            writable.push((d.addr(), d.len()));
        } else {
            // The spec puts every readable buffer before the writable ones.
            misordered |= !writable.is_empty();
            readable.push((d.addr(), d.len()));
        }
    }
    let in_bytes = total(&writable);
    let out_bytes = total(&readable);
    if in_bytes == 0 || misordered || out_bytes < HEADER_BYTES as u64 {
        // No room for a status byte, or no header: nothing sensible can be answered.
        return refuse(writable, VIRTIO_BLK_S_IOERR);
    }
    let Some(h) = read_stream(mem, &readable, 0, HEADER_BYTES as u64) else {
        return refuse(writable, VIRTIO_BLK_S_IOERR);
    };
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let kind = le32(&h[0..4]);
    let sector = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
    let data_out = out_bytes - HEADER_BYTES as u64;
    let data_in = in_bytes - 1;
    let range = |len: u64| -> Option<u64> {
        let off = sector.checked_mul(SECTOR_BYTES)?;
        (off.checked_add(len)? <= size_bytes).then_some(off)
    };
    let engine = |kind, offset_bytes, len_bytes, no_hole, payload, writable| Parsed::Engine {
        kind,
        offset_bytes,
        len_bytes,
        no_hole,
        payload,
        writable,
    };
    match kind {
        VIRTIO_BLK_T_IN => {
            if !data_in.is_multiple_of(SECTOR_BYTES) || data_in > MAX_DATA_BYTES {
                return refuse(writable, VIRTIO_BLK_S_IOERR);
            }
            match range(data_in) {
                Some(off) => engine(ReqKind::Read, off, data_in, false, None, writable),
                None => refuse(writable, VIRTIO_BLK_S_IOERR),
            }
        }
        VIRTIO_BLK_T_OUT => {
            if read_only || !data_out.is_multiple_of(SECTOR_BYTES) || data_out > MAX_DATA_BYTES {
                return refuse(writable, VIRTIO_BLK_S_IOERR);
            }
            let Some(off) = range(data_out) else {
                return refuse(writable, VIRTIO_BLK_S_IOERR);
            };
            match read_stream(mem, &readable, HEADER_BYTES as u64, data_out) {
                Some(p) => engine(
                    ReqKind::Write,
                    off,
                    data_out,
                    false,
                    Some(Bytes::from(p)),
                    writable,
                ),
                None => refuse(writable, VIRTIO_BLK_S_IOERR),
            }
        }
        VIRTIO_BLK_T_FLUSH => engine(ReqKind::Flush, 0, 0, false, None, writable),
        VIRTIO_BLK_T_GET_ID => {
            // A NUL-terminated string when shorter than the 20 bytes the spec allows.
            let mut id: Vec<u8> = t.id.bytes().take(VIRTIO_BLK_ID_BYTES as usize).collect();
            if id.len() < VIRTIO_BLK_ID_BYTES as usize {
                id.push(0);
            }
            Parsed::Now {
                writable,
                status: VIRTIO_BLK_S_OK as u8,
                data: Some(id),
            }
        }
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES if read_only => {
            refuse(writable, VIRTIO_BLK_S_UNSUPP)
        }
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
            // max_discard_seg = max_write_zeroes_seg = 1: exactly one range.
            if data_out != 16 {
                return refuse(writable, VIRTIO_BLK_S_IOERR);
            }
            let Some(r) = read_stream(mem, &readable, HEADER_BYTES as u64, 16) else {
                return refuse(writable, VIRTIO_BLK_S_IOERR);
            };
            let first = u64::from_le_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
            let sectors = le32(&r[8..12]);
            let flags = le32(&r[12..16]);
            let discard = kind == VIRTIO_BLK_T_DISCARD;
            // Unknown flags, and unmap on a discard, are UNSUPP (virtio 1.2, 5.2.6.2).
            if flags & !FLAG_UNMAP != 0 || (discard && flags != 0) {
                return refuse(writable, VIRTIO_BLK_S_UNSUPP);
            }
            let len = u64::from(sectors) * SECTOR_BYTES;
            let off = first.checked_mul(SECTOR_BYTES);
            match off.filter(|o| o.checked_add(len).is_some_and(|e| e <= size_bytes)) {
                Some(off) if discard => engine(ReqKind::Trim, off, len, false, None, writable),
                // Without the unmap flag the range must stay allocated.
                Some(off) => engine(
                    ReqKind::WriteZeroes,
                    off,
                    len,
                    flags & FLAG_UNMAP == 0,
                    None,
                    writable,
                ),
                None => refuse(writable, VIRTIO_BLK_S_IOERR),
            }
        }
        _ => refuse(writable, VIRTIO_BLK_S_UNSUPP),
    }
}

/// Write `data` (at most all but the last writable byte) and then the status byte into the
/// writable stream; the used length is what was written.
pub fn finish<M: GuestMemory>(
    mem: &M,
    writable: &[Region],
    status: u8,
    data: Option<&[u8]>,
) -> u32 {
    let room = total(writable).saturating_sub(1);
    let data = data.unwrap_or(&[]);
    let n = (data.len() as u64).min(room) as usize;
    let mut written = 0usize;
    let mut pos = 0u64;
    for &(addr, len) in writable {
        let (start, end) = (pos, pos + u64::from(len));
        pos = end;
        if written < n {
            let take = (len as usize).min(n - written);
            let _ = mem.write_slice(&data[written..written + take], addr);
            written += take;
        }
        if end == room + 1
            && let Some(a) = addr.checked_add(room - start)
        {
            let _ = mem.write_slice(&[status], a);
        }
    }
    (n + 1) as u32
}
