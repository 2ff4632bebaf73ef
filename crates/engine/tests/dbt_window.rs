//! DBT's dirty passes and the pause's final copy keep up to `copy_window_chunks` chunk
//! copies in flight (16 by default, as QEMU's mirror job does; 1 is one chunk at a time,
//! seed 004's single copy process): at seed 004's 30 GB one at a time, that latency set
//! the floor of the dirty set and so the pause (Table 3). The volume still reads back as
//! its reference, also after a crash.

mod common;

use std::collections::BTreeSet;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";
const CHUNKS: u64 = 6;

/// Deep device queues, so every copy in flight reaches the (held) device.
fn setup() -> (Rig, Vec<u8>) {
    let mut cfg = config(1 << 20);
    for p in &mut cfg.pools {
        p.queue_depth = 32;
    }
    let mut r = Rig::new(cfg);
    let reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    (r, reference)
}

fn status(r: &Rig) -> jobs::migrate::MigrationStatus {
    let v = r.engine.volume_id(VOL).unwrap();
    r.engine.migration_status(v).unwrap()
}

/// Source chunks (by device MiB) whose copy reads are held now (the copies in flight).
fn chunks_being_read(r: &Rig) -> BTreeSet<u64> {
    r.held
        .iter()
        .filter(|o| o.pool == HDD && o.kind == DevKind::Read && o.class == IoClass::Migration)
        .map(|o| o.offset_bytes / MIB)
        .collect()
}

/// A DBT job where the VM writes 4 KiB to each chunk once its first copy is done. With
/// `dbt_max_passes` 2 the second pass recopies the dirty chunks (all but the last, whose
/// copy ends the first pass), with 1 the pause's final copy does (all six): either way all
/// at once, up to the job's window, then the volume is checked.
#[test]
fn dbt_copies_the_dirty_chunks_of_a_pass_and_of_the_pause_at_once() {
    for (max_passes, window) in [(2, 16), (1, 16), (2, 1), (1, 1), (2, 3), (1, 3)] {
        let (mut r, mut reference) = setup();
        r.hold = true;
        let p = MigrationParams {
            granularity_bytes: 4096,
            dbt_max_passes: max_passes,
            copy_window_chunks: window,
            ..job_params(Scheme::Dbt, SSD)
        };
        start_job(&mut r, VOL, p).unwrap();
        let mut dirtied = 0;
        while status(&r).phase == (MigrationPhase::Copying { pass: 1 }) {
            assert!(r.release_one().is_some(), "pass 1 stuck");
            while dirtied < status(&r).stats.chunks_copied
                && status(&r).phase == (MigrationPhase::Copying { pass: 1 })
            {
                // Not held: the write lands now (its chunk's copy is done).
                r.hold = false;
                write_ref(&mut r, VOL, &mut reference, dirtied * MIB + 8192, 50, 4096);
                r.hold = true;
                dirtied += 1;
            }
        }
        // (With one pass the pause's pre-sync waits in pass 1: the last chunk is written
        // too.)
        assert_eq!(dirtied, CHUNKS - u64::from(max_passes == 2));
        if max_passes == 1 {
            // The pause: its pre-sync rounds and the drain, then the final copy.
            while status(&r).phase != MigrationPhase::FinalCopy {
                assert!(r.release_one().is_some(), "no final copy");
            }
        } else {
            assert_eq!(status(&r).phase, MigrationPhase::Copying { pass: 2 });
        }
        let reading = chunks_being_read(&r);
        assert_eq!(
            reading.len() as u64,
            dirtied.min(u64::from(window)),
            "max passes {max_passes}, window {window}: source chunks read at once: {reading:?}"
        );
        // Never more than the window while the rest is copied.
        while r.release_one().is_some() {
            let n = chunks_being_read(&r).len() as u64;
            assert!(
                n <= u64::from(window),
                "window {window}: {n} chunks read at once"
            );
            if status(&r).phase.is_over()
                || matches!(status(&r).phase, MigrationPhase::Committing { .. })
            {
                break;
            }
        }
        r.hold = false;
        while r.release_one().is_some() {}
        finish_job(&mut r, VOL);
        let st = status(&r);
        assert_eq!(
            st.phase,
            MigrationPhase::Done,
            "max passes {max_passes} window {window}"
        );
        assert_eq!(st.stats.redundant_bytes, dirtied * 4096);
        check_ref(&mut r, VOL, &reference, "after the pivot");
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, "after a crash");
        r.engine.check_invariants().unwrap();
    }
}

/// A window of 0 or past the bound is refused with the reason, and nothing starts.
#[test]
fn a_copy_window_out_of_bounds_is_refused() {
    let (mut r, _) = setup();
    for window in [0, jobs::migrate::MAX_COPY_WINDOW_CHUNKS + 1] {
        let p = MigrationParams {
            copy_window_chunks: window,
            ..job_params(Scheme::Dbt, SSD)
        };
        match start_job(&mut r, VOL, p) {
            Err(ControlError::Invalid(why)) => {
                assert!(why.contains("copy window"), "{why}")
            }
            other => panic!("window {window}: {other:?}"),
        }
        let v = r.engine.volume_id(VOL).unwrap();
        assert!(r.engine.migration_status(v).is_none());
    }
}
