//! How one system is split into shards (issue 18): a shard is one complete [`Engine`]
//! over its own slice of every pool, owning a subset of the volumes. The engine does not
//! know it is a shard beyond [`ShardId`] (recorded in each slice's superblock, so a
//! system is never mounted with another shard count); drivers add the slice's base to
//! every device operation of that shard and route completions back by shard.
//!
//! [`Engine`]: crate::Engine

pub(crate) mod id;

pub use id::{MAX_SHARDS, ShardId};

use crate::config::{ConfigError, EngineConfig};
use crate::layout::offsets::DATA_START_BYTES;

/// One shard's byte range of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub base_bytes: u64,
    pub len_bytes: u64,
}

impl Slice {
    pub fn end_bytes(&self) -> u64 {
        self.base_bytes + self.len_bytes
    }
}

/// The partition of one configuration into `shards` engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardPlan {
    shards: u16,
    /// `slices[pool][shard]`.
    slices: Vec<Vec<Slice>>,
    /// The shard of each volume, configured ones first (in configuration order), then
    /// those created at run time (in creation order).
    volume_shard: Vec<u16>,
}

impl ShardPlan {
    /// Split every pool of `cfg` into `shards` equal chunk-aligned slices (the last takes
    /// the remainder) and deal the configured volumes out round robin, which gives every
    /// shard the same number of volumes give or take one.
    pub fn new(cfg: &EngineConfig, shards: u16) -> Result<ShardPlan, ConfigError> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(ConfigError(format!(
                "shards = {shards}: expected 1..={MAX_SHARDS}"
            )));
        }
        let n = u64::from(shards);
        let chunk = cfg.chunk_bytes.max(1);
        let min_slice = DATA_START_BYTES + 4 * chunk;
        let mut slices = Vec::with_capacity(cfg.pools.len());
        for p in &cfg.pools {
            let per = p.capacity_bytes / n / chunk * chunk;
            if per < min_slice {
                return Err(ConfigError(format!(
                    "pool {}: {} bytes split into {shards} shards gives slices of {per} bytes, below the {min_slice} a shard needs (its superblock area plus 4 chunks)",
                    p.name, p.capacity_bytes
                )));
            }
            let pool: Vec<Slice> = (0..n)
                .map(|k| Slice {
                    base_bytes: k * per,
                    len_bytes: if k + 1 == n {
                        p.capacity_bytes - k * per
                    } else {
                        per
                    },
                })
                .collect();
            slices.push(pool);
        }
        let volume_shard = (0..cfg.volumes.len())
            .map(|i| (i as u64 % n) as u16)
            .collect();
        Ok(ShardPlan {
            shards,
            slices,
            volume_shard,
        })
    }

    pub fn shards(&self) -> u16 {
        self.shards
    }

    /// Shard `k`'s slice of pool `pool`.
    pub fn slice(&self, pool: usize, k: u16) -> Slice {
        self.slices[pool][k as usize]
    }

    /// The byte offset a device operation of shard `k` on `pool` is shifted by.
    #[inline]
    pub fn base_bytes(&self, pool: usize, k: u16) -> u64 {
        self.slices[pool][k as usize].base_bytes
    }

    /// The shard owning volume `v` (configured volumes, then created ones).
    pub fn volume_shard(&self, v: usize) -> Option<u16> {
        self.volume_shard.get(v).copied()
    }

    /// Volumes each shard owns.
    pub fn volumes_per_shard(&self) -> Vec<usize> {
        let mut n = vec![0usize; self.shards as usize];
        for &k in &self.volume_shard {
            n[k as usize] += 1;
        }
        n
    }

    /// The shard a volume created at run time goes to: the one owning the fewest
    /// volumes (the lowest index among equals, so the choice is deterministic).
    pub fn least_loaded(&self) -> u16 {
        let n = self.volumes_per_shard();
        (0..self.shards)
            .min_by_key(|&k| (n[k as usize], k))
            .unwrap_or(0)
    }

    /// Record that the next volume (index `volume_count()`) lives on shard `k`.
    pub fn add_volume(&mut self, k: u16) {
        self.volume_shard.push(k.min(self.shards - 1));
    }

    pub fn volume_count(&self) -> usize {
        self.volume_shard.len()
    }

    /// Shard `k`'s engine configuration: every pool's capacity is its slice, budgets that
    /// span the volumes of a pool or of the engine are divided among the shards (each at
    /// least what validation allows), and only the volumes it owns are listed.
    pub fn shard_config(&self, cfg: &EngineConfig, k: u16) -> EngineConfig {
        let n = u64::from(self.shards);
        let mut c = cfg.clone();
        c.shard = ShardId {
            index: k,
            count: self.shards,
        };
        if self.shards == 1 {
            return c;
        }
        for (p, pc) in c.pools.iter_mut().enumerate() {
            pc.capacity_bytes = self.slices[p][k as usize].len_bytes;
            if let Some(w) = pc.write_buffer.as_mut() {
                w.size_bytes = (w.size_bytes / n).max(64 << 10);
            }
        }
        c.volumes = cfg
            .volumes
            .iter()
            .enumerate()
            .filter(|(i, _)| self.volume_shard.get(*i) == Some(&k))
            .map(|(_, v)| v.clone())
            .collect();
        let t = &mut c.tiering;
        t.bytes_per_s = (t.bytes_per_s / n).max(1);
        t.max_moves = (t.max_moves / self.shards as u32).max(1);
        let l = &mut c.log;
        // 0 means no cap and stays so.
        l.clean_bytes_per_s /= n;
        if cfg.log.clean_bytes_per_s > 0 {
            l.clean_bytes_per_s = l.clean_bytes_per_s.max(1);
        }
        // The cleaning mark counts free segments of a pool, so each slice takes its share;
        // the reserve is what one cleaner needs to copy forward at all, so it stays whole.
        l.clean_below_free_segments = l
            .clean_below_free_segments
            .div_ceil(n)
            .max(l.reserve_segments + 2);
        c
    }

    /// DST's `shard-overlap` defect: shard 0's slice of every pool grows past its end
    /// into shard 1's, so shard 0's last chunk is shard 1's first data chunk and both
    /// can allocate it. Nothing else notices; DST must.
    #[cfg(feature = "inject-bugs")]
    pub fn inject_overlap(&mut self, chunk_bytes: u64) {
        if self.shards < 2 {
            return;
        }
        for pool in &mut self.slices {
            pool[0].len_bytes += DATA_START_BYTES + chunk_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Medium, Placement, PoolConfig, Provisioning, VolumeConfig};
    use crate::sched::{SchedSpec, VolumeQos};
    use crate::types::PoolId;

    fn cfg(pools: &[u64], volumes: usize) -> EngineConfig {
        EngineConfig {
            pools: pools
                .iter()
                .enumerate()
                .map(|(i, &cap)| PoolConfig {
                    name: format!("p{i}"),
                    medium: Medium::Ssd,
                    capacity_bytes: cap,
                    queue_depth: 4,
                    scheduler: SchedSpec::default(),
                    log: false,
                    throttle: None,
                    write_buffer: None,
                })
                .collect(),
            volumes: (0..volumes)
                .map(|i| VolumeConfig {
                    name: format!("v{i}"),
                    size_bytes: 8 << 20,
                    home_pool: PoolId(0),
                    fast_pool: None,
                    provisioning: Provisioning::Thin,
                    placement: Placement::Pinned,
                    log: None,
                    qos: VolumeQos::default(),
                })
                .collect(),
            ..EngineConfig::default()
        }
    }

    #[test]
    fn slices_are_disjoint_chunk_aligned_and_cover_the_pool() {
        // Odd capacities, not multiples of the chunk or of the shard count.
        let c = cfg(&[(1 << 30) + 12345, (300 << 20) + 4096 * 7, 64 << 20], 5);
        for shards in 1..=7u16 {
            let plan = ShardPlan::new(&c, shards).unwrap();
            for (p, pc) in c.pools.iter().enumerate() {
                let mut at = 0;
                for k in 0..shards {
                    let s = plan.slice(p, k);
                    assert_eq!(s.base_bytes, at, "pool {p} shard {k} of {shards}");
                    assert!(s.base_bytes.is_multiple_of(c.chunk_bytes));
                    if k + 1 < shards {
                        assert!(s.len_bytes.is_multiple_of(c.chunk_bytes));
                    }
                    assert!(s.len_bytes >= DATA_START_BYTES + 4 * c.chunk_bytes);
                    at = s.end_bytes();
                }
                assert_eq!(at, pc.capacity_bytes, "pool {p}: {shards} shards cover it");
                // Equal slices: the remainder is under a chunk per shard.
                let first = plan.slice(p, 0).len_bytes;
                let last = plan.slice(p, shards - 1).len_bytes;
                assert!(last >= first && last - first < u64::from(shards) * c.chunk_bytes);
            }
        }
    }

    #[test]
    fn volumes_are_dealt_evenly_and_new_ones_go_to_the_least_loaded_shard() {
        let c = cfg(&[1 << 30], 7);
        let mut plan = ShardPlan::new(&c, 3).unwrap();
        assert_eq!(plan.volumes_per_shard(), vec![3, 2, 2]);
        assert_eq!(plan.volume_shard(0), Some(0));
        assert_eq!(plan.volume_shard(4), Some(1));
        assert_eq!(plan.least_loaded(), 1);
        plan.add_volume(plan.least_loaded());
        assert_eq!(plan.least_loaded(), 2);
        plan.add_volume(plan.least_loaded());
        assert_eq!(plan.volumes_per_shard(), vec![3, 3, 3]);
        assert_eq!(plan.least_loaded(), 0);
        assert_eq!(plan.volume_shard(8), Some(2));
        // Every shard's configuration lists exactly its volumes and its slices.
        let names: Vec<Vec<String>> = (0..3)
            .map(|k| {
                let sc = plan.shard_config(&c, k);
                assert_eq!(sc.shard, ShardId { index: k, count: 3 });
                assert_eq!(sc.pools[0].capacity_bytes, plan.slice(0, k).len_bytes);
                sc.validate().unwrap();
                sc.volumes.iter().map(|v| v.name.clone()).collect()
            })
            .collect();
        assert_eq!(names[0], ["v0", "v3", "v6"]);
        assert_eq!(names[1], ["v1", "v4"]);
        assert_eq!(names[2], ["v2", "v5"]);
    }

    #[test]
    fn budgets_are_divided_and_one_shard_is_the_configuration_itself() {
        let mut c = cfg(&[1 << 30], 2);
        c.pools[0].write_buffer = Some(crate::wbuf::WriteBufferConfig {
            size_bytes: 64 << 20,
            max_age_ns: 1_000_000,
        });
        let one = ShardPlan::new(&c, 1).unwrap();
        assert_eq!(one.shard_config(&c, 0), c);
        let plan = ShardPlan::new(&c, 4).unwrap();
        let s = plan.shard_config(&c, 3);
        assert_eq!(s.pools[0].write_buffer.unwrap().size_bytes, 16 << 20);
        assert_eq!(s.tiering.bytes_per_s, c.tiering.bytes_per_s / 4);
        assert_eq!(s.tiering.max_moves, 1);
        assert_eq!(s.log.clean_bytes_per_s, c.log.clean_bytes_per_s / 4);
        assert_eq!(s.log.reserve_segments, c.log.reserve_segments);
        assert_eq!(
            s.log.clean_below_free_segments,
            c.log.reserve_segments + 2,
            "16 / 4 = 4 is below the reserve plus two"
        );
    }

    #[test]
    fn too_many_shards_for_a_pool_is_a_clear_error() {
        let c = cfg(&[8 << 20], 1);
        let e = ShardPlan::new(&c, 2).unwrap_err().0;
        assert!(e.contains("pool p0") && e.contains("2 shards"), "{e}");
        assert!(ShardPlan::new(&c, 0).unwrap_err().0.contains("1..="));
    }
}
