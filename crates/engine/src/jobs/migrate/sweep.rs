//! The pause's sweep for chunks left uncopied: a write in flight when the volume paused
//! may have allocated a chunk on the source in the region the copy had passed
//! (`migration_chunk_allocated`), and the final copy must copy it before the pivot.
//!
//! The final copy asks for the next such chunk once per chunk it starts, and scanning
//! from chunk 0 each time made it O(chunks x copies): at 30 GB (30,720 chunks of 1 MiB)
//! with every chunk dirty, about 10^9 steps in one pause, and quadratic past that. The
//! sweep keeps its position instead: no chunk below it is `Uncopied`, which holds because
//! a chunk becomes `Uncopied` again only through `Job::mark_uncopied`, which moves the
//! sweep back to it. So it returns what the scan from 0 returned (the lowest chunk still
//! to copy), in O(chunks) for the whole pause.

use super::progress::Progress;

#[derive(Clone, Debug, Default)]
pub(crate) struct LeftSweep {
    /// No chunk below this one is `Uncopied`.
    next: u64,
    /// Positions examined, for the test that the sweep's work is linear.
    #[cfg(test)]
    examined: u64,
}

impl LeftSweep {
    /// Start again from chunk 0 (at the pause).
    pub(crate) fn restart(&mut self) {
        self.next = 0;
    }

    /// Chunk `c` is `Uncopied` again: the sweep must pass it again.
    pub(crate) fn back_to(&mut self, c: u64) {
        self.next = self.next.min(c);
    }

    /// The lowest `Uncopied` chunk from the sweep's position for which `to_copy` says
    /// there is something to copy; `to_copy` is asked once for each `Uncopied` chunk
    /// passed, and a chunk it refuses is marked `Copied` (nothing to copy: unmapped, or
    /// on the destination already). The chunk returned is not passed: if it is still
    /// `Uncopied` at the next call (its copy could not start), it is returned again.
    pub(crate) fn next(
        &mut self,
        progress: &mut [Progress],
        mut to_copy: impl FnMut(u64) -> bool,
    ) -> Option<u64> {
        while let Some(p) = progress.get_mut(self.next as usize) {
            let c = self.next;
            #[cfg(test)]
            {
                self.examined += 1;
            }
            if *p == Progress::Uncopied {
                if to_copy(c) {
                    return Some(c);
                }
                *p = Progress::Copied;
            }
            self.next += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the sweep replaced: the scan from chunk 0 on every call.
    fn scan_from_zero(progress: &mut [Progress], to_copy: impl Fn(u64) -> bool) -> Option<u64> {
        for (c, p) in progress.iter_mut().enumerate() {
            if *p != Progress::Uncopied {
                continue;
            }
            if to_copy(c as u64) {
                return Some(c as u64);
            }
            *p = Progress::Copied;
        }
        None
    }

    /// Every chunk left uncopied is found, in the order the scan found them, with chunks
    /// made uncopied again behind the sweep (the copy of one failed, or a write in flight
    /// allocated it) and a copy that could not start; and the whole sweep visits each
    /// chunk a bounded number of times, not once per copy.
    #[test]
    fn the_sweep_finds_what_the_scan_from_zero_found() {
        let n = 4096u64;
        // Chunks with data off the destination: every third; the rest have nothing.
        let has_data = |c: u64| c.is_multiple_of(3);
        let mut a = vec![Progress::Uncopied; n as usize];
        let mut b = a.clone();
        // A few already copied.
        for c in (0..n).step_by(7) {
            a[c as usize] = Progress::Copied;
            b[c as usize] = Progress::Copied;
        }
        let mut sweep = LeftSweep::default();
        let mut found = Vec::new();
        let mut refused_once = false;
        loop {
            let want = scan_from_zero(&mut b, has_data);
            let got = sweep.next(&mut a, has_data);
            assert_eq!(got, want, "after {found:?}");
            let Some(c) = got else { break };
            // One copy cannot start the first time (say, over the rate): same chunk again.
            if c == 300 && !refused_once {
                refused_once = true;
                continue;
            }
            a[c as usize] = Progress::Copying;
            b[c as usize] = Progress::Copying;
            found.push(c);
            // Behind the sweep, chunks go back to uncopied.
            if c == 2001 {
                for back in [999u64, 12, 1500] {
                    a[back as usize] = Progress::Uncopied;
                    b[back as usize] = Progress::Uncopied;
                    sweep.back_to(back);
                }
            }
        }
        let expect: Vec<u64> = (0..n)
            .filter(|&c| has_data(c) && !c.is_multiple_of(7))
            .chain([12, 999, 1500].into_iter().filter(|&c| has_data(c)))
            .collect();
        let mut sorted_found = found.clone();
        sorted_found.sort_unstable();
        let mut sorted_expect = expect.clone();
        sorted_expect.sort_unstable();
        assert_eq!(sorted_found, sorted_expect);
        // Each position is examined a bounded number of times (twice for the three sent
        // back, and each chunk returned once more), not once per copy: the scan from zero
        // examined about n^2 / 6 (2.8 million here).
        assert!(
            sweep.examined < 3 * n,
            "{} positions examined for {n} chunks",
            sweep.examined
        );
    }
}
