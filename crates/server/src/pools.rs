//! Pool files and block devices: create sparse files on first use, check sizes, lock.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::config::PoolDef;

pub struct PoolFile {
    pub name: String,
    pub path: PathBuf,
    pub file: File,
    /// Device and inode at open: the path must still name this file while we run.
    pub identity: (u64, u64),
    pub size_bytes: u64,
    pub created: bool,
    pub block_device: bool,
    /// The same file opened with O_DIRECT (`direct = true`, where the file system allows).
    pub direct: Option<File>,
}

/// How long to wait for a lock held by a process that was just killed.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Take the pool's exclusive lock. A server killed with -9 keeps its lock until the kernel
/// has torn down its io_uring, which happens asynchronously after the process is reaped
/// (about 1 restart in 20 in the kill -9 tests found the lock still held); so a held lock
/// is retried for `LOCK_WAIT` before it is taken as another running server.
fn lock_pool(file: &File, name: &str) -> bool {
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return true;
        }
        if start.elapsed() >= LOCK_WAIT {
            return false;
        }
        if !said {
            tracing::warn!(
                "pool {name}: locked by another process; waiting up to {} s in case it is a \
                 server that just exited",
                LOCK_WAIT.as_secs()
            );
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// Open (or create) a pool; errors are for the operator.
pub fn open_pool(def: &PoolDef) -> Result<PoolFile, String> {
    let p = &def.path;
    let exists = p.exists();
    if !exists && let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("pool {}: cannot create {}: {e}", def.name, dir.display()))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(!exists)
        .mode(0o600)
        .open(p)
        .map_err(|e| format!("pool {}: cannot open {}: {e}", def.name, p.display()))?;
    // One server per pool: a second one would corrupt it.
    if !lock_pool(&file, &def.name) {
        return Err(format!(
            "pool {}: {} is locked by another process (is another tiervisor running?)",
            def.name,
            p.display()
        ));
    }
    let meta = file
        .metadata()
        .map_err(|e| format!("pool {}: {e}", def.name))?;
    let block_device = meta.file_type().is_block_device();
    let size_bytes = if block_device {
        let mut size = 0u64;
        // SAFETY: BLKGETSIZE64 writes a u64 through the pointer.
        if unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) } != 0 {
            return Err(format!(
                "pool {}: cannot read the size of {}",
                def.name,
                p.display()
            ));
        }
        if let Some(want) = def.size_bytes {
            if want > size {
                return Err(format!(
                    "pool {}: device {} has {size} bytes, configured {want}",
                    def.name,
                    p.display()
                ));
            }
            want
        } else {
            size
        }
    } else {
        let want = def
            .size_bytes
            .ok_or_else(|| format!("pool {}: a size is required for a file pool", def.name))?;
        if !exists {
            file.set_len(want)
                .map_err(|e| format!("pool {}: cannot size {}: {e}", def.name, p.display()))?;
        } else if meta.len() != want {
            return Err(format!(
                "pool {}: {} is {} bytes but the configuration says {want}; resizing is not supported",
                def.name,
                p.display(),
                meta.len()
            ));
        }
        want
    };
    let direct = if def.direct { open_direct(def) } else { None };
    Ok(PoolFile {
        direct,
        name: def.name.clone(),
        path: p.clone(),
        identity: (meta.dev(), meta.ino()),
        file,
        size_bytes,
        created: !exists,
        block_device,
    })
}

/// The pool's file opened again with O_DIRECT; `None`, said loudly, where the file system
/// refuses it (some refuse at open, some at the first read), so the pool keeps working
/// through the page cache.
fn open_direct(def: &PoolDef) -> Option<File> {
    let refused = |why: String| {
        tracing::error!(
            "pool {}: direct = true, but {} refuses O_DIRECT ({why}; tmpfs and some network \
             file systems do); this pool uses the host page cache instead",
            def.name,
            def.path.display()
        );
        None
    };
    let f = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&def.path)
    {
        Ok(f) => f,
        Err(e) => return refused(e.to_string()),
    };
    let mut probe = crate::io::direct::AlignedBuf::zeroed(crate::io::direct::DIRECT_ALIGN_BYTES);
    // SAFETY: reading one aligned block into a buffer of that size.
    let n = unsafe {
        libc::pread(
            f.as_raw_fd(),
            probe.as_mut_ptr().cast(),
            crate::io::direct::DIRECT_ALIGN_BYTES,
            0,
        )
    };
    if n < 0 {
        return refused(format!(
            "a read failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Some(f)
}

impl PoolFile {
    /// The descriptors the I/O backends use.
    pub fn fds(&self) -> crate::io::PoolFds {
        crate::io::PoolFds {
            buffered: self.file.as_raw_fd(),
            direct: self.direct.as_ref().map(|f| f.as_raw_fd()),
        }
    }

    /// Whether the pool's path still names the file we write: a pool file deleted or
    /// replaced under a running server takes every later write with it.
    pub fn identity_problem(&self) -> Option<String> {
        let shown = self.path.display();
        match self.file.metadata() {
            Ok(m) if m.nlink() == 0 => {
                return Some(format!(
                    "pool {}: its file {shown} was deleted while the server runs; what is written to it is lost when the server exits",
                    self.name
                ));
            }
            Ok(_) => {}
            Err(e) => {
                return Some(format!(
                    "pool {}: cannot stat the open file: {e}",
                    self.name
                ));
            }
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => None,
            Ok(_) => Some(format!(
                "pool {}: {shown} was replaced by another file while the server runs; the server still writes the old one, which is lost when it exits",
                self.name
            )),
            Err(e) => Some(format!(
                "pool {}: {shown} is gone while the server runs ({e}); what is written to it is lost when the server exits",
                self.name
            )),
        }
    }
}
