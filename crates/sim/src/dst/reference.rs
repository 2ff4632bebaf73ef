//! The reference disk: for every sector of a volume, the versions a read may return now
//! and the versions that may legally be there after a crash.
//!
//! Time is the harness's event counter. A version is one write (or trim/zero) of one
//! sector: when it was submitted, when it completed, whether it succeeded, whether it is
//! surely durable (completed before a successful FLUSH was submitted, or written with FUA).
//!
//! - A read submitted at `rs` and completed at `rc` may return version `v` if `v` was
//!   submitted before `rc` and no successful write `w` started after `v` completed and
//!   finished before `rs` (which would have overwritten `v` for sure).
//! - After a crash a sector may hold any version not overwritten for sure by a *durable*
//!   write, including writes still in flight. Those candidates are all durable from then
//!   on; the first read decides which one the sector holds.

use smallvec::SmallVec;

use super::pattern::Seen;

const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ver {
    /// Write id; 0 for the initial zeros.
    pub id: u64,
    pub zero: bool,
    pub submit: u64,
    pub complete: u64,
    pub ok: bool,
    pub durable: bool,
    /// A candidate left by a crash: the sector holds exactly one of these.
    pub uncertain: bool,
}

impl Ver {
    fn initial() -> Ver {
        Ver {
            id: 0,
            zero: true,
            submit: 0,
            complete: 0,
            ok: true,
            durable: true,
            uncertain: false,
        }
    }
    fn matches(&self, seen: Seen, vol: u32, sector: u64) -> bool {
        match seen {
            Seen::Zeros => self.zero,
            Seen::Data {
                vol: v,
                id,
                sector: s,
            } => !self.zero && v == vol && id == self.id && s == sector,
            Seen::Garbage => false,
        }
    }
}

pub struct RefDisk {
    pub vol: u32,
    sectors: Vec<SmallVec<[Ver; 2]>>,
}

impl RefDisk {
    pub fn new(vol: u32, sectors: u64) -> RefDisk {
        RefDisk {
            vol,
            sectors: vec![SmallVec::from_elem(Ver::initial(), 1); sectors as usize],
        }
    }

    /// The volume grew to `sectors`: the new ones read as zeros until written.
    pub fn grow(&mut self, sectors: u64) {
        if sectors as usize > self.sectors.len() {
            self.sectors
                .resize(sectors as usize, SmallVec::from_elem(Ver::initial(), 1));
        }
    }

    /// The volume shrank to `sectors`: what lay past them is gone.
    pub fn truncate(&mut self, sectors: u64) {
        self.sectors.truncate(sectors as usize);
    }

    pub fn sectors(&self) -> u64 {
        self.sectors.len() as u64
    }

    /// A write (or zeroing when `zero`) of `[first, first + n)` is submitted at `t`.
    pub fn submit_write(&mut self, first: u64, n: u64, id: u64, zero: bool, t: u64) {
        for s in first..first + n {
            self.sectors[s as usize].push(Ver {
                id,
                zero,
                submit: t,
                complete: NONE,
                ok: false,
                durable: false,
                uncertain: false,
            });
        }
    }

    /// It completed at `t`; `fua` writes are durable on success.
    pub fn complete_write(&mut self, first: u64, n: u64, id: u64, ok: bool, fua: bool, t: u64) {
        for s in first..first + n {
            if let Some(v) = self.sectors[s as usize]
                .iter_mut()
                .find(|v| v.id == id && v.complete == NONE)
            {
                v.complete = t;
                v.ok = ok;
                v.durable = ok && fua;
            }
        }
    }

    /// A FLUSH submitted at `submitted` succeeded: what completed before it is durable.
    /// Versions overwritten for sure by a durable write are forgotten, unless a read that
    /// started before that write finished may still return them.
    pub fn flush_ok(&mut self, submitted: u64, oldest_read_in_flight: u64) {
        for h in &mut self.sectors {
            for v in h.iter_mut() {
                if v.ok && v.complete < submitted {
                    v.durable = true;
                }
            }
            let newest_durable = h
                .iter()
                .filter(|w| w.ok && w.durable && w.complete < oldest_read_in_flight)
                .map(|w| w.submit)
                .max();
            if let Some(ws) = newest_durable
                && h.len() > 1
            {
                h.retain(|v| !(v.complete != NONE && v.complete < ws));
            }
        }
    }

    /// Check what a read of `[first, first+n)` (submitted `rs`, completed `rc`) saw.
    pub fn check_read(
        &mut self,
        first: u64,
        seen: &[Seen],
        rs: u64,
        rc: u64,
    ) -> Result<(), String> {
        for (i, &got) in seen.iter().enumerate() {
            let s = first + i as u64;
            let h = &self.sectors[s as usize];
            let allowed = |v: &Ver| {
                v.submit < rc
                    && !h.iter().any(|w| {
                        w.ok && v.complete != NONE
                            && w.submit > v.complete
                            && w.complete != NONE
                            && w.complete < rs
                    })
            };
            if !h.iter().any(|v| allowed(v) && v.matches(got, self.vol, s)) {
                let what = match got {
                    Seen::Zeros => "zeros".to_string(),
                    Seen::Garbage => "garbage (bytes no write of this test produced: device leftovers or corruption)".to_string(),
                    Seen::Data { vol, id, sector } if vol != self.vol => format!("volume {vol}'s data (write {id}, its sector {sector})"),
                    Seen::Data { id, sector, .. } if sector != s => format!("write {id}'s data for sector {sector}"),
                    Seen::Data { id, .. } => format!("the data of write {id}"),
                };
                let expect: Vec<String> = h
                    .iter()
                    .filter(|v| allowed(v))
                    .map(|v| {
                        if v.zero {
                            format!("zeros(#{})", v.id)
                        } else {
                            format!("write {}", v.id)
                        }
                    })
                    .collect();
                return Err(format!(
                    "volume {} sector {s}: read returned {what}; expected one of [{}]",
                    self.vol,
                    expect.join(", ")
                ));
            }
            // A crash left several candidates: the first read decides.
            let h = &mut self.sectors[s as usize];
            if h.iter().all(|v| v.uncertain) && h.len() > 1 {
                let vol = self.vol;
                h.retain(|v| v.matches(got, vol, s));
                h.truncate(1);
            }
        }
        Ok(())
    }

    /// Whether a read submitted at `t` may return zeros for sector `s`: only then may
    /// block status call the sector zero.
    pub fn may_read_zero(&self, s: u64, t: u64) -> bool {
        let h = &self.sectors[s as usize];
        h.iter().any(|v| {
            v.zero
                && v.submit <= t
                && !h.iter().any(|w| {
                    w.ok && v.complete != NONE
                        && w.submit > v.complete
                        && w.complete != NONE
                        && w.complete < t
                })
        })
    }

    /// Power loss: keep the candidates a crash may leave.
    pub fn crash(&mut self) {
        for h in &mut self.sectors {
            let snapshot = h.clone();
            let cands: SmallVec<[Ver; 2]> = snapshot
                .iter()
                .filter(|v| {
                    !snapshot
                        .iter()
                        .any(|w| w.ok && w.durable && v.complete != NONE && w.submit > v.complete)
                })
                .map(|v| Ver {
                    submit: 0,
                    complete: 0,
                    ok: true,
                    durable: true,
                    uncertain: true,
                    ..*v
                })
                .collect();
            *h = cands;
            if h.len() == 1 {
                h[0].uncertain = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(id: u64, s: u64) -> Seen {
        Seen::Data {
            vol: 0,
            id,
            sector: s,
        }
    }

    #[test]
    fn reads_see_completed_or_concurrent_writes() {
        let mut r = RefDisk::new(0, 4);
        r.submit_write(0, 2, 1, false, 10);
        // A read overlapping the write may see either.
        assert!(r.check_read(0, &[Seen::Zeros], 11, 12).is_ok());
        assert!(r.check_read(0, &[data(1, 0)], 11, 12).is_ok());
        r.complete_write(0, 2, 1, true, false, 13);
        // After completion, only the new data.
        assert!(r.check_read(0, &[Seen::Zeros], 14, 15).is_err());
        assert!(r.check_read(1, &[data(1, 1)], 14, 15).is_ok());
        // Data of the wrong sector or another volume is refused.
        assert!(r.check_read(1, &[data(1, 0)], 14, 15).is_err());
        assert!(
            r.check_read(
                1,
                &[Seen::Data {
                    vol: 9,
                    id: 1,
                    sector: 1
                }],
                14,
                15
            )
            .unwrap_err()
            .contains("volume 9")
        );
        assert!(
            r.check_read(1, &[Seen::Garbage], 14, 15)
                .unwrap_err()
                .contains("garbage")
        );
    }

    #[test]
    fn crash_keeps_durable_and_later_versions_only() {
        let mut r = RefDisk::new(0, 1);
        r.submit_write(0, 1, 1, false, 1);
        r.complete_write(0, 1, 1, true, false, 2);
        r.flush_ok(3, u64::MAX); // write 1 durable
        r.submit_write(0, 1, 2, false, 5);
        r.complete_write(0, 1, 2, true, false, 6);
        r.submit_write(0, 1, 3, false, 7); // in flight at the crash
        r.crash();
        assert!(
            r.check_read(0, &[Seen::Zeros], 100, 101).is_err(),
            "zeros were overwritten durably"
        );
        let mut a = RefDisk::new(0, 1);
        a.sectors = r.sectors.clone();
        assert!(a.check_read(0, &[data(1, 0)], 100, 101).is_ok());
        assert!(r.check_read(0, &[data(3, 0)], 100, 101).is_ok());
        // Once seen, the sector stays what it was.
        assert!(r.check_read(0, &[data(2, 0)], 102, 103).is_err());
    }

    #[test]
    fn zeros_may_be_read_until_a_write_completes() {
        let mut r = RefDisk::new(0, 2);
        assert!(r.may_read_zero(0, 1));
        r.submit_write(0, 1, 1, false, 2);
        assert!(r.may_read_zero(0, 3), "the write is still in flight");
        r.complete_write(0, 1, 1, true, false, 4);
        assert!(!r.may_read_zero(0, 5));
        assert!(r.may_read_zero(1, 5));
        r.submit_write(0, 1, 2, true, 6); // a trim
        assert!(r.may_read_zero(0, 7));
    }

    #[test]
    fn fua_is_durable_without_flush() {
        let mut r = RefDisk::new(0, 1);
        r.submit_write(0, 1, 1, false, 1);
        r.complete_write(0, 1, 1, true, true, 2);
        r.crash();
        assert!(r.check_read(0, &[Seen::Zeros], 10, 11).is_err());
        assert!(r.check_read(0, &[data(1, 0)], 10, 11).is_ok());
    }

    #[test]
    fn failed_writes_may_or_may_not_have_landed() {
        let mut r = RefDisk::new(0, 1);
        r.submit_write(0, 1, 1, false, 1);
        r.complete_write(0, 1, 1, false, false, 2);
        assert!(r.check_read(0, &[Seen::Zeros], 3, 4).is_ok());
        assert!(r.check_read(0, &[data(1, 0)], 5, 6).is_ok());
    }
}
