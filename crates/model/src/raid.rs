//! A striped array (RAID 0) of identical drives, as the disk arrays of seed 004's
//! platform: consecutive `stripe_bytes` units of the array's address space go to the
//! members in turn, a request is split into one request per member it touches, and it
//! completes when its last part does. A FLUSH goes to every member. No parity, no
//! controller cache and no controller overhead of its own: an array controller's cost
//! belongs in the members' command overhead or the host's.

use crate::{DevOpKind, DevRequest, DeviceCounters, DeviceKind, DeviceModel, Model};

#[derive(Clone, Debug)]
pub struct Raid0 {
    members: Vec<Model>,
    stripe_bytes: u64,
}

impl Raid0 {
    /// An array of `members` (at least one) striped by `stripe_bytes` (a positive
    /// multiple of 512).
    pub fn new(members: Vec<Model>, stripe_bytes: u64) -> Result<Raid0, String> {
        if members.is_empty() {
            return Err("an array needs at least one drive".into());
        }
        if stripe_bytes == 0 || !stripe_bytes.is_multiple_of(crate::SECTOR_BYTES) {
            return Err(format!(
                "stripe {stripe_bytes} bytes: expected a positive multiple of 512"
            ));
        }
        Ok(Raid0 {
            members,
            stripe_bytes,
        })
    }

    /// Each member's contiguous range for `[offset, offset + len)`: a member's stripe
    /// units of consecutive rows are adjacent on it, so one range per member suffices.
    fn split(&self, offset_bytes: u64, len_bytes: u64) -> Vec<Option<(u64, u64)>> {
        let (n, stripe) = (self.members.len() as u64, self.stripe_bytes);
        let end = offset_bytes + len_bytes.max(1);
        let (u0, u1) = (offset_bytes / stripe, (end - 1) / stripe);
        (0..n)
            .map(|m| {
                // The member's first and last stripe unit within the request.
                let first = u0 + (m + n - u0 % n) % n;
                let last = u1.checked_sub((u1 % n + n - m) % n)?;
                if first > last || last < u0 {
                    return None;
                }
                let from = first / n * stripe
                    + if first == u0 {
                        offset_bytes % stripe
                    } else {
                        0
                    };
                let to = last / n * stripe
                    + if last == u1 {
                        (end - 1) % stripe + 1
                    } else {
                        stripe
                    };
                Some((from, to))
            })
            .collect()
    }
}

impl Raid0 {
    /// The request each member gets for `req`: a FLUSH goes to every member, anything
    /// else to the members its range touches (at least one).
    pub fn parts(&self, req: &DevRequest) -> Vec<(usize, DevRequest)> {
        if req.kind == DevOpKind::Flush {
            return (0..self.members.len()).map(|m| (m, *req)).collect();
        }
        self.split(req.offset_bytes, req.len_bytes)
            .into_iter()
            .enumerate()
            .filter_map(|(m, part)| {
                let (from, to) = part?;
                let sub = DevRequest {
                    offset_bytes: from,
                    len_bytes: if req.len_bytes == 0 { 0 } else { to - from },
                    ..*req
                };
                Some((m, sub))
            })
            .collect()
    }

    pub fn members(&self) -> &[Model] {
        &self.members
    }

    /// Member `m`'s model (for a queue that starts commands on it: `queue::ArrayQueue`).
    pub fn member_mut(&mut self, m: usize) -> &mut Model {
        &mut self.members[m]
    }
}

impl DeviceModel for Raid0 {
    fn submit(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let mut done = now_ns;
        for (m, sub) in self.parts(req) {
            done = done.max(self.members[m].submit(now_ns, &sub));
        }
        done
    }

    fn capacity_bytes(&self) -> u64 {
        let member = self.members.iter().map(|m| m.capacity_bytes()).min();
        // Only whole stripe units of every member are addressable.
        member.map_or(0, |c| c / self.stripe_bytes * self.stripe_bytes) * self.members.len() as u64
    }

    fn kind(&self) -> DeviceKind {
        self.members[0].kind()
    }

    fn counters(&self) -> DeviceCounters {
        self.members
            .iter()
            .map(|m| m.counters())
            .fold(DeviceCounters::default(), |mut a, c| {
                a.host_read_bytes += c.host_read_bytes;
                a.host_write_bytes += c.host_write_bytes;
                a.media_write_bytes += c.media_write_bytes;
                a.media_read_bytes += c.media_read_bytes;
                a.erases += c.erases;
                a.gc_page_copies += c.gc_page_copies;
                a.cache_hits += c.cache_hits;
                a.map_cache_misses += c.map_cache_misses;
                a
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KIB, MIB, Model, preset};

    fn array(name: &str, drives: usize, stripe: u64) -> Raid0 {
        let p = preset(name).unwrap_or_else(|| panic!("{name}"));
        let members = (0..drives)
            .map(|_| Model::from_preset(&p, Some(64 * MIB)))
            .collect();
        Raid0::new(members, stripe).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The reference: walk every byte's stripe unit and collect each member's bytes.
    fn reference(n: u64, stripe: u64, off: u64, len: u64) -> Vec<Option<(u64, u64)>> {
        let mut r: Vec<Option<(u64, u64)>> = vec![None; n as usize];
        for b in off..off + len {
            let unit = b / stripe;
            let at = unit / n * stripe + b % stripe;
            let e = r[(unit % n) as usize].get_or_insert((at, at + 1));
            e.0 = e.0.min(at);
            e.1 = e.1.max(at + 1);
        }
        r
    }

    #[test]
    fn split_matches_a_byte_by_byte_reference() {
        let mut x = 0x9E37_79B9u64;
        for drives in 1..=5 {
            let a = array("hitachi-7k1000c", drives, 4 * KIB);
            for _ in 0..300 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = x % (256 * KIB);
                let len = 1 + (x >> 20) % (48 * KIB);
                assert_eq!(
                    a.split(off, len),
                    reference(drives as u64, 4 * KIB, off, len),
                    "{drives} drives, {off}+{len}"
                );
            }
        }
    }

    #[test]
    fn a_large_read_is_shared_by_the_members_and_small_ones_run_in_parallel() {
        let mut one = array("hitachi-7k1000c", 1, 64 * KIB);
        let mut four = array("hitachi-7k1000c", 4, 64 * KIB);
        let big = DevRequest::read(0, 4 * MIB);
        let (t1, t4) = (one.submit(0, &big), four.submit(0, &big));
        assert!(t4 * 2 < t1, "4 MiB: 4 drives {t4} ns vs 1 drive {t1} ns");
        // Four random reads on four different members at once finish together.
        let mut four = array("hitachi-7k1000c", 4, 64 * KIB);
        let done: Vec<u64> = (0..4u64)
            .map(|k| four.submit(0, &DevRequest::read((k * 4 + k) * 64 * KIB, 4 * KIB)))
            .collect();
        let mut solo = array("hitachi-7k1000c", 4, 64 * KIB);
        let alone = solo.submit(0, &DevRequest::read(0, 4 * KIB));
        assert!(done.iter().all(|&d| d < alone * 2), "{done:?} vs {alone}");
        assert_eq!(four.counters().host_read_bytes, 16 * KIB);
        assert_eq!(four.capacity_bytes(), 4 * 64 * MIB);
        assert_eq!(four.kind(), DeviceKind::Hdd);
    }

    #[test]
    fn bad_arrays_are_refused() {
        assert!(Raid0::new(Vec::new(), 64 * KIB).is_err());
        let p = preset("intel-520").unwrap_or_else(|| panic!("intel-520"));
        let m = vec![Model::from_preset(&p, Some(64 * MIB))];
        assert!(Raid0::new(m.clone(), 1000).is_err());
        assert!(Raid0::new(m, 0).is_err());
    }
}
