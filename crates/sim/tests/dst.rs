//! Deterministic simulation testing in CI: a fixed seed set with every fault on passes,
//! and the checker is not blind: each deliberately broken engine is caught.

use tiervisor_engine::InjectedBug;
use tiervisor_sim::dst;
use tiervisor_sim::dst::{DstConfig, Faults, run_range, run_seed};

const CI_SEEDS: u64 = 256;
const CI_STEPS: u64 = 4000;

fn jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

#[test]
fn ci_seed_set_passes_with_every_fault_on() {
    let s = run_range(0, CI_SEEDS, CI_STEPS, Faults::Latent, None, jobs())
        .unwrap_or_else(|f| panic!("{f}"));
    // The run really exercised what it claims to.
    assert!(s.crashes > CI_SEEDS, "power losses: {}", s.crashes);
    assert!(s.recoveries > CI_SEEDS, "recoveries: {}", s.recoveries);
    assert!(
        s.injected_errors > 100,
        "injected errors: {}",
        s.injected_errors
    );
    assert!(s.checkpoints > 100, "checkpoints: {}", s.checkpoints);
    // Half the seeds run split/hot volumes with aggressive tier migration.
    assert!(s.chunk_moves > CI_SEEDS, "chunk moves: {}", s.chunk_moves);
    // Half their `hot` volumes are `cache` volumes instead (smq or bcache).
    assert!(
        s.cache_moves > CI_SEEDS / 4,
        "cache fills and evictions: {}",
        s.cache_moves
    );
    // Half the seeds keep homes on promotion (`engine::tier_home`), so some demotions
    // are remaps (38 in seeds 0..256 when added: most demoted chunks were written since
    // their promotion); half the tiered seeds' pinned volumes have a fast pool and take
    // directed moves (`dst/directed.rs`; 474).
    assert!(
        s.clean_demotions > CI_SEEDS / 32 && s.directed_moves > CI_SEEDS / 2,
        "remaps to a kept home {}, directed moves {}",
        s.clean_demotions,
        s.directed_moves
    );
    // A dirty kept home's demotion copies only the span written since its promotion
    // unless the chunk is dirty throughout (as after a mount): 14 such span copies in
    // 0..256 when the spans were added (on 6588a1c).
    assert!(
        s.span_demotions > CI_SEEDS / 32,
        "span copies to a kept home {}",
        s.span_demotions
    );
    // Their quiet spells let idle cleaning run (1265 background writebacks in 400
    // spells when the spells were added; 468 writebacks without them).
    assert!(
        s.cache_writebacks > CI_SEEDS && s.idle_spells > CI_SEEDS / 2,
        "background cache writebacks {}, quiet spells {}",
        s.cache_writebacks,
        s.idle_spells
    );
    // Half the seeds log small writes, with small segments so the cleaner runs.
    assert!(
        s.log_appends > CI_SEEDS * 10,
        "log appends: {}",
        s.log_appends
    );
    // (377 before logged volumes could migrate, 278 since: a migrating volume does not
    // log, and its job writes the log back home instead of the cleaner moving it; 192
    // since NCQ seeds migrate and run out of space too; 204 at 84d1187, measured with
    // `tiervisor dst --seeds 0..256 --steps 4000 --faults 3`. The bound stays at 2/3, 170:
    // 3/4, 192, would pass by 6 % and fail again at the next change of the draws.)
    assert!(
        s.segments_cleaned > CI_SEEDS * 2 / 3,
        "segments cleaned: {}",
        s.segments_cleaned
    );
    // The cleaner's waits for its cap: `the_cleaner_waits_for_its_cap` (one seed).
    // A third of the pools hold completions to a disk model (seed 003's throttle).
    assert!(
        s.throttled_ops > CI_SEEDS * 100,
        "throttled operations: {}",
        s.throttled_ops
    );
    assert!(
        s.reads_checked > CI_SEEDS * 100,
        "reads checked: {}",
        s.reads_checked
    );
    // A third of the seeds run out of space, transiently and in lasting spells.
    assert!(
        s.space_seeds > CI_SEEDS / 5 && s.space_spells > CI_SEEDS / 5,
        "seeds out of space: {}, lasting spells: {}",
        s.space_seeds,
        s.space_spells
    );
    // In half of those, space runs out during recovery too: mounts wait for it.
    assert!(
        s.space_mounts > 0,
        "mounts that waited for space: {}",
        s.space_mounts
    );
    // Half the seeds that do not log create volumes while running, thin and thick; a
    // creation is refused where the metadata pool has no room left for the new volume's
    // checkpoint reserve (144 created before that check, 106 with it).
    assert!(
        s.volumes_created > CI_SEEDS / 3,
        "volumes created: {}",
        s.volumes_created
    );
    // The same seeds grow volumes now and then (thin ones; thick ones are refused), and
    // those with one shard delete a volume now and then (52 in 0..256 at
    // 372b68e's successor).
    assert!(
        s.volumes_resized > CI_SEEDS / 8,
        "volumes resized: {}",
        s.volumes_resized
    );
    // A third of the resize draws trim a tail and shrink to it (6 shrinks in 0..256 at
    // ad9b891).
    assert!(s.volumes_shrunk > 2, "volumes shrunk: {}", s.volumes_shrunk);
    assert!(
        s.volumes_deleted > CI_SEEDS / 16,
        "volumes deleted: {}",
        s.volumes_deleted
    );
    // Half the deletions take any live volume, so some volumes move down an index at the
    // next mount (9 in 0..256 when that began).
    assert!(
        s.volumes_moved_down > 2,
        "volumes moved down: {}",
        s.volumes_moved_down
    );
    // A third of the seeds give pools the host write-back buffer, a third (drawn
    // independently) have tag-aware devices (seed 001, issue 14).
    assert!(
        s.buffered_writes > CI_SEEDS * 50 && s.tagged_flushes > CI_SEEDS * 20,
        "writes buffered: {}, tagged flushes: {}",
        s.buffered_writes,
        s.tagged_flushes
    );
    // Two thirds of the seeds run as two or three engines over slices of the pools.
    assert!(
        s.sharded_seeds > CI_SEEDS / 2 && s.shards > CI_SEEDS * 3 / 2,
        "seeds sharded: {}, engines: {}",
        s.sharded_seeds,
        s.shards
    );
    // Tight sharded seeds move space between shards (`engine::loan`).
    // Some of them free whole volumes (`dst/release.rs`) and give borrowed runs back
    // (`engine::give_back`; 11 in seeds 0..128 when added).
    assert!(
        s.loan_seeds > CI_SEEDS / 16 && s.loans > s.loan_seeds && s.given_back > 4,
        "seeds that moved space: {}, runs borrowed: {}, given back: {}, returned to donors: {}",
        s.loan_seeds,
        s.loans,
        s.given_back,
        s.loans_returned
    );
    // Half of all seeds have a queueing (NCQ) HDD
    // (`dst/ncq.rs`), which serves a share of its commands ahead of older ones.
    assert!(
        s.ncq_seeds > CI_SEEDS / 16 && s.ncq_reordered > s.ncq_served / 100,
        "seeds with NCQ: {}, commands served {}, ahead of an older one {}",
        s.ncq_seeds,
        s.ncq_served,
        s.ncq_reordered
    );
    // A third of those make the HDD pool an array of queueing drives (`dst/ncq.rs`).
    assert!(
        s.array_seeds > CI_SEEDS / 48,
        "seeds with an array of queueing drives: {} of {} NCQ seeds",
        s.array_seeds,
        s.ncq_seeds
    );
    // Seeds with a cfq, bfq or cats pool name processes in their requests (I/O
    // contexts): 325 of 512 seeds, 286,758 requests when added.
    assert!(
        s.context_seeds > CI_SEEDS / 3 && s.context_requests > s.context_seeds * 100,
        "seeds naming processes: {}, requests: {}",
        s.context_seeds,
        s.context_requests
    );
    // Half the seeds run live storage migrations with every scheme.
    assert!(
        s.migration_pivots > CI_SEEDS / 4,
        "migrations pivoted: {} of {} started",
        s.migration_pivots,
        s.migrations
    );
    // Half the tight seeds that migrate have a slow driver (200 ms a loan step), whose
    // answers come while a pivot's pause waits for the write they end
    // (`loan-answer-no-step`).
    assert!(
        s.slow_loan_seeds > CI_SEEDS / 64 && s.pause_answers > 0,
        "seeds with a slow driver: {}, loan answers during a pivot's pause: {}",
        s.slow_loan_seeds,
        s.pause_answers
    );
    // Two thirds of the migrating seeds that do not log run the migration-heavy profile
    // (`dst/probe.rs`; 49 seeds, 169 power losses right after a FLUSH or a durable pivot).
    assert!(
        s.probe_seeds > CI_SEEDS / 8 && s.probe_crashes > CI_SEEDS / 4,
        "seeds migration-heavy: {}, power losses after a FLUSH or a pivot: {}",
        s.probe_seeds,
        s.probe_crashes
    );
}

#[test]
fn lower_fault_levels_pass_too() {
    for level in [Faults::None, Faults::Crash, Faults::Errors] {
        run_range(1000, 1064, CI_STEPS, level, None, jobs())
            .unwrap_or_else(|f| panic!("{level:?}: {f}"));
    }
}

#[test]
fn every_injected_bug_is_caught_within_the_ci_seed_set() {
    // `pivot-flush-early` is caught within the set since the migration-heavy profile
    // (`dst/probe.rs`) reads back and loses power in the pivot's window;
    // `mirror-acks-early`, `aio-unordered-dups` and `wbuf-replace-forgets` have seed ranges
    // of their own (below).
    let migration = InjectedBug::migration()
        .into_iter()
        .filter(|b| *b != InjectedBug::AioUnorderedDups && *b != InjectedBug::MirrorAcksEarly);
    let host_flush = InjectedBug::host_flush()
        .into_iter()
        .filter(|b| *b != InjectedBug::WbufReplaceForgets);
    let cache = InjectedBug::cache()
        .into_iter()
        .filter(|b| *b != InjectedBug::CacheWritebackIgnoresWrites);
    let bugs = InjectedBug::all()
        .into_iter()
        .chain(migration)
        .chain(host_flush)
        .chain(InjectedBug::space())
        .chain(InjectedBug::create())
        .chain(InjectedBug::shard())
        .chain(cache)
        .chain(InjectedBug::clean_stop())
        .chain(InjectedBug::device())
        .chain(InjectedBug::contexts())
        .chain(InjectedBug::wakeup());
    for bug in bugs {
        assert_caught(bug, 0, CI_SEEDS);
    }
}

/// `wbuf-replace-forgets` (a write replacing buffered bytes a waiting FLUSH covers takes
/// a fresh admission number) shows only where a FLUSH waits for a piece under a write in
/// flight, a newer write replaces the piece meanwhile and power is lost before the newer
/// bytes are written back. Seed 84 caught it before the space faults and the failed-write
/// fixes changed the runs (899cdab); since then no seed of 0..256 does, and seed 291
/// does (at 7abaad5: `tiervisor dst --seeds 291..292 --steps 2122 --faults 3 --bug
/// wbuf-replace-forgets`). So it gets the next 256 seeds, which stop at the first catch
/// (about 35 seeds' time). The engine test
/// `a_fua_write_replaced_while_its_flush_waits_survives_power_loss` catches it too.
#[test]
fn wbuf_replace_forgets_is_caught_within_its_seed_range() {
    assert_caught(InjectedBug::WbufReplaceForgets, CI_SEEDS, 2 * CI_SEEDS);
}

/// `cache-writeback-ignores-writes` (writes to a `cache` chunk under a background
/// writeback go on, and the writeback's end marks them clean) was caught by seed 208 until
/// DST drew kept homes and directed moves (`dst/directed.rs`) beside the HDD arrays of
/// 5dfe9d9; no seed of 0..256 did then, seed 382 does on 2c85d60 (`tiervisor dst --seeds
/// 382..383 --steps 1703 --faults 3 --bug cache-writeback-ignores-writes`: volume 1 sector
/// 1195 reads zeros where write 409 was). So it gets seeds 256..512, which stop at the
/// first catch. The engine test `tests/cache.rs` catches it too.
#[test]
fn cache_writeback_ignores_writes_is_caught_within_its_seed_range() {
    assert_caught(
        InjectedBug::CacheWritebackIgnoresWrites,
        CI_SEEDS,
        2 * CI_SEEDS,
    );
}

/// `mirror-acks-early` (a mirrored write acknowledged before its duplicate lands) was
/// caught within the CI set by the migration-heavy profile (seed 210) until aged
/// background work began to take turns with foreground work (DST seed 8476's fix moved
/// every run's timing); since then no seed of 0..256 catches it, and seed 302 did until
/// sharded seeds drew budgets that follow demand (their shards' demand reports tick every
/// 100 ms of engine time, which moves the run: `TIERVISOR_DST_NO_BUDGETS=1` still catches
/// it at 302); no seed of 256..609 does since, seed 609 does (`tiervisor dst --seeds
/// 609..610 --steps 3483 --faults 3 --bug mirror-acks-early`: volume 0 sector 149 reads
/// write 1171's data where write 1232's was expected). So it gets seeds 512..768, which
/// stop at the first catch. The engine test
/// `a_mirrored_write_is_acknowledged_only_after_its_duplicate` catches it too.
#[test]
fn mirror_acks_early_is_caught_within_its_seed_range() {
    assert_caught(InjectedBug::MirrorAcksEarly, 2 * CI_SEEDS, 3 * CI_SEEDS);
}

/// `aio-unordered-dups` (AIO duplicates to one chunk not kept in order, so an older one
/// lands last on the destination) shows only where a write to a copied chunk is made
/// again while the first one's duplicate is still in flight, the newer duplicate lands
/// first, and the job then pivots. No seed below 940 catches it, even with the
/// migration-heavy profile's writes made again as soon as acknowledged; seed 940 did (a
/// resumed AIO job, a write-zeroes' duplicate overtaken) until a resumed job with nothing
/// left to move stopped pausing the volume to pivot (it records the new home at once), and
/// no seed of 768..1024 did since; seed 1275 did (1262 with the 512-byte draw) until DST
/// drew `copy_priority = equal` and DBT copied several chunks at once; no seed of
/// 1024..1486 does since, seed 1486 does (`tiervisor dst --seeds 1486..1487 --steps
/// 2548 --faults 3 --bug aio-unordered-dups`: volume 1 sector 1064 reads write 527's
/// data where write 528's was expected), until cfq and bfq took Linux 2.6.30's idle
/// window (issue 12's stop 38) and no seed of 1280..1536 did; seed 1572 does since
/// (`tiervisor dst --seeds 1572..1573 --steps 206 --faults 3 --bug aio-unordered-dups`:
/// volume 2 sector 1729 reads write 68's data where write 69's was expected; the seed
/// passes without the bug). So it gets seeds 1536..1792, which stop at the first catch.
/// The engine test `aio_duplicates_of_a_chunk_land_in_order` catches it too.
#[test]
fn aio_unordered_dups_is_caught_within_its_seed_range() {
    assert_caught(InjectedBug::AioUnorderedDups, 6 * CI_SEEDS, 7 * CI_SEEDS);
}

/// `ncq-jumps-flush` in an array (each member's FLUSH no barrier): the per-member check
/// catches it. The array's FLUSH as a whole rarely completes ahead of an older command (the
/// engine seldom flushes with writes in flight), so the array seeds of the CI set are run
/// with the bug until one fails at a member.
#[test]
fn ncq_jumps_flush_is_caught_at_an_array_member() {
    let arrays: Vec<u64> = (0..CI_SEEDS)
        .filter(|&s| dst::hdd_array(s).is_some())
        .collect();
    assert!(arrays.len() > 8, "array seeds in the CI set: {arrays:?}");
    let caught = arrays.iter().find_map(|&seed| {
        run_seed(&DstConfig {
            seed,
            steps: CI_STEPS,
            faults: Faults::Latent,
            bug: Some(InjectedBug::NcqJumpsFlush),
        })
        .err()
    });
    let f = caught.expect("no array seed caught ncq-jumps-flush");
    assert!(f.message.contains("array member"), "{}", f.message);
}

/// Seeds `from..to` catch `bug`, and the replay command reproduces the failure exactly.
fn assert_caught(bug: InjectedBug, from: u64, to: u64) {
    match run_range(from, to, CI_STEPS, Faults::Latent, Some(bug), jobs()) {
        Ok(_) => panic!("{} was not caught by seeds {from}..{to}", bug.name()),
        Err(f) => {
            assert!(
                f.replay.contains(&format!("--bug {}", bug.name())),
                "{}",
                f.replay
            );
            // The replay command reproduces the failure exactly.
            let again = run_seed(&DstConfig {
                seed: f.seed,
                steps: f.step,
                faults: Faults::Latent,
                bug: Some(bug),
            })
            .unwrap_err();
            assert_eq!(again.message, f.message, "{}", bug.name());
        }
    }
}

#[test]
fn same_seed_same_run() {
    let cfg = DstConfig {
        seed: 77,
        steps: 3000,
        faults: Faults::Latent,
        bug: None,
    };
    let a = run_seed(&cfg).unwrap();
    assert_eq!(a, run_seed(&cfg).unwrap());
    assert_ne!(a, run_seed(&DstConfig { seed: 78, ..cfg }).unwrap());
}

/// The cap only holds the cleaner back between the urgency mark and the cleaning mark, a
/// narrow band with DST's few segments, so few seeds show it. In the CI set only seed 101
/// did (23 waits before logged volumes could migrate, 1 to 6 since), and none since cfq
/// and bfq took Linux 2.6.30's idle window (issue 12's stop 38 changed seed 101's
/// timing); of seeds 256..512, seed 405 does (37 waits). This only says the path still
/// runs.
#[test]
fn the_cleaner_waits_for_its_cap() {
    let s = run_range(405, 406, CI_STEPS, Faults::Latent, None, jobs())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(
        s.cleaner_waits >= 1,
        "cleaner waits for its cap: {}",
        s.cleaner_waits
    );
}

/// Seeds that once found bugs (kept even if the CI range moves).
#[test]
fn regression_seeds_pass() {
    // 584: power lost while the metadata pool's superblock, the format's commit point, was
    // being written; the next start refused the torn superblock instead of redoing it.
    // 697: power lost while another pool's superblock was being marked complete; torn.
    // 174: a write queued for a chunk reached the device after a trim freed the chunk and
    // another volume reused it (epochs were taken at dispatch, not at creation).
    // 134: a checkpoint header write failed but landed; its chain had been freed and reused.
    // 359: heavy trimming grew checkpoints until the metadata pool had no room for one.
    // With the log (3000 steps): 39, the cleaner copied a victim whose append was in
    // flight; 75, a whole-chunk trim unmapped a chunk under an in-flight write; 2166,
    // failed appends exhausted the reserve segments; 8634, a journal block torn at one
    // power loss (not replayed) was completed by a torn write at the next and replayed.
    // 3338 and 3581: writes parked behind a FLUSH's write-backs on a buffered CFQ pool
    // held their queue's quantum, so the write-backs never went out (never settled).
    // 6120 (3 shards): a write parked behind a write-back of its own range on a full,
    // slowly throttled pool lost the range to each retry of that write-back, for ever.
    // 6846 (3 shards): a migration started while its volume's resize was being written
    // indexed past its per-chunk state once the volume grew (a panic).
    // 8423: a write queued on the HDD behind BFQ marked its block dirty for a resumed DBT
    // job, whose second pass copied the block (clearing the bit) before the write landed.
    // 8476 (3 shards): a failed LR job's copies kept an aged backlog in a slow FIFO HDD
    // pool's background lane, which went first every time: a read waited 36.6 s.
    // 10468: a thin volume whose LR job could not resume at mount (no room on the
    // destination) kept data in two destination chunks (`Moved` ranges); deleting it later
    // freed its map and journal but not those two chunks (a leak).
    // 650 (3000 steps, tight shards): a clean-stop marker checkpoint failed with EIO but
    // landed; the volume was reported lost at the stop and read as stopped clean at the
    // mount (now "unmarked": its data was durable; either reading is true).
    // 1070 (a log in `bitvisor` mode): a write-through request whose append failed for
    // space waited for it through the lasting spell at the end of the run, retried for
    // ever while the device model's volatile cache grew (out of memory); 1259 (a queueing
    // HDD): appends parked for space were always in flight during that spell, and the
    // run waited for the device to go idle (out of memory).
    // 4480 (stop 33's 10,000-seed soak): a volume's final commit failed at an orderly
    // stop, then its LR job switched a chunk and pivoted; those records followed a gap in
    // the journal, which the mount's replay stops at, and the chunk read as zeros (fixed
    // by abandoning the journal after a failed final commit, 5253be6, as for seed 100).
    // 575 (stop 34): a volume's final commit failed for space at the orderly stop, so its
    // journal was abandoned; the journal-numbering invariant, checked while stopping since
    // 9be14eb, counted the dropped records as a gap (an invariant fix, ee16a89).
    for (seed, steps) in [
        (575, 3000),
        (4480, CI_STEPS),
        (1070, CI_STEPS),
        (1259, CI_STEPS),
        (650, 3000),
        (134, CI_STEPS),
        (174, CI_STEPS),
        (359, CI_STEPS),
        (584, CI_STEPS),
        (697, CI_STEPS),
        (39, 3000),
        (75, 3000),
        (2166, 3000),
        (8634, 1443),
        (3338, 3730),
        (3581, 2191),
        (6120, 3397),
        (6846, 2528),
        (8423, 3139),
        (8476, CI_STEPS),
        (10468, 2435),
    ] {
        run_seed(&DstConfig {
            seed,
            steps,
            faults: Faults::Latent,
            bug: None,
        })
        .unwrap_or_else(|f| panic!("{f}"));
    }
    // 1032 (faults 0, 3601 steps, at 652341a with copy_priority equal drawn): a mirror
    // job paused its volume for the pivot while a write waited for a loan of space; the
    // loan was denied, the write failed, and nothing stepped the job again: a FLUSH
    // parked behind the pause never completed, no event left. The draws moved since
    // (5253be6), so the seed no longer meets that case; the engine test
    // `a_pause_waiting_for_a_write_denied_its_loan_ends` fails without the fix.
    run_seed(&DstConfig {
        seed: 1032,
        steps: 3601,
        faults: Faults::None,
        bug: None,
    })
    .unwrap_or_else(|f| panic!("{f}"));
}

/// Found by the stop-38 soak of seeds 0..10000 (the only failure): a write of volume 1
/// acknowledged from the SSD pool's write buffer before a whole-volume trim (DST's
/// `release.rs` draw) read back after the trim, which had completed, while an LR
/// migration of the volume ran. The trim went to the destination (LR) and marked its
/// ranges `Moved`; three older writes still in flight to the source (stalled 2 s)
/// completed after it and cleared those entries, so the range read the source again,
/// where the buffer had written the newer write back over them, and the chunk's copy
/// took it to the destination. Each destination write now keeps its entry from the
/// older home writes (`Activity::newer_elsewhere`); `tests/migration_stale_source.rs` in
/// the engine reproduces the order without DST. Replay: `tiervisor dst --seeds
/// 5548..5549 --steps 3695 --faults 3` (`TIERVISOR_DST_TRACE=1` for the trace).
#[test]
fn seed_5548_a_buffered_write_outlives_a_whole_volume_trim_during_migration() {
    let cfg = DstConfig {
        seed: 5548,
        steps: 3695,
        faults: Faults::Latent,
        bug: None,
    };
    run_seed(&cfg).unwrap_or_else(|f| panic!("{f}"));
    // The seed catches the defect put back (`stale-write-clears-moved`), at the same read.
    let bug = InjectedBug::StaleWriteClearsMoved;
    let f = run_seed(&DstConfig {
        bug: Some(bug),
        ..cfg
    })
    .expect_err("stale-write-clears-moved caught");
    assert!(
        f.message.contains("volume 1 sector 5812") && f.message.contains("write 1352"),
        "{}",
        f.message
    );
}

/// Found by stop 39's soak (`--seeds 13128..20000` on 327f889, after 2,857 seeds passed),
/// **not fixed yet**: with 3 shards, `cfq` on the SSD and `cats` on the HDD, an operation
/// waited 774 s of virtual time in a scheduler (bound 30 s), in a run whose 2,922 steps
/// took 843 s of virtual time. A first look: two writes and a punch of the HDD pool were
/// dispatched 4.5 M times, each time parked again by the write buffer (docs/TESTING.md).
/// Replay:
/// `tiervisor dst --seeds 15985..15986 --steps 2922 --faults 3` (`TIERVISOR_DST_TRACE=1`
/// for the trace, about 1.9 M lines).
#[test]
#[ignore = "known failure, seed 15985: an operation waits 774 s in a scheduler (docs/TESTING.md)"]
fn seed_15985_an_operation_waits_774_s_in_a_scheduler() {
    let cfg = DstConfig {
        seed: 15985,
        steps: 2922,
        faults: Faults::Latent,
        bug: None,
    };
    run_seed(&cfg).unwrap_or_else(|f| panic!("{f}"));
}

/// Found by the 10,000-seed soak of seeds 10000..20000 at 3845a43 (faults 3): volume 2
/// (`new0`, thin, an SLR migration from the HDD to the SSD, resumed after a restart) read
/// at sector 215 the data of write 686, which write 696 of the same sector had replaced:
/// 696 was submitted after 686 completed. Writes 687 (sectors 167..242) and 686 went to
/// the destination of the copied chunk 0; 687 landed first but its completion came last.
/// A failed copy cancelled the job, so 696 went home (the HDD's write buffer took it at
/// once) and cleared 686's `Moved` entry; then 687 completed and marked its whole range
/// `Moved`, over 696's sector, where the destination (written in place) held 686's data,
/// and the cancel's copy back wrote that home. A destination write now leaves out of its
/// entry what home writes queued after it already wrote (`Activity::newer_at_home`);
/// `tests/migration_stale_destination.rs` in the engine reproduces the order without
/// DST. Replay: `tiervisor dst --seeds 13127..13128 --steps 2911 --faults 3`
/// (`TIERVISOR_DST_TRACE=1` for the trace).
#[test]
fn seed_13127_an_older_destination_write_hides_a_newer_home_write_after_a_cancel() {
    let cfg = DstConfig {
        seed: 13127,
        steps: 2911,
        faults: Faults::Latent,
        bug: None,
    };
    run_seed(&cfg).unwrap_or_else(|f| panic!("{f}"));
    // The seed catches the defect put back (`stale-dst-write-hides-home`), at that read.
    let bug = InjectedBug::StaleDstWriteHidesHome;
    let f = run_seed(&DstConfig {
        bug: Some(bug),
        ..cfg
    })
    .expect_err("stale-dst-write-hides-home caught");
    assert!(
        f.message.contains("volume 2 sector 215") && f.message.contains("write 686"),
        "{}",
        f.message
    );
}
