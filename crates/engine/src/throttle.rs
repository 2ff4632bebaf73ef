//! The virtual performance throttle of seed 003 (section 4): a pool's completions are held
//! until k times a model's service time has passed since the operation was dispatched, so
//! a fast pool (a page-cached file, an SSD) serves like the modelled drive slowed by k.
//!
//! It sits in the engine, between the device and the rest of the engine, so the same
//! code runs in the simulator and in `serve`: a held completion's target is one of the
//! deadlines `Engine::next_deadline` reports, and `Engine::tick` releases it. The operation stays in flight (its scheduler and the
//! pool's queue depth see it outstanding) until it is released, as with the paper's
//! iprobe in the SCSI completion path.
//!
//! The model is the paper's linear one, X = R/2 + S d/D, with D the pool's size (the
//! paper scales d_v/D_v = d_r/D_r) and d the distance in sectors from the end of the
//! previous dispatched operation. Optionally a shadow of the drive's cache (FIFO
//! segments, as CATS keeps) gives predicted hits the paper's fixed 250 us.
//!
//! k adapts when `adapt` is on: a completion that arrives after its target means k is
//! too small (k grows by 10 %); more than `PILE` held completions mean the target is
//! slower than needed (k shrinks by 2 % per such release). Only a completion dispatched
//! since k last grew counts as new evidence: a device stall makes every operation in
//! flight late at once, and compounding 10 % per such completion would inflate k far
//! past what the stall showed. k never grows past what the late completion needed.
//!
//! A pile needs more than `PILE` operations in flight, so on a pool of queue depth 4 or
//! less (the paper's drive ran at depth 1) k could only grow. tiervisor's own addition:
//! over every `WINDOW` completions with none late, if k exceeds `SLACK` times the largest
//! k any of them needed (its real service over the model's time), k shrinks by up to
//! 10 % toward that. A device that got faster then lowers k at any depth, and k stays
//! above what the window showed, so the same load does not turn late.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sched::ShadowCache;
use crate::types::DeviceCompletion;

/// Held completions beyond which an adapting throttle lowers k.
const PILE: usize = 4;
/// Completions per window of the slack rule.
const WINDOW: u32 = 64;
/// Margin kept over the largest k a window needed.
const SLACK: f64 = 1.25;
pub const K_MIN: f64 = 1.0;
pub const K_MAX: f64 = 1000.0;

/// A pool's throttle (`throttle = { model = ..., k = ..., adapt = ... }`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThrottleConfig {
    /// What the model is called in reports (`cheetah-15k4`, `linear`).
    pub model: String,
    /// R/2 of the linear model: the service time at distance 0.
    pub half_rotation_ns: u64,
    /// S: the added service time at the maximum distance.
    pub max_seek_ns: u64,
    /// D in sectors; 0: the pool's size.
    pub max_seek_sectors: u64,
    /// Shadow cache: segments (0: no cache), sectors per segment, prefetch sectors, and
    /// the model's service time of a predicted hit.
    pub cache_segments: usize,
    pub sectors_per_segment: u64,
    pub prefetch_sectors: u64,
    pub cache_hit_ns: u64,
    /// The scale factor at start.
    pub k: f64,
    pub adapt: bool,
}

impl ThrottleConfig {
    /// The paper's fit for the Seagate Cheetah 15K.4 (X = 4.25 + 5.25 d/D ms, 7,077 KB
    /// of cache in 221-sector segments with 64 sectors of prefetch, hits 250 us).
    pub fn cheetah_15k4(k: f64, adapt: bool) -> ThrottleConfig {
        ThrottleConfig {
            model: "cheetah-15k4".into(),
            half_rotation_ns: 4_250_000,
            max_seek_ns: 5_250_000,
            max_seek_sectors: 0,
            cache_segments: 64,
            sectors_per_segment: 221,
            prefetch_sectors: 64,
            cache_hit_ns: 250_000,
            k,
            adapt,
        }
    }
}

/// What reports show of a throttled pool.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ThrottleReport {
    pub model: String,
    pub k: f64,
    pub adapt: bool,
    /// Operations given a target.
    pub ops: u64,
    /// Completions that arrived after their target.
    pub late: u64,
    /// Times the slack rule lowered k.
    pub k_lowered: u64,
    /// Predicted cache hits.
    pub cache_hits: u64,
    pub held_now: u64,
    /// Completions handed on before their target: a broken throttle (always 0).
    pub early: u64,
    /// Total time completions were held past their real completion.
    pub added_delay_ns: u64,
    /// Sum of the model's service times X (before k).
    pub model_service_ns: u64,
    /// Service time as the engine saw it (dispatch to release, k times the model's
    /// where the device kept up): count, mean and variance in ms and ms².
    pub services: u64,
    pub mean_service_ms: f64,
    pub var_service_ms2: f64,
}

/// One pool's throttle state.
pub(crate) struct Throttle {
    cfg: ThrottleConfig,
    d_sectors: u64,
    last_sector: u64,
    cache: ShadowCache,
    k: f64,
    /// Held completions by (target, arrival order): the completion, when it arrived
    /// and when its operation was dispatched.
    held: BTreeMap<(u64, u64), (DeviceCompletion, u64, u64)>,
    seq: u64,
    stat: ThrottleReport,
    /// Sum and sum of squares of services, in ms.
    service_ms: (f64, f64),
    /// When k last grew: completions dispatched before it were targeted with the old k.
    k_grown_at_ns: u64,
    slack: SlackWindow,
}

/// The slack rule's window: completions dispatched since k last changed.
#[derive(Default)]
struct SlackWindow {
    since_ns: u64,
    n: u32,
    max_need: f64,
    late: bool,
}

impl Throttle {
    pub fn new(cfg: &ThrottleConfig, pool_bytes: u64) -> Throttle {
        let d_sectors = if cfg.max_seek_sectors > 0 {
            cfg.max_seek_sectors
        } else {
            (pool_bytes / 512).max(1)
        };
        Throttle {
            d_sectors,
            last_sector: 0,
            cache: ShadowCache::new(cfg.cache_segments, cfg.sectors_per_segment),
            k: cfg.k.clamp(K_MIN, K_MAX),
            held: BTreeMap::new(),
            seq: 0,
            service_ms: (0.0, 0.0),
            k_grown_at_ns: 0,
            slack: SlackWindow::default(),
            stat: ThrottleReport {
                model: cfg.model.clone(),
                adapt: cfg.adapt,
                ..Default::default()
            },
            cfg: cfg.clone(),
        }
    }

    /// The model's service time of a data operation dispatched now, in dispatch order.
    fn model_ns(&mut self, offset_bytes: u64, len_bytes: u64, is_write: bool) -> u64 {
        let start = offset_bytes / 512;
        let end = (offset_bytes + len_bytes).div_ceil(512).max(start + 1);
        if !is_write && self.cache.hit(start, end) {
            self.stat.cache_hits += 1;
            return self.cfg.cache_hit_ns;
        }
        let d = start.abs_diff(self.last_sector).min(self.d_sectors);
        self.last_sector = end;
        if !is_write {
            self.cache.record(start, end + self.cfg.prefetch_sectors);
        }
        self.cfg.half_rotation_ns
            + (self.cfg.max_seek_ns as u128 * d as u128 / self.d_sectors as u128) as u64
    }

    /// The target completion time of a data operation dispatched at `now`.
    pub fn target(&mut self, now: u64, offset_bytes: u64, len_bytes: u64, is_write: bool) -> u64 {
        let x = self.model_ns(offset_bytes, len_bytes, is_write);
        self.stat.ops += 1;
        self.stat.model_service_ns += x;
        now + (self.k * x as f64) as u64
    }

    fn served(&mut self, dispatched: u64, now: u64) {
        let ms = now.saturating_sub(dispatched) as f64 / 1e6;
        self.stat.services += 1;
        self.service_ms.0 += ms;
        self.service_ms.1 += ms * ms;
    }

    /// A completion arrived at `now` for an operation dispatched at `dispatched` with
    /// `target`: hold it (Ok) or hand it back to pass at once (k grows if it is late).
    pub fn arrive(
        &mut self,
        now: u64,
        (dispatched, target): (u64, u64),
        c: DeviceCompletion,
    ) -> Result<(), DeviceCompletion> {
        if self.cfg.adapt {
            self.slack_sample(now, dispatched, target);
        }
        if target <= now {
            self.served(dispatched, now);
            if target < now {
                self.stat.late += 1;
                if self.cfg.adapt && dispatched >= self.k_grown_at_ns {
                    // The k this operation needed: its service over the model's time.
                    let model_ns = (target - dispatched) as f64 / self.k;
                    let needed = (now - dispatched) as f64 / model_ns.max(1.0);
                    self.k = (self.k * 1.1).min(needed.max(self.k)).min(K_MAX);
                    self.k_grown_at_ns = now;
                    self.slack = SlackWindow {
                        since_ns: now,
                        ..SlackWindow::default()
                    };
                }
            }
            return Err(c);
        }
        self.seq += 1;
        self.held.insert((target, self.seq), (c, now, dispatched));
        Ok(())
    }

    /// The slack rule: one completion of an operation dispatched at `dispatched` with
    /// `target` arrived at `now`.
    fn slack_sample(&mut self, now: u64, dispatched: u64, target: u64) {
        let w = &mut self.slack;
        // Targeted with an earlier k: its model time cannot be told from it.
        if dispatched < w.since_ns || target <= dispatched {
            return;
        }
        let model_ns = (target - dispatched) as f64 / self.k;
        let need = (now - dispatched) as f64 / model_ns.max(1.0);
        w.max_need = w.max_need.max(need);
        w.late |= target < now;
        w.n += 1;
        if w.n < WINDOW {
            return;
        }
        let floor = (SLACK * w.max_need).max(K_MIN);
        if !w.late && self.k > floor {
            self.k = (self.k * 0.9).max(floor);
            self.stat.k_lowered += 1;
        }
        self.slack = SlackWindow {
            since_ns: now,
            ..SlackWindow::default()
        };
    }

    /// When the earliest held completion may pass (a deadline of the engine's).
    pub fn next_release_at(&self) -> Option<u64> {
        self.held.first_key_value().map(|(&(target, _), _)| target)
    }

    /// The next held completion due by `now`, if any.
    pub fn release(&mut self, now: u64) -> Option<DeviceCompletion> {
        let entry = self.held.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        let (c, arrived, dispatched) = entry.remove();
        self.stat.added_delay_ns += now - arrived;
        self.served(dispatched, now);
        if self.cfg.adapt && self.held.len() >= PILE {
            self.k = (self.k * 0.98).max(K_MIN);
        }
        Some(c)
    }

    /// A completion of an operation with `target` leaves the throttle at `now`.
    pub fn handed_on(&mut self, now: u64, target: u64) {
        if now < target {
            self.stat.early += 1;
        }
    }

    /// The throttle's invariants, given the pool's operations in flight.
    pub fn check(&self, in_flight: u32) -> Result<(), String> {
        if self.stat.early > 0 {
            return Err(format!(
                "{} completion(s) passed before their modelled time",
                self.stat.early
            ));
        }
        if self.held.len() > in_flight as usize {
            return Err(format!(
                "{} completions held but only {in_flight} operations in flight",
                self.held.len()
            ));
        }
        Ok(())
    }

    pub fn report(&self) -> ThrottleReport {
        let n = self.stat.services.max(1) as f64;
        let mean = self.service_ms.0 / n;
        ThrottleReport {
            k: self.k,
            mean_service_ms: mean,
            var_service_ms2: (self.service_ms.1 / n - mean * mean).max(0.0),
            held_now: self.held.len() as u64,
            ..self.stat.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::OpId;

    const MS: u64 = 1_000_000;

    fn linear(k: f64, adapt: bool) -> ThrottleConfig {
        ThrottleConfig {
            model: "linear".into(),
            half_rotation_ns: 2 * MS,
            max_seek_ns: 4 * MS,
            max_seek_sectors: 0,
            cache_segments: 0,
            sectors_per_segment: 1,
            prefetch_sectors: 0,
            cache_hit_ns: 0,
            k,
            adapt,
        }
    }

    fn done(id: u64) -> DeviceCompletion {
        DeviceCompletion {
            id: OpId(id),
            result: Ok(()),
            data: None,
        }
    }

    #[test]
    fn targets_follow_the_linear_model_times_k() {
        // A 1 MiB pool: D = 2048 sectors.
        let mut t = Throttle::new(&linear(2.0, false), 1 << 20);
        // From sector 0 to 0: X = R/2 = 2 ms; k X = 4 ms.
        assert_eq!(t.target(10, 0, 4096, false), 10 + 4 * MS);
        // The head is at sector 8; to sector 1032 is d = 1024 = D/2: X = 2 + 2 = 4 ms.
        assert_eq!(t.target(0, 1032 * 512, 512, true), 8 * MS);
        // Distances past D count as D.
        assert_eq!(
            t.target(0, 0, 512, false),
            2 * (2 * MS + 4 * MS * 1033 / 2048)
        );
        assert_eq!(t.report().ops, 3);
    }

    #[test]
    fn completions_are_held_until_their_target_and_late_ones_raise_k() {
        let mut t = Throttle::new(&linear(2.0, true), 1 << 20);
        assert!(t.arrive(MS, (0, 5 * MS), done(1)).is_ok());
        assert!(t.arrive(2 * MS, (0, 3 * MS), done(2)).is_ok());
        assert!(t.release(3 * MS - 1).is_none());
        assert_eq!(t.release(3 * MS).map(|c| c.id), Some(OpId(2)));
        assert!(t.release(4 * MS).is_none());
        assert_eq!(t.release(6 * MS).map(|c| c.id), Some(OpId(1)));
        // Held 1 ms and 5 ms past arrival.
        assert_eq!(t.report().added_delay_ns, 6 * MS);
        // A late completion passes at once and k grows 10 %.
        assert!(t.arrive(9 * MS, (0, 8 * MS), done(3)).is_err());
        let r = t.report();
        assert_eq!(r.late, 1);
        assert!((r.k - 2.2).abs() < 1e-9, "{}", r.k);
    }

    #[test]
    fn a_stall_raises_k_once_and_no_further_than_it_needed() {
        let mut t = Throttle::new(&linear(2.0, true), 1 << 20);
        // A 1 s stall: 50 operations dispatched before it all complete late at once.
        for i in 0..50 {
            let (dispatched, target) = (i * MS, i * MS + 4 * MS);
            assert!(t.arrive(1_000 * MS, (dispatched, target), done(i)).is_err());
        }
        let r = t.report();
        assert_eq!(r.late, 50);
        // One piece of evidence: k grows once, by 10 %, not 1.1^50 times.
        assert!((r.k - 2.2).abs() < 1e-9, "{}", r.k);
        // A later operation, dispatched under the new k and barely late, raises k only
        // to what it needed: X = 2 ms (4 ms at k = 2), served in 4.5 ms, so k = 2.25.
        let dispatched = 1_001 * MS;
        let target = dispatched + (2.2 * 2.0 * MS as f64) as u64;
        assert!(
            t.arrive(dispatched + 4_500_000, (dispatched, target), done(99))
                .is_err()
        );
        let r = t.report();
        assert!((r.k - 2.25).abs() < 1e-6, "{}", r.k);
    }

    #[test]
    fn a_pile_of_held_completions_lowers_k() {
        let mut t = Throttle::new(&linear(10.0, true), 1 << 20);
        for i in 0..8 {
            assert!(t.arrive(0, (0, 100 + i), done(i)).is_ok());
        }
        while t.release(1_000).is_some() {}
        assert!(t.report().k < 10.0);
        // Without adapt, k stays put.
        let mut t = Throttle::new(&linear(10.0, false), 1 << 20);
        for i in 0..8 {
            assert!(t.arrive(0, (0, 100 + i), done(i)).is_ok());
        }
        while t.release(1_000).is_some() {}
        assert_eq!(t.report().k, 10.0);
    }

    /// One operation at a time (queue depth 1, as the paper's drive): the device serves
    /// each in `device_ns`; returns the throttle after `n` operations.
    fn run_depth_one(k: f64, adapt: bool, device_ns: u64, n: u64) -> Throttle {
        let mut t = Throttle::new(&linear(k, adapt), 1 << 20);
        let mut now = 0;
        for i in 0..n {
            let target = t.target(now, 0, 4096, false);
            let arrived = now + device_ns;
            now = match t.arrive(arrived, (now, target), done(i)) {
                Err(_) => arrived,
                Ok(()) => {
                    assert!(t.release(target).is_some());
                    target
                }
            };
        }
        t
    }

    #[test]
    fn at_queue_depth_one_k_comes_down_to_what_the_device_needs() {
        // X is about 2.016 ms; the device takes 3 ms, so it needs k = 1.49. Starting at
        // k = 10, no completion is ever held beside another: the pile rule cannot fire.
        let t = run_depth_one(10.0, true, 3 * MS, 3_000);
        let r = t.report();
        let need = 3.0 / 2.015625;
        assert!(r.k <= SLACK * need * 1.12, "k {} (need {need})", r.k);
        assert!(r.k >= SLACK * need - 1e-9, "k {} (need {need})", r.k);
        assert_eq!(r.late, 0);
        assert!(r.k_lowered >= 10, "{}", r.k_lowered);
        // A device faster than the model at k = 1: k goes to 1 and stays there.
        let r = run_depth_one(10.0, true, MS / 10, 3_000).report();
        assert_eq!(r.k, K_MIN);
        // Without adapt, k stays put.
        let r = run_depth_one(10.0, false, 3 * MS, 3_000).report();
        assert_eq!((r.k, r.k_lowered), (10.0, 0));
    }

    #[test]
    fn a_late_completion_restarts_the_window() {
        let mut t = Throttle::new(&linear(4.0, true), 1 << 20);
        let mut now = 0;
        let mut one = |t: &mut Throttle, i: u64, late: bool| {
            let target = t.target(now, 0, 4096, false);
            let arrived = if late { target + MS } else { now + MS / 10 };
            now = if t.arrive(arrived, (now, target), done(i)).is_ok() {
                assert!(t.release(target).is_some());
                target
            } else {
                arrived
            };
        };
        for i in 0..10 {
            one(&mut t, i, false);
        }
        one(&mut t, 10, true);
        let grown = t.report().k;
        assert!(grown > 4.0, "{grown}");
        // The window counts from the growth: 63 fast completions do not fill it.
        for i in 11..11 + WINDOW as u64 - 1 {
            one(&mut t, i, false);
        }
        assert_eq!((t.report().k, t.report().k_lowered), (grown, 0));
        one(&mut t, 99, false);
        let r = t.report();
        assert_eq!(r.k_lowered, 1);
        assert!((r.k - grown * 0.9).abs() < 1e-9, "{} {grown}", r.k);
    }

    #[test]
    fn predicted_cache_hits_take_the_hit_time() {
        let mut t = Throttle::new(&ThrottleConfig::cheetah_15k4(1.0, false), 1 << 30);
        let first = t.target(0, 1 << 20, 4096, false);
        assert!(first >= 4_250_000, "{first}");
        // The next 4 KiB lies in the prefetched sectors of the same segment.
        assert_eq!(t.target(0, (1 << 20) + 4096, 4096, false), 250_000);
        assert_eq!(t.report().cache_hits, 1);
    }
}
