//! A `cache` volume's writeback pace (`WritebackPace`): bcache's rate controller and the
//! idle clock both kernels use (the rules are in `cache_writeback/mod.rs`). It names no
//! `Engine`.

/// dm-cache: the cache is idle after a second without I/O (`iot_idle_for(.., HZ)`).
pub const SMQ_IDLE_NS: u64 = 1_000_000_000;
/// bcache: the rate controller's period (`writeback_rate_update_seconds`).
pub const BCACHE_UPDATE_NS: u64 = 5_000_000_000;
/// bcache: maximum rate after six periods without I/O (`set_at_max_writeback_rate`).
pub const BCACHE_IDLE_NS: u64 = 6 * BCACHE_UPDATE_NS;
/// bcache's `writeback_rate_p_term_inverse` and `writeback_rate_i_term_inverse`.
const BCACHE_P_TERM_INVERSE: i64 = 40;
const BCACHE_I_TERM_INVERSE: i64 = 10_000;
/// `bch_next_delay()` keeps its schedule within 2.5 s ahead of and 2 s behind now.
const PACE_AHEAD_NS: u64 = 2_500_000_000;
const PACE_BEHIND_NS: u64 = 2_000_000_000;

/// A `cache` volume's writeback pacing: when it last saw a request, and bcache's rate.
#[derive(Clone, Debug, Default)]
pub struct WritebackPace {
    /// The volume's last request (reads and writes; a flush moves no data).
    last_request_ns: u64,
    /// bcache: the current writeback rate (0 at or under the target).
    rate_bytes_per_s: u64,
    /// bcache: the integral term, in byte-seconds.
    integral_byte_s: i64,
    next_update_ns: u64,
    /// bcache: the earliest start of the next paced writeback.
    next_start_ns: u64,
}

impl WritebackPace {
    pub fn request(&mut self, now: u64) {
        self.last_request_ns = self.last_request_ns.max(now);
    }

    /// No request for `idle_ns`.
    pub fn idle(&self, now: u64, idle_ns: u64) -> bool {
        now.saturating_sub(self.last_request_ns) >= idle_ns
    }

    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    pub(super) fn update_due(&self, now: u64) -> bool {
        now >= self.next_update_ns
    }

    /// bcache's controller, run once per period: the new rate from the dirty bytes and
    /// the target.
    pub(super) fn update(&mut self, now: u64, dirty_bytes: u64, target_bytes: u64) {
        if !self.update_due(now) {
            return;
        }
        self.next_update_ns = now + BCACHE_UPDATE_NS;
        let error = dirty_bytes as i64 - target_bytes as i64;
        if (error < 0 && self.integral_byte_s > 0) || error > 0 {
            self.integral_byte_s += error * (BCACHE_UPDATE_NS / 1_000_000_000) as i64;
        }
        let rate = error / BCACHE_P_TERM_INVERSE + self.integral_byte_s / BCACHE_I_TERM_INVERSE;
        self.rate_bytes_per_s = if error > 0 { rate.max(1) as u64 } else { 0 };
    }

    pub(super) fn may_start(&self, now: u64) -> bool {
        self.rate_bytes_per_s > 0 && self.next_start_ns <= now
    }

    /// A paced writeback of `bytes` started: the next waits `bytes / rate`.
    pub(super) fn started(&mut self, now: u64, bytes: u64) {
        let gap = (bytes as u128 * 1_000_000_000 / self.rate_bytes_per_s.max(1) as u128)
            .min(u64::MAX as u128) as u64;
        self.next_start_ns = self
            .next_start_ns
            .saturating_add(gap)
            .clamp(now.saturating_sub(PACE_BEHIND_NS), now + PACE_AHEAD_NS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcache_rate_follows_the_error_and_its_integral() {
        let mut p = WritebackPace::default();
        let mib = 1u64 << 20;
        // 50 MiB over a 10 MiB target: 40 MiB / 40 = 1 MiB/s, plus 200 MiB·s / 10000.
        p.update(0, 50 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), mib + 200 * mib / 10_000);
        // Not again within the period.
        p.update(BCACHE_UPDATE_NS - 1, 90 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), mib + 200 * mib / 10_000);
        // Paced: a 1 MiB writeback, then the next about a second later.
        assert!(p.may_start(0));
        p.started(0, mib);
        assert!(!p.may_start(900_000_000));
        assert!(p.may_start(1_000_000_000));
        // Under the target: nothing until idle.
        p.update(BCACHE_UPDATE_NS, 5 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), 0);
        assert!(!p.may_start(10 * BCACHE_UPDATE_NS));
        // Idle is measured from the last request.
        p.request(7_000_000_000);
        assert!(!p.idle(7_500_000_000, SMQ_IDLE_NS));
        assert!(p.idle(8_000_000_000, SMQ_IDLE_NS));
    }
}
