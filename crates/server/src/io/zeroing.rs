//! How both backends make a range of a pool file read as zeros, step by step, falling
//! back where the filesystem refuses a step (tmpfs and btrfs have no `ZERO_RANGE`; some
//! filesystems cannot punch at all).
//!
//! A write-zeroes must stay allocated (a thick volume's promised space, NBD's NO_HOLE),
//! so where `ZERO_RANGE` is refused it punches and then allocates the hole again; a punch
//! gives the space back. Writing zeros is the last resort of both.

use tiervisor_engine::DevKind;

use super::punch_unsupported;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ZeroStep {
    /// `fallocate(ZERO_RANGE)`: zeros, allocated, one call.
    ZeroRange,
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`.
    Punch,
    /// `fallocate(0)` over the punched hole, so a write-zeroes keeps its space.
    Allocate,
    /// Write a buffer of zeros.
    WriteZeros,
}

/// What to do after a step returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Then {
    Done,
    Next(ZeroStep),
    /// Fail the operation with this OS error code.
    Fail(i32),
}

impl ZeroStep {
    /// The first step for a `WriteZeroes` or `Punch` operation.
    pub(crate) fn first(kind: DevKind) -> ZeroStep {
        if kind == DevKind::Punch {
            ZeroStep::Punch
        } else {
            ZeroStep::ZeroRange
        }
    }

    /// The `fallocate` mode of this step (none for writing zeros).
    pub(crate) fn mode(self) -> Option<i32> {
        match self {
            ZeroStep::ZeroRange => Some(libc::FALLOC_FL_ZERO_RANGE),
            ZeroStep::Punch => Some(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE),
            ZeroStep::Allocate => Some(0),
            ZeroStep::WriteZeros => None,
        }
    }

    /// What follows this `fallocate` step of a `kind` operation that returned `code`
    /// (0 for success, else the positive OS error).
    pub(crate) fn then(self, kind: DevKind, code: i32) -> Then {
        if code != 0 && !punch_unsupported(code) {
            // A real failure (space, I/O) is the operation's, not a reason to fall back.
            return Then::Fail(code);
        }
        let refused = code != 0;
        match (self, refused) {
            (ZeroStep::ZeroRange, false) | (ZeroStep::Allocate, false) => Then::Done,
            (ZeroStep::Punch, false) if kind == DevKind::Punch => Then::Done,
            (ZeroStep::Punch, false) => Then::Next(ZeroStep::Allocate),
            (ZeroStep::ZeroRange, true) => Then::Next(ZeroStep::Punch),
            // The hole already reads as zeros; writing them allocates it.
            (ZeroStep::Punch, true) | (ZeroStep::Allocate, true) => {
                Then::Next(ZeroStep::WriteZeros)
            }
            (ZeroStep::WriteZeros, _) => Then::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follow the steps for `kind` where the filesystem refuses the steps in `refused`.
    fn path(kind: DevKind, refused: &[ZeroStep]) -> Vec<ZeroStep> {
        let mut steps = vec![ZeroStep::first(kind)];
        loop {
            let s = *steps.last().unwrap();
            if s == ZeroStep::WriteZeros {
                return steps;
            }
            let code = if refused.contains(&s) {
                libc::EOPNOTSUPP
            } else {
                0
            };
            match s.then(kind, code) {
                Then::Next(n) => steps.push(n),
                Then::Done => return steps,
                Then::Fail(c) => panic!("failed with {c}"),
            }
        }
    }

    #[test]
    fn a_write_zeroes_stays_allocated_on_every_filesystem() {
        use ZeroStep::*;
        let wz = DevKind::WriteZeroes;
        assert_eq!(path(wz, &[]), [ZeroRange]);
        // tmpfs, btrfs: no ZERO_RANGE, so punch and allocate again (not just punch).
        assert_eq!(path(wz, &[ZeroRange]), [ZeroRange, Punch, Allocate]);
        assert_eq!(
            path(wz, &[ZeroRange, Punch]),
            [ZeroRange, Punch, WriteZeros]
        );
        assert_eq!(
            path(wz, &[ZeroRange, Allocate]),
            [ZeroRange, Punch, Allocate, WriteZeros]
        );
    }

    #[test]
    fn a_punch_gives_space_back_or_writes_zeros() {
        use ZeroStep::*;
        assert_eq!(path(DevKind::Punch, &[]), [Punch]);
        assert_eq!(path(DevKind::Punch, &[Punch]), [Punch, WriteZeros]);
    }

    #[test]
    fn a_real_failure_is_not_a_reason_to_fall_back() {
        for s in [ZeroStep::ZeroRange, ZeroStep::Punch, ZeroStep::Allocate] {
            for kind in [DevKind::WriteZeroes, DevKind::Punch] {
                assert_eq!(s.then(kind, libc::ENOSPC), Then::Fail(libc::ENOSPC));
                assert_eq!(s.then(kind, libc::EIO), Then::Fail(libc::EIO));
            }
        }
    }
}
