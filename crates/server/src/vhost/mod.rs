//! vhost-user-blk: each volume on its own Unix socket (`<vhost_user_dir>/<volume>.sock`),
//! so QEMU attaches it with `-device vhost-user-blk-pci` and the guest's virtqueues are read
//! and written here directly, in shared guest memory. rust-vmm's crates speak the protocol
//! (`vhost`, `vhost-user-backend`) and walk the rings (`virtio-queue`, `vm-memory`).
//!
//! Threads: one per socket accepts a frontend and runs its vhost-user message loop; the
//! library adds one worker per virtqueue ([`blk`]). The engine stays on the server's
//! thread: workers hand it requests through [`crate::local`]. A frontend that goes away
//! (VM killed, QEMU restarted) loses nothing acknowledged: its requests still in the engine
//! complete there and their replies are dropped; the socket takes the next frontend.

pub mod blk;
pub mod client;
pub mod request;
pub mod resume;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use crate::local::Submitter;
use crate::nbd::conn::Export;
use blk::{BlkBackend, BlkDevice};
use resume::{LostReports, LostWrites, RingStarts};

/// How often an idle socket thread checks for the server stopping.
const ACCEPT_POLL_MS: i32 = 100;

struct Socket {
    name: String,
    path: PathBuf,
    size_bytes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    /// The connected frontend, to disconnect at stop.
    current: Arc<Mutex<Option<ShutdownHandle>>>,
    /// Set to stop this socket (server stop, volume deleted).
    closing: Arc<AtomicBool>,
}

impl Socket {
    /// Disconnect the frontend, end the thread (a ring stop waiting for requests of this
    /// server's thread gives up at once: `closing`), remove the socket file.
    fn close(&mut self) {
        self.closing.store(true, Ordering::Release);
        if let Ok(c) = self.current.lock()
            && let Some(h) = c.as_ref()
        {
            h.shutdown();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How a volume's device is offered.
#[derive(Clone, Copy, Debug)]
pub struct DeviceOptions {
    /// The process before this one did not stop in order
    /// (`Engine::stopped_clean_before_mount`): a frontend resuming its rings is told at
    /// its first FLUSH that writes may be lost (`resume.rs`).
    pub unclean_start: bool,
    /// The volume's `write_cache` (`BlkDevice::write_cache`).
    pub write_cache: bool,
}

/// Every volume's socket.
pub struct VhostUser {
    dir: PathBuf,
    submit: Submitter,
    sockets: Vec<Socket>,
    /// FLUSHes failed to report writes an unclean stop may have lost (`resume.rs`).
    lost_reports: Arc<LostReports>,
}

/// The socket path of `volume` under `dir`.
pub fn socket_path(dir: &Path, volume: &str) -> PathBuf {
    dir.join(format!("{volume}.sock"))
}

impl VhostUser {
    pub fn new(dir: &Path, submit: Submitter) -> Result<VhostUser, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("vhost_user_dir {}: cannot create it: {e}", dir.display()))?;
        Ok(VhostUser {
            dir: dir.to_path_buf(),
            submit,
            sockets: Vec::new(),
            lost_reports: Arc::default(),
        })
    }

    /// Serve `export` on its socket (a stale socket file from an earlier run is replaced).
    pub fn add(&mut self, export: &Export, opts: DeviceOptions) -> Result<(), String> {
        let path = socket_path(&self.dir, &export.name);
        if path.as_os_str().len() >= 108 {
            return Err(format!(
                "vhost-user socket path {} is too long for a Unix socket (expected at most 107 bytes; use a shorter vhost_user_dir)",
                path.display()
            ));
        }
        let listener = Listener::new(&path, true)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        let size_bytes = Arc::new(AtomicU64::new(export.size_bytes));
        let closing = Arc::new(AtomicBool::new(false));
        let dev = BlkDevice {
            name: export.name.clone(),
            volume: export.volume,
            size_bytes: size_bytes.clone(),
            read_only: export.read_only,
            write_cache: opts.write_cache,
            stopping: closing.clone(),
            lost: Arc::new(LostWrites::new(
                opts.unclean_start,
                self.lost_reports.clone(),
            )),
        };
        let current = Arc::new(Mutex::new(None));
        let (submit, stop, cur) = (self.submit.clone(), closing.clone(), current.clone());
        let thread = std::thread::Builder::new()
            .name(format!("vhost-{}", export.name))
            .spawn(move || serve_socket(listener, dev, submit, stop, cur))
            .map_err(|e| format!("cannot start the vhost-user thread: {e}"))?;
        self.sockets.push(Socket {
            name: export.name.clone(),
            path,
            size_bytes,
            thread: Some(thread),
            current,
            closing,
        });
        Ok(())
    }

    /// FLUSHes failed so far to report lost writes (`ctl stat`: `vhost_lost_flush_reports`).
    pub fn lost_flush_reports(&self) -> u64 {
        self.lost_reports.count()
    }

    /// Warnings of FLUSHes failed since the last call, for the operator's log.
    pub fn take_lines(&self) -> Vec<String> {
        self.lost_reports.take_lines()
    }

    /// The paths served, for the log.
    pub fn paths(&self) -> Vec<&Path> {
        self.sockets.iter().map(|s| s.path.as_path()).collect()
    }

    /// A volume was resized: frontends that connect from now on see the new size.
    pub fn resized(&self, volume: &str, size_bytes: u64) {
        for s in self.sockets.iter().filter(|s| s.name == volume) {
            s.size_bytes.store(size_bytes, Ordering::Relaxed);
        }
    }

    /// Frontends attached to `volume` (0 or 1), counted with its NBD connections: a
    /// volume is not deleted under a VM unless forced.
    pub fn connected(&self, volume: &str) -> u64 {
        let attached = |s: &Socket| s.current.lock().is_ok_and(|c| c.is_some());
        (self.sockets.iter())
            .filter(|s| s.name == volume && attached(s))
            .count() as u64
    }

    /// `volume` was deleted: disconnect its frontend and remove its socket.
    pub fn remove(&mut self, volume: &str) {
        for s in self.sockets.iter_mut().filter(|s| s.name == volume) {
            s.close();
        }
        self.sockets.retain(|s| s.name != volume);
    }

    /// Disconnect every frontend, stop the threads and remove the sockets.
    pub fn stop(&mut self) {
        // Every socket told first, so the frontends are all disconnected before any join.
        for s in &self.sockets {
            s.closing.store(true, Ordering::Release);
        }
        for s in &mut self.sockets {
            s.close();
        }
    }
}

impl Drop for VhostUser {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait up to `ms` for a frontend to connect.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// One socket: a frontend at a time, each on a fresh device (its rings, features and
/// memory table are per connection).
fn serve_socket(
    mut listener: Listener,
    dev: BlkDevice,
    submit: Submitter,
    stop: Arc<AtomicBool>,
    current: Arc<Mutex<Option<ShutdownHandle>>>,
) {
    while !stop.load(Ordering::Acquire) {
        if !readable(listener.as_raw_fd(), ACCEPT_POLL_MS) {
            continue;
        }
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::<()>::new());
        let starts = Arc::new(RingStarts::default());
        let backend = Arc::new(BlkBackend::new(
            dev.clone(),
            mem.clone(),
            submit.clone(),
            starts.clone(),
        ));
        // The library makes this connection's vrings here: they note their starts.
        let made = resume::making_rings(&starts, || {
            VhostUserDaemon::new(dev.name.clone(), backend.clone(), mem)
        });
        let mut daemon = match made {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(volume = dev.name.as_str(), "vhost-user: {e}");
                return;
            }
        };
        if let Err(e) = daemon.start(&mut listener) {
            tracing::warn!(volume = dev.name.as_str(), "vhost-user: {e}");
            continue;
        }
        if let Ok(mut c) = current.lock() {
            *c = daemon.shutdown_handle();
        }
        if stop.load(Ordering::Acquire) {
            daemon.request_shutdown();
        }
        if let Err(e) = daemon.wait() {
            tracing::info!(volume = dev.name.as_str(), "vhost-user frontend gone: {e}");
        }
        if let Ok(mut c) = current.lock() {
            *c = None;
        }
        backend.disconnected();
        // Dropping the daemon stops its queue workers; requests of this frontend still in
        // the engine complete there, and their replies go nowhere.
    }
}
