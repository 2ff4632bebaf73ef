//! `placement = "oracle"` (issue 17): the best static placement, to measure the others
//! against, not a policy a server could run. Before the run it generates every VM's
//! whole workload exactly as the run will (same seed, same VM index), counts the requests
//! that touch each chunk, and maps the most-accessed chunks of all oracle volumes on their
//! fast pool, most accesses first, until the pool is full (ties by volume, then chunk, so
//! the choice is deterministic). Everything else goes where prefill puts it (the home
//! pool); nothing moves during the run. The engine sees a pinned volume with a fast pool,
//! so its mapping table and per-chunk memory are unchanged.
//!
//! Workloads that react to their own completions (`[vm.app]`, `[vm.surge]`) are counted
//! as generated without completions, which may differ from what the run issues.

use tiervisor_engine::{Engine, VolumeId};
use tiervisor_workload::WlKind;

use crate::scenario::Scenario;

/// Requests per volume the oracle reads ahead at most: a workload bounded only by time
/// (fio with `runtime_s` and no `ios`) never ends when generated without a clock.
const MAX_REQUESTS: u64 = 100_000_000;

/// Every request VM `i` will make, in order, as the chunks it touches: `Some((first,
/// last))` (inclusive, within the volume), `None` for a flush or an empty request.
pub(crate) fn each_request(
    sc: &Scenario,
    seed: u64,
    i: usize,
    mut f: impl FnMut(Option<(u64, u64)>),
) -> Result<(), String> {
    let vm = &sc.vms[i];
    let cb = sc.chunk_bytes;
    let vol_bytes = sc.volumes[vm.volume].size_bytes;
    let chunks = vol_bytes.div_ceil(cb);
    let (mut w, _) = vm.build(vol_bytes, seed, i)?;
    let mut n = 0u64;
    while let Some(r) = w.next(0) {
        n += 1;
        if n > MAX_REQUESTS {
            return Err(format!(
                "volume {}: an oracle placement needs a workload that ends (vm {} made more than {MAX_REQUESTS} requests; give fio `ios`)",
                sc.volumes[vm.volume].name, vm.name
            ));
        }
        if r.kind == WlKind::Flush || r.len_bytes == 0 {
            f(None);
            continue;
        }
        let last = ((r.offset_bytes + r.len_bytes - 1) / cb).min(chunks - 1);
        f(Some((r.offset_bytes / cb, last)));
    }
    Ok(())
}

/// Requests touching each chunk of volume `vi`, over all its VMs' whole workloads.
pub fn access_counts(sc: &Scenario, seed: u64, vi: usize) -> Result<Vec<u64>, String> {
    let vol_bytes = sc.volumes[vi].size_bytes;
    let mut counts = vec![0u64; vol_bytes.div_ceil(sc.chunk_bytes) as usize];
    for (i, _) in sc.vms.iter().enumerate().filter(|(_, m)| m.volume == vi) {
        each_request(sc, seed, i, |r| {
            if let Some((first, last)) = r {
                for c in first..=last {
                    counts[c as usize] += 1;
                }
            }
        })?;
    }
    Ok(counts)
}

/// Accessed chunks `(volume, chunk, count)`, most accessed first; ties by volume, chunk.
pub fn ranked(counts: &[(usize, Vec<u64>)]) -> Vec<(usize, u64, u64)> {
    let mut all: Vec<(usize, u64, u64)> = counts
        .iter()
        .flat_map(|(v, cs)| {
            cs.iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(move |(c, n)| (*v, c as u64, *n))
        })
        .collect();
    all.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    all
}

/// Map the oracle volumes' most-accessed chunks on their fast pools (before prefill maps
/// the rest). Returns the chunks placed, `(volume, chunk)`, in rank order.
pub fn place(engine: &mut Engine, sc: &Scenario, seed: u64) -> Result<Vec<(usize, u64)>, String> {
    if sc.volumes.iter().all(|v| !v.oracle) {
        return Ok(Vec::new());
    }
    let mut counts = Vec::new();
    for (vi, v) in sc.volumes.iter().enumerate().filter(|(_, v)| v.oracle) {
        counts.push((
            vi,
            access_counts(sc, seed, vi).map_err(|e| format!("{}: {e}", v.name))?,
        ));
    }
    let mut full = Vec::new();
    let mut placed = Vec::new();
    for (vi, c, _) in ranked(&counts) {
        let fast = sc.volumes[vi].fast_pool;
        if full.contains(&fast) {
            continue;
        }
        if engine
            .provision_fast(VolumeId(vi as u32), c)
            .map_err(|e| format!("oracle placement of volume {}: {e}", sc.volumes[vi].name))?
        {
            placed.push((vi, c));
        } else {
            full.push(fast);
        }
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_is_by_count_then_volume_then_chunk() {
        let counts = vec![(0, vec![3, 0, 5, 1]), (1, vec![5, 2, 0, 3])];
        let r: Vec<(usize, u64)> = ranked(&counts).iter().map(|x| (x.0, x.1)).collect();
        assert_eq!(r, [(0, 2), (1, 0), (0, 0), (1, 3), (1, 1), (0, 3)]);
    }
}
