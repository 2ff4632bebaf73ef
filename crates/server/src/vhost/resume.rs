//! A frontend resuming rings after the backend died, and the writes that may be gone.
//!
//! QEMU with `reconnect-ms` reconnects to a restarted tiervisor and restarts every ring
//! where the guest's used index stands (SET_VRING_BASE); a frontend that is new (a VM
//! started, a guest reset) starts every ring at 0. If the earlier process was killed
//! (not stopped in order: the engine's clean-stop marker, `Engine::stopped_clean_before_mount`),
//! writes it acknowledged before the guest's next FLUSH may be lost, and that FLUSH,
//! answered by this process, would tell the guest they are safe. So the first FLUSH of a
//! resuming frontend after an unclean start fails (VIRTIO_BLK_S_IOERR: the guest's fsync
//! returns EIO), once per volume; later flushes are answered as usual.
//!
//! vhost-user-backend 0.24 has no hook for SET_VRING_BASE: the value reaches the vring
//! (`VringT::set_queue_next_avail`) and nothing else. So the device's vring type is a thin
//! wrapper, [`BlkVring`], that notes each queue's base in the connection's [`RingStarts`]
//! on its way through. The library creates the vrings itself inside
//! `VhostUserDaemon::new`, on the calling thread; [`making_rings`] hands them the
//! connection's `RingStarts` there.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLockReadGuard, RwLockWriteGuard};

use vhost_user_backend::{VringRwLock, VringState, VringStateGuard, VringStateMutGuard, VringT};
use virtio_queue::Error as VirtQueError;

use super::blk::{MAX_QUEUES, Mem};

/// Where each ring of one frontend connection was last started (SET_VRING_BASE).
#[derive(Debug, Default)]
pub struct RingStarts {
    bases: [AtomicU32; MAX_QUEUES],
}

impl RingStarts {
    fn started(&self, queue: usize, base: u16) {
        if let Some(b) = self.bases.get(queue) {
            b.store(u32::from(base), Ordering::Release);
        }
    }

    /// Some ring of this frontend continues where an earlier backend left it: a nonzero
    /// base (a fresh device starts every ring at 0). Any queue counts, not just the one a
    /// FLUSH came on: a guest's writes and its flush may go to different queues. A ring
    /// that had answered a multiple of 65536 requests also restarts at 0: such a
    /// frontend reads as new (1 in 65536 per queue).
    pub fn resumed(&self) -> bool {
        self.bases.iter().any(|b| b.load(Ordering::Acquire) != 0)
    }
}

/// The server's record of FLUSHes failed to report lost writes (one per shard's sockets).
#[derive(Debug, Default)]
pub struct LostReports {
    /// How many (`ctl stat`'s `vhost_lost_flush_reports`).
    count: AtomicU64,
    /// Warnings for the operator's log, taken by the server's thread (the queue workers
    /// that fail the FLUSH have no log of their own).
    lines: Mutex<Vec<String>>,
}

impl LostReports {
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn take_lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

/// One volume's "an unclean stop may have lost acknowledged writes": set at start from
/// the engine's marker, taken by the first FLUSH a frontend sends.
#[derive(Debug)]
pub struct LostWrites {
    unreported: AtomicBool,
    reports: Arc<LostReports>,
}

impl LostWrites {
    pub fn new(unclean_start: bool, reports: Arc<LostReports>) -> LostWrites {
        LostWrites {
            unreported: AtomicBool::new(unclean_start),
            reports,
        }
    }

    /// A FLUSH came from a frontend whose rings `resumed` (or not) on `volume`: whether
    /// it must fail. The first FLUSH of any frontend settles it: a resuming one is told
    /// (once, with a warning), a new one had nothing from before to lose (and a later
    /// reconnect to this process loses nothing either).
    pub fn flush_must_fail(&self, resumed: bool, volume: &str) -> bool {
        if !self.unreported.load(Ordering::Acquire)
            || !self.unreported.swap(false, Ordering::AcqRel)
        {
            return false;
        }
        if resumed {
            self.reports.count.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut l) = self.reports.lines.lock() {
                l.push(format!(
                    "warning: volume {volume}: a vhost-user frontend resumed its rings after an unclean stop (kill -9, crash): writes the stopped process acknowledged without a FLUSH may be lost; its first FLUSH is failed (VIRTIO_BLK_S_IOERR) so the guest is told"
                ));
            }
        }
        resumed
    }
}

thread_local! {
    /// While `making_rings` runs: the connection's `RingStarts` and the next queue index.
    static MAKING: RefCell<Option<(Arc<RingStarts>, usize)>> = const { RefCell::new(None) };
}

/// Run `make` (`VhostUserDaemon::new`, which creates the vrings in queue order on this
/// thread) with every vring it creates noting its starts in `starts`.
pub fn making_rings<R>(starts: &Arc<RingStarts>, make: impl FnOnce() -> R) -> R {
    MAKING.with(|m| *m.borrow_mut() = Some((starts.clone(), 0)));
    let r = make();
    MAKING.with(|m| *m.borrow_mut() = None);
    r
}

/// The library's `VringRwLock`, noting SET_VRING_BASE in the connection's `RingStarts`.
#[derive(Clone)]
pub struct BlkVring {
    inner: VringRwLock<Mem>,
    starts: Arc<RingStarts>,
    queue: usize,
}

impl<'a> VringStateGuard<'a, Mem> for BlkVring {
    type G = RwLockReadGuard<'a, VringState<Mem>>;
}

impl<'a> VringStateMutGuard<'a, Mem> for BlkVring {
    type G = RwLockWriteGuard<'a, VringState<Mem>>;
}

impl VringT<Mem> for BlkVring {
    fn new(mem: Mem, max_queue_size: u16) -> Result<Self, VirtQueError> {
        let (starts, queue) = MAKING.with(|m| match m.borrow_mut().as_mut() {
            Some((s, next)) => {
                *next += 1;
                (s.clone(), *next - 1)
            }
            // Made outside `making_rings`: its starts are its own (read as new).
            None => (Arc::default(), 0),
        });
        Ok(BlkVring {
            inner: VringRwLock::new(mem, max_queue_size)?,
            starts,
            queue,
        })
    }

    fn get_ref(&self) -> <Self as VringStateGuard<'_, Mem>>::G {
        self.inner.get_ref()
    }

    fn get_mut(&self) -> <Self as VringStateMutGuard<'_, Mem>>::G {
        self.inner.get_mut()
    }

    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), VirtQueError> {
        self.inner.add_used(desc_index, len)
    }

    fn signal_used_queue(&self) -> io::Result<()> {
        self.inner.signal_used_queue()
    }

    fn enable_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.enable_notification()
    }

    fn disable_notification(&self) -> Result<(), VirtQueError> {
        self.inner.disable_notification()
    }

    fn needs_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.needs_notification()
    }

    fn set_enabled(&self, enabled: bool) {
        self.inner.set_enabled(enabled)
    }

    fn set_queue_info(
        &self,
        desc_table: u64,
        avail_ring: u64,
        used_ring: u64,
    ) -> Result<(), VirtQueError> {
        self.inner.set_queue_info(desc_table, avail_ring, used_ring)
    }

    fn queue_next_avail(&self) -> u16 {
        self.inner.queue_next_avail()
    }

    /// SET_VRING_BASE (the library's only caller).
    fn set_queue_next_avail(&self, base: u16) {
        self.starts.started(self.queue, base);
        self.inner.set_queue_next_avail(base)
    }

    fn set_queue_next_used(&self, idx: u16) {
        self.inner.set_queue_next_used(idx)
    }

    fn queue_used_idx(&self) -> Result<u16, VirtQueError> {
        self.inner.queue_used_idx()
    }

    fn set_queue_size(&self, num: u16) {
        self.inner.set_queue_size(num)
    }

    fn set_queue_event_idx(&self, enabled: bool) {
        self.inner.set_queue_event_idx(enabled)
    }

    fn set_queue_ready(&self, ready: bool) {
        self.inner.set_queue_ready(ready)
    }

    fn set_kick(&self, file: Option<File>) {
        self.inner.set_kick(file)
    }

    fn read_kick(&self) -> io::Result<bool> {
        self.inner.read_kick()
    }

    fn set_call(&self, file: Option<File>) {
        self.inner.set_call(file)
    }

    fn set_err(&self, file: Option<File>) {
        self.inner.set_err(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

    fn mem() -> Mem {
        GuestMemoryAtomic::new(
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 16)]).unwrap(),
        )
    }

    #[test]
    fn vrings_made_for_a_connection_note_their_bases_there_in_queue_order() {
        let starts = Arc::new(RingStarts::default());
        let rings: Vec<BlkVring> = making_rings(&starts, || {
            (0..MAX_QUEUES)
                .map(|_| BlkVring::new(mem(), 256).unwrap())
                .collect()
        });
        assert!(!starts.resumed());
        rings[2].set_queue_next_avail(0);
        assert!(!starts.resumed(), "a ring started at 0 is new");
        rings[2].set_queue_next_avail(17);
        assert!(starts.resumed());
        assert_eq!(starts.bases[2].load(Ordering::Acquire), 17);
        assert_eq!(rings[2].queue_next_avail(), 17);
        // A guest reset: every ring started again at 0.
        rings[2].set_queue_next_avail(0);
        assert!(!starts.resumed());
        // Outside `making_rings` a vring notes nothing here.
        let other = BlkVring::new(mem(), 256).unwrap();
        other.set_queue_next_avail(5);
        assert!(!starts.resumed());
    }

    #[test]
    fn the_first_flush_of_a_resumed_frontend_after_an_unclean_start_fails_once() {
        let reports = Arc::new(LostReports::default());
        let lost = LostWrites::new(true, reports.clone());
        assert!(lost.flush_must_fail(true, "vm1"));
        assert!(!lost.flush_must_fail(true, "vm1"), "reported once");
        assert_eq!(reports.count(), 1);
        let lines = reports.take_lines();
        assert!(
            lines.len() == 1 && lines[0].contains("volume vm1"),
            "{lines:?}"
        );
        // A new frontend first: it settles it, a later resumed one is not failed.
        let lost = LostWrites::new(true, reports.clone());
        assert!(!lost.flush_must_fail(false, "vm1"));
        assert!(!lost.flush_must_fail(true, "vm1"));
        // A clean start: never.
        let lost = LostWrites::new(false, reports.clone());
        assert!(!lost.flush_must_fail(true, "vm1"));
        assert_eq!(reports.count(), 1);
        assert!(reports.take_lines().is_empty());
    }
}
