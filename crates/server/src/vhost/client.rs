//! A small vhost-user-blk frontend (what QEMU does, without a guest): guest memory is a
//! memfd mapped here and shared with the backend, the split virtqueues are laid out in it,
//! and requests are submitted and reaped directly. The tests drive the backend with it,
//! and `tiervisor vhost-bench` measures the backend without a VM.
//!
//! Memory layout: each queue gets a 64 KiB ring area (descriptor table, available ring,
//! used ring), then per slot a 16-byte header and a status byte, then per slot a data
//! buffer of `slot_data_bytes`. Slot `s` uses descriptors `3s, 3s+1, 3s+2`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering, fence};

use vhost::vhost_user::message::VhostUserConfigFlags;
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_blk::*;
use vmm_sys_util::eventfd::EventFd;

const RING_AREA: u64 = 64 << 10;
const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;

/// A request's outcome: the status byte, the used length and the data read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub slot: u16,
    pub status: u8,
    pub used_len: u32,
}

struct Queue {
    size: u16,
    base: u64,
    kick: EventFd,
    call: EventFd,
    avail_idx: u16,
    last_used: u16,
    /// Per slot: how many data bytes the device may write (for reading them back).
    in_len: Vec<u32>,
}

pub struct BlkClient {
    fe: Frontend,
    _memfd: OwnedFd,
    mem: *mut u8,
    mem_bytes: u64,
    queues: Vec<Queue>,
    slots: u16,
    slot_data_bytes: u32,
    pub features: u64,
    /// The device's configuration space (`struct virtio_blk_config`).
    pub config: Vec<u8>,
}

// SAFETY: the mapping is owned by the client and only touched through `&mut self` (or
// `&self` for reads of this client's own slots).
unsafe impl Send for BlkClient {}

fn io_err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("vhost-user {what}: {e}")
}

/// Connect and negotiate as QEMU does: owner, features (all offered but EVENT_IDX, as
/// this client reads the used ring on every call; or `features` again on a reconnect),
/// protocol features, the configuration space and the memory table.
fn negotiate(
    socket: &Path,
    queues: u16,
    features: Option<u64>,
    region: &VhostUserMemoryRegionInfo,
) -> Result<(Frontend, u64, Vec<u8>), String> {
    let mut fe = Frontend::connect(socket, u64::from(queues)).map_err(io_err("connect"))?;
    fe.set_owner().map_err(io_err("SET_OWNER"))?;
    let offered = fe.get_features().map_err(io_err("GET_FEATURES"))?;
    let proto = fe
        .get_protocol_features()
        .map_err(io_err("GET_PROTOCOL_FEATURES"))?;
    let want = VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ;
    fe.set_protocol_features(proto & want)
        .map_err(io_err("SET_PROTOCOL_FEATURES"))?;
    let n = fe.get_queue_num().map_err(io_err("GET_QUEUE_NUM"))?;
    if u64::from(queues) > n {
        return Err(format!("the device offers {n} queues, {queues} asked"));
    }
    let features = features
        .unwrap_or(offered & !(1u64 << virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX));
    fe.set_features(features).map_err(io_err("SET_FEATURES"))?;
    let (_, config) = fe
        .get_config(0, 60, VhostUserConfigFlags::WRITABLE, &[0u8; 60])
        .map_err(io_err("GET_CONFIG"))?;
    fe.set_mem_table(std::slice::from_ref(region))
        .map_err(io_err("SET_MEM_TABLE"))?;
    Ok((fe, features, config.to_vec()))
}

/// Set queue `q` up with its rings at `va` (this process's address, as QEMU passes its
/// own) and the device's next available index at `next_avail`; returns (kick, call). The
/// ring is not enabled yet: see [`enable_queues`].
fn start_queue(
    fe: &mut Frontend,
    q: u16,
    size: u16,
    va: u64,
    next_avail: u16,
) -> Result<(EventFd, EventFd), String> {
    let cfg = VringConfigData {
        queue_max_size: size,
        queue_size: size,
        flags: 0,
        desc_table_addr: va,
        avail_ring_addr: va + 16 * 1024,
        used_ring_addr: va + 32 * 1024,
        log_addr: None,
    };
    let q = usize::from(q);
    let kick = EventFd::new(0).map_err(io_err("eventfd"))?;
    let call = EventFd::new(0).map_err(io_err("eventfd"))?;
    fe.set_vring_num(q, size).map_err(io_err("SET_VRING_NUM"))?;
    fe.set_vring_addr(q, &cfg)
        .map_err(io_err("SET_VRING_ADDR"))?;
    fe.set_vring_base(q, next_avail)
        .map_err(io_err("SET_VRING_BASE"))?;
    fe.set_vring_call(q, &call)
        .map_err(io_err("SET_VRING_CALL"))?;
    fe.set_vring_kick(q, &kick)
        .map_err(io_err("SET_VRING_KICK"))?;
    Ok((kick, call))
}

/// Enable every ring once all are set up, as QEMU's `vhost_dev_start` does: the backend
/// serves a ring only once enabled, so it knows where every ring starts before it answers
/// a request (a FLUSH after a reconnect depends on it: `vhost/resume.rs`).
fn enable_queues(fe: &mut Frontend, queues: u16) -> Result<(), String> {
    for q in 0..usize::from(queues) {
        fe.set_vring_enable(q, true)
            .map_err(io_err("SET_VRING_ENABLE"))?;
    }
    Ok(())
}

impl BlkClient {
    /// Connect to `socket` and set up `queues` virtqueues of `slots` requests each, with
    /// data buffers of `slot_data_bytes`.
    pub fn connect(
        socket: &Path,
        queues: u16,
        slots: u16,
        slot_data_bytes: u32,
    ) -> Result<BlkClient, String> {
        let size = (slots * 3).next_power_of_two().max(4);
        if size > 1024 || queues == 0 {
            return Err("at most 341 slots per queue, at least one queue".into());
        }
        let per_queue = RING_AREA + u64::from(slots) * (32 + u64::from(slot_data_bytes));
        let mem_bytes = (per_queue * u64::from(queues)).next_multiple_of(2 << 20);
        // SAFETY: a plain syscall; the name is a NUL-terminated literal.
        let fd = unsafe { libc::memfd_create(c"tiervisor-vhost-client".as_ptr(), 0) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the kernel just gave us this descriptor.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: resizing our own memfd.
        if unsafe { libc::ftruncate(fd, mem_bytes as i64) } != 0 {
            return Err(format!("ftruncate: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh shared mapping of the whole memfd.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mem_bytes as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: mem_bytes,
            userspace_addr: mem as u64,
            mmap_offset: 0,
            mmap_handle: fd,
        };
        let (mut fe, features, config) = negotiate(socket, queues, None, &region)?;
        let mut qs = Vec::new();
        for q in 0..queues {
            let base = per_queue * u64::from(q);
            let (kick, call) = start_queue(&mut fe, q, size, mem as u64 + base, 0)?;
            qs.push(Queue {
                size,
                base,
                kick,
                call,
                avail_idx: 0,
                last_used: 0,
                in_len: vec![0; usize::from(slots)],
            });
        }
        enable_queues(&mut fe, queues)?;
        Ok(BlkClient {
            fe,
            _memfd: memfd,
            mem: mem.cast(),
            mem_bytes,
            queues: qs,
            slots,
            slot_data_bytes,
            features,
            config: config.to_vec(),
        })
    }

    pub fn slots(&self) -> u16 {
        self.slots
    }

    /// The device's capacity in bytes, from its configuration space.
    pub fn capacity_bytes(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.config[0..8]);
        u64::from_le_bytes(b) * 512
    }

    fn ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        assert!(gpa + len as u64 <= self.mem_bytes);
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.mem.add(gpa as usize) }
    }

    fn put(&mut self, gpa: u64, bytes: &[u8]) {
        let p = self.ptr(gpa, bytes.len());
        // SAFETY: in bounds; the device does not touch a slot until it is published.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }

    fn get(&self, gpa: u64, len: usize) -> Vec<u8> {
        let p = self.ptr(gpa, len);
        let mut v = vec![0u8; len];
        // SAFETY: in bounds; read after the device published the used element.
        unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), len) };
        v
    }

    fn hdr_gpa(&self, q: usize, slot: u16) -> u64 {
        self.queues[q].base + RING_AREA + u64::from(slot) * 32
    }

    fn data_gpa(&self, q: usize, slot: u16) -> u64 {
        self.queues[q].base
            + RING_AREA
            + u64::from(self.slots) * 32
            + u64::from(slot) * u64::from(self.slot_data_bytes)
    }

    fn desc(&mut self, q: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        let base = self.queues[q].base;
        self.put(base + u64::from(i) * 16, &d);
    }

    fn idx(&self, gpa: u64) -> &AtomicU16 {
        // SAFETY: ring indexes are 2-byte aligned u16 fields shared with the device.
        unsafe { &*(self.ptr(gpa, 2) as *const AtomicU16) }
    }

    /// Queue a request in `slot` of queue `q` without kicking: `out` is the data the device
    /// reads after the header, `in_len` the data bytes it may write before the status.
    pub fn push(&mut self, q: usize, slot: u16, kind: u32, sector: u64, out: &[u8], in_len: u32) {
        assert!(slot < self.slots);
        assert!(out.len() as u32 <= self.slot_data_bytes && in_len <= self.slot_data_bytes);
        let hdr = self.hdr_gpa(q, slot);
        let data = self.data_gpa(q, slot);
        let mut h = [0u8; 17];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        h[16] = 0xff; // status: overwritten by the device
        self.put(hdr, &h);
        let d0 = slot * 3;
        let mut next = d0 + 1;
        self.desc(q, d0, hdr, 16, DESC_F_NEXT, next);
        if !out.is_empty() {
            self.put(data, out);
            self.desc(q, next, data, out.len() as u32, DESC_F_NEXT, next + 1);
            next += 1;
        } else if in_len > 0 {
            let flags = DESC_F_NEXT | DESC_F_WRITE;
            self.desc(q, next, data, in_len, flags, next + 1);
            next += 1;
        }
        self.desc(q, next, hdr + 16, 1, DESC_F_WRITE, 0);
        self.queues[q].in_len[usize::from(slot)] = in_len;
        let (size, avail) = (self.queues[q].size, self.queues[q].base + 16 * 1024);
        let i = self.queues[q].avail_idx;
        self.put(avail + 4 + u64::from(i % size) * 2, &d0.to_le_bytes());
        self.queues[q].avail_idx = i.wrapping_add(1);
        fence(Ordering::SeqCst);
        self.idx(avail + 2)
            .store(self.queues[q].avail_idx, Ordering::Release);
    }

    /// Tell the device queue `q` has new requests.
    pub fn kick(&self, q: usize) -> Result<(), String> {
        self.queues[q].kick.write(1).map_err(io_err("kick"))
    }

    /// Wait up to `timeout_ms` for completions on queue `q`; returns those found.
    pub fn reap(&mut self, q: usize, timeout_ms: i32) -> Result<Vec<Reply>, String> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            let out = self.used(q);
            if !out.is_empty() {
                return Ok(out);
            }
            // A call left over from completions already taken from the ring wakes us with
            // nothing new: wait on until the deadline rather than report an empty reap.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut p = libc::pollfd {
                fd: self.queues[q].call.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, left.as_millis() as i32) };
            if n <= 0 {
                return Err(format!("no completion within {timeout_ms} ms"));
            }
            let _ = self.queues[q].call.read();
        }
    }

    fn used(&mut self, q: usize) -> Vec<Reply> {
        let (size, used) = (self.queues[q].size, self.queues[q].base + 32 * 1024);
        let end = self.idx(used + 2).load(Ordering::Acquire);
        fence(Ordering::SeqCst);
        let mut out = Vec::new();
        while self.queues[q].last_used != end {
            let i = self.queues[q].last_used;
            let e = self.get(used + 4 + u64::from(i % size) * 8, 8);
            let head = u16::from_le_bytes([e[0], e[1]]);
            let used_len = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let slot = head / 3;
            let status = self.get(self.hdr_gpa(q, slot) + 16, 1)[0];
            out.push(Reply {
                slot,
                status,
                used_len,
            });
            self.queues[q].last_used = i.wrapping_add(1);
        }
        out
    }

    /// The data the device wrote for `slot` (as long as its `in_len`).
    pub fn data(&self, q: usize, slot: u16) -> Vec<u8> {
        let len = self.queues[q].in_len[usize::from(slot)] as usize;
        self.get(self.data_gpa(q, slot), len)
    }

    /// One request on queue 0, slot 0, waited for: (status, data written).
    pub fn call(
        &mut self,
        kind: u32,
        sector: u64,
        out: &[u8],
        in_len: u32,
    ) -> Result<(u8, Vec<u8>), String> {
        self.push(0, 0, kind, sector, out, in_len);
        self.kick(0)?;
        let mut got = Vec::new();
        while got.is_empty() {
            got = self.reap(0, 10_000)?;
        }
        Ok((got[0].status, self.data(0, 0)))
    }

    pub fn read(&mut self, sector: u64, len: u32) -> Result<(u8, Vec<u8>), String> {
        self.call(VIRTIO_BLK_T_IN, sector, &[], len)
    }

    pub fn write(&mut self, sector: u64, data: &[u8]) -> Result<u8, String> {
        Ok(self.call(VIRTIO_BLK_T_OUT, sector, data, 0)?.0)
    }

    pub fn flush(&mut self) -> Result<u8, String> {
        Ok(self.call(VIRTIO_BLK_T_FLUSH, 0, &[], 0)?.0)
    }

    /// A discard (or write-zeroes) of one range.
    pub fn range(
        &mut self,
        kind: u32,
        sector: u64,
        sectors: u32,
        flags: u32,
    ) -> Result<u8, String> {
        let mut r = [0u8; 16];
        r[0..8].copy_from_slice(&sector.to_le_bytes());
        r[8..12].copy_from_slice(&sectors.to_le_bytes());
        r[12..16].copy_from_slice(&flags.to_le_bytes());
        Ok(self.call(kind, 0, &r, 0)?.0)
    }

    pub fn get_id(&mut self) -> Result<(u8, Vec<u8>), String> {
        self.call(VIRTIO_BLK_T_GET_ID, 0, &[], VIRTIO_BLK_ID_BYTES)
    }

    /// Stop queue `q` as QEMU does at a guest reset (GET_VRING_BASE): the answer is the
    /// next available index the device would have read.
    pub fn stop_queue(&mut self, q: usize) -> Result<u32, String> {
        self.fe.get_vring_base(q).map_err(io_err("GET_VRING_BASE"))
    }

    /// Attach again to `socket` after the backend went away (a kill -9 and a restart),
    /// keeping guest memory and the rings as a running VM does, the way QEMU reconnects
    /// without inflight tracking: its GET_VRING_BASE to the dead backend failed, so each
    /// queue restarts at the guest's used index (QEMU's
    /// `virtio_queue_restore_last_avail_idx`). Requests the old backend had taken but not
    /// answered are available again from there; kick to have them taken.
    pub fn reconnect(&mut self, socket: &Path) -> Result<(), String> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: self.mem_bytes,
            userspace_addr: self.mem as u64,
            mmap_offset: 0,
            mmap_handle: self._memfd.as_raw_fd(),
        };
        let queues = self.queues.len() as u16;
        let (mut fe, _, config) = negotiate(socket, queues, Some(self.features), &region)?;
        for q in 0..queues {
            let used_idx = self.used_idx(usize::from(q));
            let (size, base) = (
                self.queues[usize::from(q)].size,
                self.queues[usize::from(q)].base,
            );
            let (kick, call) = start_queue(&mut fe, q, size, self.mem as u64 + base, used_idx)?;
            let queue = &mut self.queues[usize::from(q)];
            (queue.kick, queue.call) = (kick, call);
        }
        enable_queues(&mut fe, queues)?;
        self.fe = fe;
        self.config = config;
        Ok(())
    }

    /// The used index the device last published on queue `q`.
    pub fn used_idx(&self, q: usize) -> u16 {
        self.idx(self.queues[q].base + 32 * 1024 + 2)
            .load(Ordering::Acquire)
    }

    /// The available index this client last published on queue `q`.
    pub fn avail_idx(&self, q: usize) -> u16 {
        self.queues[q].avail_idx
    }
}

impl Drop for BlkClient {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; the socket closes with `fe`.
        unsafe { libc::munmap(self.mem.cast(), self.mem_bytes as usize) };
    }
}
