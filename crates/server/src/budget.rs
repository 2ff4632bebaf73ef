//! Request payload bytes in flight, per connection and in total: a client that pipelines
//! large requests and never reads the replies must not grow the server without bound.
//! Connections over their budget stop being parsed (and then read) until replies drain,
//! as nbdkit and qemu-nbd do.

/// The server-wide account. A connection's held bytes are its accepted read and write
/// payloads not yet answered plus its queued output.
#[derive(Debug)]
pub struct Budget {
    pub per_conn_bytes: u64,
    pub total_bytes: u64,
    held_total_bytes: u64,
    /// Whether connections were held back for the total, so they are woken when it drains.
    total_was_full: bool,
}

impl Budget {
    pub fn new(per_conn_bytes: u64, total_bytes: u64) -> Budget {
        Budget {
            per_conn_bytes,
            total_bytes,
            held_total_bytes: 0,
            total_was_full: false,
        }
    }

    /// The most one connection may hold now: its own cap, or nothing more (beyond one
    /// request on an idle connection) while the total is used up.
    pub fn limit_for_conn(&mut self) -> u64 {
        if self.held_total_bytes >= self.total_bytes {
            self.total_was_full = true;
            0
        } else {
            self.per_conn_bytes
        }
    }

    /// A connection's held bytes changed from `before` to `after`.
    pub fn adjust(&mut self, before: u64, after: u64) {
        self.held_total_bytes = (self.held_total_bytes + after).saturating_sub(before);
    }

    /// True once after the total drained below its cap having been full: the caller
    /// wakes every paused connection.
    pub fn take_total_freed(&mut self) -> bool {
        if self.total_was_full && self.held_total_bytes < self.total_bytes {
            self.total_was_full = false;
            return true;
        }
        false
    }

    pub fn held_total_bytes(&self) -> u64 {
        self.held_total_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_limits_every_connection_until_it_drains() {
        let mut b = Budget::new(32, 64);
        assert_eq!(b.limit_for_conn(), 32);
        b.adjust(0, 40);
        b.adjust(0, 30);
        assert_eq!(b.held_total_bytes(), 70);
        assert_eq!(b.limit_for_conn(), 0);
        assert!(!b.take_total_freed());
        b.adjust(40, 0);
        assert!(b.take_total_freed());
        assert!(!b.take_total_freed());
        assert_eq!(b.limit_for_conn(), 32);
    }
}
