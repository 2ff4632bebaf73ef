//! Free space behind file pools. Pool files are sparse, so the filesystem under them can
//! fill long before the pools do (every write then fails with ENOSPC). At start and in
//! `ctl stat` each file pool's possible growth (its size minus the blocks it holds) is
//! compared with the free space of its filesystem; pools sharing a filesystem share its
//! free space. A thick volume is a promise of space: a new one that cannot fit is refused
//! before any file is created.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;
use tiervisor_engine::Provisioning;

use crate::config::ServerConfig;
use crate::pools::PoolFile;

/// One file pool's space, as `ctl stat` shows it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PoolSpace {
    pub pool: String,
    pub size_bytes: u64,
    /// Bytes the filesystem holds for the file (its allocated blocks).
    pub allocated_bytes: u64,
    /// How much more the file may take: `size_bytes - allocated_bytes`.
    pub growth_bytes: u64,
    /// Free space of the filesystem under the pool, for an unprivileged writer.
    pub fs_free_bytes: u64,
    /// Possible growth of every file pool on that filesystem together.
    pub fs_growth_bytes: u64,
    /// The pools on this filesystem may grow past its free space.
    pub low: bool,
}

/// What one pool's file says, before pools on one filesystem are added up.
#[derive(Clone, Debug)]
pub struct Measured {
    pub pool: String,
    /// Filesystem identity (`st_dev`).
    pub fs: u64,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub fs_free_bytes: u64,
}

/// Add up the pools of each filesystem and mark those that may outgrow it.
pub fn assess(measured: &[Measured]) -> Vec<PoolSpace> {
    let growth = |m: &Measured| m.size_bytes.saturating_sub(m.allocated_bytes);
    measured
        .iter()
        .map(|m| {
            let fs_growth_bytes: u64 = measured.iter().filter(|o| o.fs == m.fs).map(growth).sum();
            PoolSpace {
                pool: m.pool.clone(),
                size_bytes: m.size_bytes,
                allocated_bytes: m.allocated_bytes,
                growth_bytes: growth(m),
                fs_free_bytes: m.fs_free_bytes,
                fs_growth_bytes,
                low: fs_growth_bytes > m.fs_free_bytes,
            }
        })
        .collect()
}

/// Free bytes of the filesystem holding `path` (for an unprivileged writer) and its id.
fn fs_free(path: &Path) -> Result<(u64, u64), String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", path.display()))?;
    // SAFETY: statvfs writes into the zeroed struct we pass; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("statvfs {}: {e}", path.display()));
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
    let dev = std::fs::metadata(path).map(|m| m.dev()).unwrap_or(0);
    Ok((free, dev))
}

/// The space of every file pool (block devices do not grow and are left out).
pub fn survey(pools: &[PoolFile]) -> Vec<PoolSpace> {
    let measured: Vec<Measured> = pools
        .iter()
        .filter(|p| !p.block_device)
        .filter_map(|p| {
            let m = p.file.metadata().ok()?;
            let (fs_free_bytes, _) = fs_free(&p.path).ok()?;
            Some(Measured {
                pool: p.name.clone(),
                fs: m.dev(),
                size_bytes: p.size_bytes,
                allocated_bytes: m.blocks().saturating_mul(512),
                fs_free_bytes,
            })
        })
        .collect();
    assess(&measured)
}

/// The warning for a pool that may outgrow its filesystem.
pub fn warning(s: &PoolSpace) -> String {
    format!(
        "pool {}: its file may still grow by {} bytes, and the pools on its filesystem by {} \
         bytes in all, but the filesystem has only {} bytes free; writes will fail with \
         ENOSPC once it is full (free space, move the pool, or make it smaller)",
        s.pool, s.growth_bytes, s.fs_growth_bytes, s.fs_free_bytes
    )
}

/// The nearest existing directory at or above `p` (a pool's directory may not exist yet).
fn existing_ancestor(p: &Path) -> Option<&Path> {
    p.ancestors().skip(1).find(|a| a.is_dir())
}

/// Thick volumes to create on one filesystem: its id, its free bytes, and (volume, pool,
/// bytes) of each.
type ThickOnFs = (u64, u64, Vec<(String, String, u64)>);

/// Refuse thick volumes on pools about to be created whose filesystem cannot hold them.
/// Runs before any pool file is created; existing pools already hold their thick
/// volumes' zeroed regions.
pub fn check_thick(cfg: &ServerConfig) -> Result<(), String> {
    let mut per_fs: Vec<ThickOnFs> = Vec::new();
    for v in &cfg.volumes {
        if v.provisioning != Provisioning::Thick {
            continue;
        }
        let def = &cfg.pools[v.pool];
        if def.path.exists() {
            continue;
        }
        let Some(dir) = existing_ancestor(&def.path) else {
            continue;
        };
        let (free, fs) = fs_free(dir)?;
        match per_fs.iter_mut().find(|(id, _, _)| *id == fs) {
            Some(e) => e.2.push((v.name.clone(), def.name.clone(), v.size_bytes)),
            None => per_fs.push((
                fs,
                free,
                vec![(v.name.clone(), def.name.clone(), v.size_bytes)],
            )),
        }
    }
    for (_, free, vols) in per_fs {
        let need: u64 = vols.iter().map(|v| v.2).sum();
        if need > free {
            let names: Vec<String> = vols
                .iter()
                .map(|(v, p, b)| format!("{v} ({b} bytes on pool {p})"))
                .collect();
            return Err(format!(
                "thick volume(s) {} need {need} bytes but the filesystem under them has only \
                 {free} bytes free; make them thin (provisioning = \"thin\"), free space, or \
                 put the pool elsewhere",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

/// Make sure every thick volume's home region is allocated in its (file) pool. A region
/// may have holes though the engine zeroed it when the volume was made: a pool file
/// copied or restored sparsely (`cp --sparse=always`, many backup tools), or zeroed
/// before write-zeroes allocated again after punching on a filesystem without
/// `FALLOC_FL_ZERO_RANGE` (tmpfs, btrfs).
/// `fallocate` (mode 0) allocates only the holes and leaves data alone. `regions` are
/// (volume, pool index, offset, length) from the mounted engine. Returns what to log;
/// refuses, naming the volume and file, when the filesystem has no room for the holes.
pub fn ensure_thick_allocated(
    pools: &[PoolFile],
    regions: &[(String, usize, u64, u64)],
) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    for (vol, p, off, len) in regions {
        let Some(pool) = pools.get(*p).filter(|p| !p.block_device) else {
            continue;
        };
        let blocks = |f: &PoolFile| f.file.metadata().map_or(0, |m| m.blocks() * 512);
        let before = blocks(pool);
        // SAFETY: plain syscall on an open descriptor; mode 0 within the file's size.
        let r = unsafe { libc::fallocate(pool.file.as_raw_fd(), 0, *off as i64, *len as i64) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            let range = format!("bytes {off}..{} of {}", off + len, pool.path.display());
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                said.push(format!(
                    "warning: pool {}: cannot check that thick volume {vol}'s region ({range}) \
                     is allocated: the filesystem does not support fallocate",
                    pool.name
                ));
                continue;
            }
            return Err(format!(
                "pool {}: thick volume {vol}'s region ({range}) has holes (the file was \
                 copied sparsely, or punched), and allocating them failed: {e}; free space \
                 on that filesystem and start again (a volume's provisioning is fixed when it \
                 is created, so the configuration cannot make it thin)",
                pool.name
            ));
        }
        let grown = blocks(pool).saturating_sub(before);
        if grown > 0 {
            said.push(format!(
                "pool {}: thick volume {vol}'s region of {} had holes; allocated {grown} bytes \
                 for it",
                pool.name,
                pool.path.display()
            ));
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pool: &str, fs: u64, size: u64, alloc: u64, free: u64) -> Measured {
        Measured {
            pool: pool.into(),
            fs,
            size_bytes: size,
            allocated_bytes: alloc,
            fs_free_bytes: free,
        }
    }

    #[test]
    fn pools_on_one_filesystem_share_its_free_space() {
        let s = assess(&[
            m("ssd", 1, 100, 40, 100),
            m("hdd", 1, 100, 0, 100),
            m("far", 2, 100, 0, 100),
        ]);
        // 60 + 100 may grow on filesystem 1, which has 100 free: both low.
        assert_eq!(s[0].growth_bytes, 60);
        assert_eq!(s[0].fs_growth_bytes, 160);
        assert!(s[0].low && s[1].low);
        // Alone on its filesystem, 100 fits in 100.
        assert_eq!(s[2].fs_growth_bytes, 100);
        assert!(!s[2].low);
    }

    #[test]
    fn a_fully_allocated_pool_cannot_grow() {
        let s = assess(&[m("ssd", 1, 100, 104, 0)]);
        assert_eq!(s[0].growth_bytes, 0);
        assert!(!s[0].low);
    }
}
