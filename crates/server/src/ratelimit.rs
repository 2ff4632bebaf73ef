//! Rate-limited logging: a failing disk completes thousands of operations a second with
//! an error, and each is worth a line only until the operator has seen the pattern.

use std::time::{Duration, Instant};

/// At most `per_window` messages per `window`; the rest are counted, and the first
/// message of a later window says how many were left out.
pub struct RateLimit {
    window: Duration,
    per_window: u32,
    start: Option<Instant>,
    shown: u32,
    suppressed: u64,
    /// All messages ever suppressed.
    pub suppressed_total: u64,
}

impl RateLimit {
    pub fn new(per_window: u32, window: Duration) -> RateLimit {
        RateLimit {
            window,
            per_window,
            start: None,
            shown: 0,
            suppressed: 0,
            suppressed_total: 0,
        }
    }

    /// Whether a message at `now` is shown: `Some(n)` with the number left out since
    /// the last one shown, `None` if this one is left out.
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        if self
            .start
            .is_none_or(|s| now.duration_since(s) >= self.window)
        {
            self.start = Some(now);
            self.shown = 0;
        }
        if self.shown < self.per_window {
            self.shown += 1;
            return Some(std::mem::take(&mut self.suppressed));
        }
        self.suppressed += 1;
        self.suppressed_total += 1;
        None
    }

    /// Messages left out and not yet reported (say so at shutdown).
    pub fn pending(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_shows_a_few_lines_then_says_how_many_were_left_out() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(3, Duration::from_secs(10));
        let shown: Vec<Option<u64>> = (0..1000).map(|_| r.check(t0)).collect();
        assert_eq!(&shown[..3], &[Some(0), Some(0), Some(0)]);
        assert!(shown[3..].iter().all(|s| s.is_none()));
        assert_eq!(r.pending(), 997);
        // The next window: shown again, with the count of what was left out.
        assert_eq!(r.check(t0 + Duration::from_secs(11)), Some(997));
        assert_eq!(r.pending(), 0);
        assert_eq!(r.suppressed_total, 997);
    }
}
