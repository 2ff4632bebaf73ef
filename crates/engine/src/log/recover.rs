//! The segment table is not stored: at mount it is rebuilt from the volumes' overlays
//! (every log extent a volume's journal leaves behind names its pool and device offset).
//! Rebuilt segments are closed; their summaries list only the live extents. The same walk
//! checks the table at run time, as an invariant.

use std::collections::BTreeMap;

use super::{Piece, Segment};
use crate::engine::Engine;
use crate::overlay::Overlay;

/// (pool, group) -> (owner, held chunks mask, live bytes, live pieces)
type Census = BTreeMap<(u16, u64), (u32, u64, u64, Vec<Piece>)>;

impl Engine {
    /// Walk every volume's overlay and total what each segment group holds.
    fn log_census(&self) -> Result<Census, String> {
        let sb = self.cfg.log.segment_bytes;
        let cb = self.cfg.chunk_bytes;
        let n = self.seg_chunks();
        let mut census: Census = BTreeMap::new();
        for (v, vol) in self.vols.iter().enumerate() {
            for (s, e, val) in vol.overlay.iter() {
                let Overlay::Log { pool, dev_offset } = val else {
                    continue;
                };
                let p = pool.0 as usize;
                if p >= self.pools.len()
                    || dev_offset < crate::layout::DATA_START_BYTES
                    || self.group_of(dev_offset + (e - s) - 1) * n + n
                        > self.pools[p].alloc.chunks()
                {
                    return Err(format!(
                        "volume {}: log data at pool {} offset {dev_offset} lies outside the pool's segments",
                        vol.rec.name, pool.0
                    ));
                }
                let (mut lba, mut dev) = (s, dev_offset);
                while lba < e {
                    let g = self.group_of(dev);
                    let base = self.seg_base(g);
                    let len = (e - lba).min(base + sb - dev);
                    let entry = census
                        .entry((pool.0, g))
                        .or_insert((v as u32, 0, 0, Vec::new()));
                    if entry.0 != v as u32 {
                        return Err(format!(
                            "log segment {g} of pool {} holds data of volumes {} and {}",
                            self.cfg.pools[p].name,
                            self.vols[entry.0 as usize].rec.name,
                            vol.rec.name
                        ));
                    }
                    let first = (dev - base) / cb;
                    let last = (dev + len - 1 - base) / cb;
                    for c in first..=last {
                        entry.1 |= 1 << c;
                    }
                    entry.2 += len;
                    entry.3.push(Piece {
                        lba,
                        seg_off: (dev - base) as u32,
                        len: len as u32,
                    });
                    lba += len;
                    dev += len;
                }
            }
        }
        Ok(census)
    }

    /// The chunks log segments hold, for the allocator rebuild at mount.
    pub(crate) fn log_claims(&self) -> Result<Vec<(crate::types::PoolId, u64, String)>, String> {
        let n = self.seg_chunks();
        let mut claims = Vec::new();
        for ((p, g), (owner, held, _, _)) in self.log_census()? {
            for c in 0..n {
                if held >> c & 1 == 1 {
                    claims.push((
                        crate::types::PoolId(p),
                        g * n + c,
                        format!("log segment {g} of {}", self.vols[owner as usize].rec.name),
                    ));
                }
            }
        }
        Ok(claims)
    }

    /// Rebuild the segment tables from the overlays (after replay).
    pub(crate) fn rebuild_segments(&mut self) -> Result<(), String> {
        let sb = self.cfg.log.segment_bytes;
        for pl in self.logs.iter_mut() {
            *pl = Default::default();
        }
        for ((p, g), (owner, held, live, summary)) in self.log_census()? {
            let live_map = live_map_of(&summary, sb);
            self.logs[p as usize].segments.insert(
                g,
                Segment {
                    owner,
                    held,
                    written_bytes: sb,
                    live_bytes: live,
                    open: false,
                    last_write_ns: 0,
                    cleaning: false,
                    clean_failed: false,
                    stuck: false,
                    summary,
                    live: live_map,
                },
            );
        }
        Ok(())
    }

    /// Segment table invariants: owners, live bytes and the chunks each holds.
    pub(crate) fn check_log(&self) -> Result<Vec<(usize, u64, String)>, String> {
        let n = self.seg_chunks();
        let census = self.log_census()?;
        let mut claims = Vec::new();
        for (p, pl) in self.logs.iter().enumerate() {
            for (&g, seg) in &pl.segments {
                let (owner, held, live) = census
                    .get(&(p as u16, g))
                    .map(|c| (c.0, c.1, c.2))
                    .unwrap_or((seg.owner, 0, 0));
                if owner != seg.owner || held & !seg.held != 0 || live != seg.live_bytes {
                    return Err(format!(
                        "pool {p} log segment {g}: table says owner {} live {} held {:#x}, overlays say owner {owner} live {live} held {held:#x}",
                        seg.owner, seg.live_bytes, seg.held
                    ));
                }
                let want = census.get(&(p as u16, g)).map_or_else(
                    || super::livemap::LiveMap::new(self.cfg.log.segment_bytes),
                    |c| live_map_of(&c.3, self.cfg.log.segment_bytes),
                );
                let ok = if seg.live.inexact {
                    seg.live.covers(&want)
                } else {
                    seg.live.same_sectors(&want)
                };
                if !ok {
                    return Err(format!(
                        "pool {p} log segment {g}: its live-sector map disagrees with the overlays"
                    ));
                }
                if live == 0 && !seg.open && !seg.cleaning {
                    return Err(format!("pool {p} log segment {g} is empty but not freed"));
                }
                for c in 0..n {
                    if seg.held >> c & 1 == 1 {
                        claims.push((
                            p,
                            g * n + c,
                            format!(
                                "log segment {g} of {}",
                                self.vols[seg.owner as usize].rec.name
                            ),
                        ));
                    }
                }
            }
        }
        for &(p, g) in census.keys() {
            if !self.logs[p as usize].segments.contains_key(&g) {
                return Err(format!(
                    "pool {p}: an overlay points into log segment {g}, which is not in the table"
                ));
            }
        }
        Ok(claims)
    }
}

/// The live-sector map of a segment holding `pieces`.
fn live_map_of(pieces: &[Piece], segment_bytes: u64) -> super::livemap::LiveMap {
    let mut m = super::livemap::LiveMap::new(segment_bytes);
    for p in pieces {
        m.set(p.seg_off as u64, p.len as u64);
    }
    m
}
