//! Deliberate defects, for proving that deterministic simulation testing catches them.
//! They are not configuration: an engine gets one only through `Engine::inject_bug`,
//! which exists only with the `inject-bugs` cargo feature (enabled by tiervisor-sim for
//! DST, and by the engine's own tests). Without the feature every check compiles to
//! `false`, so a production engine cannot carry one.

/// A defect DST (or an engine test) must catch. Add one here: a variant, its name, its
/// place in `all()` (CI DST must catch it) or its own list, and a check `bug_is(..)` at the
/// defect's site in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// Acknowledge a FLUSH once the data flush is done, before the journal is durable.
    AckFlushBeforeJournal,
    /// Trim (and write-zeroes) leave the old data readable.
    TrimKeepsData,
    /// Give freed chunks straight back to the allocator (no durability or in-flight wait),
    /// so a crash can leave one volume's old mapping pointing at another's data.
    ReuseFreedImmediately,
    /// Do not zero the rest of a freshly allocated chunk.
    NoZeroFill,
    /// Let writes to a chunk being tier-migrated go to the source copy, which the move
    /// may already have read: the write is lost when the map switches.
    MoveIgnoresWrites,
    /// Let a commit flush and write its records without waiting for the log appends
    /// that carry the data they point at.
    CommitSkipsLogWait,
    /// Leave the wait a scheduler asks for with `Dispatch::WaitUntil` out of
    /// `Engine::next_deadline`, so an idling scheduler (anticipation, a limit) sleeps until
    /// some unrelated event.
    SchedLosesWakeup,
    /// Block status reports log-structured data as zeros.
    StatusMissesLog,
    /// CFQ charges a completed read to its volume's shared queue instead of its
    /// process's (the key before I/O contexts): the process's queue keeps a request "on
    /// the device" for ever, so it idles with no wake-up or stops at its quantum, and the
    /// requests queued behind it starve (`sched/cfq.rs`).
    CfqCompletesWrongContext,
    /// CFQ does not record its processes' completions in their idle windows
    /// (`sched/flowq.rs`), so every think time reads 0 and the disk idles for processes
    /// that went to sleep. A performance defect: DST checks data, not idling, so the unit
    /// test `sched::cfq`'s think-time test catches it.
    CfqThinkTimeUnrecorded,
    /// A new chunk's write that failed for space is reported as EIO (as before issue 15),
    /// so a VM sees a broken disk instead of pausing on ENOSPC.
    NoSpaceAsEio,
    /// DBT: writes to copied blocks are not marked dirty, so the pivot switches in stale
    /// destination data.
    DbtMissesDirty,
    /// DBT: a dirty chunk copied whole (`coalesce_runs`) is copied only up to the start
    /// of its last dirty run, so the pivot switches in stale data there.
    DbtCoalesceSkipsLastRun,
    /// Mirror: acknowledge a copied-region write once the source has it, before its
    /// destination copy lands, and pivot without waiting for those copies.
    MirrorAcksEarly,
    /// LR: reads ignore the bitmap and read the source for blocks already written to the
    /// destination.
    LrReadsSource,
    /// SLR: writes to the copied region go to the source, leaving the destination stale.
    SlrWritesSource,
    /// AIO: duplicates to one chunk are not kept in order, so an older one may land last.
    AioUnorderedDups,
    /// Pivot: a FLUSH that arrives after the volume resumed on the switched map, before
    /// the switch is durable, completes at once: a power loss then mounts the source map
    /// without the writes it covered (made to the destination).
    PivotFlushEarly,
    /// Write buffer: a FLUSH goes to the device as soon as its write-backs are issued,
    /// before they land, so it can complete while its data is still in flight.
    WbufFlushEarly,
    /// Discard (punch) a freed range as soon as its in-flight I/O drained, before the
    /// records that free it are durable: a crash then recovers a mapping to a hole.
    PunchBeforeFreeDurable,
    /// Write buffer: a write that replaces buffered data a waiting FLUSH covers takes a
    /// fresh admission, so the FLUSH no longer waits for the range (it completes with
    /// neither the old nor the new bytes on the device).
    WbufReplaceForgets,
    /// The virtual performance throttle passes a completion on when the device reports
    /// it, before its modelled target (the throttle's hand-on check must catch it).
    ThrottleEarlyRelease,
    /// A volume created at run time is announced without the volume table write that
    /// records it, so a crash forgets a volume clients were told exists.
    CreateSkipsTable,
    /// Shard 0's slice of every pool overlaps shard 1's by a chunk (`ShardPlan`), so both
    /// shards can allocate it. Not an engine defect: the plan carries it.
    ShardOverlap,
    /// The budget broker (`budget_broker.rs`) lets the busy shards split the whole total,
    /// forgetting the floors the idle ones keep, and grows a shard without waiting for
    /// the others' shrinks: the shards' budgets sum to more than the total. Not an
    /// engine defect: the driver's broker carries it.
    BudgetOvercommit,
    /// The device-share broker (`share_broker.rs`) gives reservations on top of a weight
    /// split of everything left after the floors, not of what the reservations leave:
    /// a pool's shares sum to more than the device. Not an engine defect: the driver's
    /// broker carries it.
    ShareOvercommit,
    /// A volume grown at run time serves (and announces) its new size at once, before the
    /// volume table recording it is durable, so a crash shrinks it under written data.
    ResizeBeforeDurable,
    /// A volume shrunk at run time has its smaller size written to the volume table at
    /// once, not after a checkpoint of the smaller map: a crash in between mounts the old
    /// checkpoint and journal, whose records name chunks past the new end.
    ShrinkTableFirst,
    /// A volume deleted at run time gives its chunks back as soon as it is quiet, before
    /// the volume table with its tombstone is durable: a crash brings the volume back
    /// over chunks other volumes may have taken meanwhile.
    DeleteBeforeDurable,
    /// A volume deleted at run time leaves the volume list at once instead of keeping
    /// its index as a hollow slot until the next mount: the volumes after it move down an
    /// index under drivers that still address them by the old one. Deleting the last
    /// volume cannot show it; DST deletes any volume since this bug was added.
    DeleteCompactsAtOnce,
    /// The tier tick moves chunks of a volume that is migrating: a promotion of a chunk LR
    /// already switched to the destination frees the job's destination copy, and the
    /// pivot switches the chunk back to it, stale.
    TierMovesWhileMigrating,
    /// A thick volume's old home region is freed as soon as its job is over, before the
    /// volume table naming the new region is durable: a crash mounts the old table, whose
    /// home region other data may have taken meanwhile.
    ThickOldRegionFreedEarly,
    /// `cache` placement: a dirty chunk chosen for eviction is mapped back to its slow
    /// slot when its writeback starts, not once it has landed: reads see the stale slow
    /// copy, and a crash after the record is durable loses the cached writes.
    CacheCleanTooEarly,
    /// `cache` placement: writes to a chunk under a background writeback (not an
    /// eviction's) go on instead of waiting, and the writeback's end then marks the chunk
    /// clean over them: a later clean eviction maps the chunk back to its slow slot,
    /// which lacks those writes.
    CacheWritebackIgnoresWrites,
    /// A migrating `cache` volume's drain evicts a dirty cached chunk without its
    /// writeback: its slow slot, which the job copies and reads then go to, is stale.
    CacheMigrateDropsDirty,
    /// `hot` with `keep_home`: a demotion remaps a chunk written since its promotion to
    /// its kept home, as if clean: reads then see the stale home copy, and the writes
    /// made to the fast copy are lost (`tier_home.rs`).
    HotDemotesStaleHome,
    /// `hot` with `keep_home`: a write to a kept home already dirty replaces its dirty span
    /// instead of widening it, so the demotion copies only the last write's parts and the
    /// home keeps stale data where the earlier writes were (`tier_home.rs`).
    HotSpanNotWidened,
    /// Mount writes its new journal headers with the clean-stop marker of the last stop
    /// still set, so a crash of this run reads as a clean stop at the next mount (and a
    /// vhost-user frontend resuming its rings is not told of the writes it lost).
    CleanStopMarkerKept,
    /// A migrating logged volume's drain clears a chunk's `Log` ranges without writing
    /// them back home: the home data the job copies, and reads then get, is stale.
    LogMigrateDropsLive,
    /// `bitvisor` log mode: a write is redirected to the location of the stream's
    /// previous write, which the overlay still maps (the older data is overwritten).
    BitvisorReusesLive,
    /// A donor shard records a run lent (`loan.rs`) but gives it back to its own
    /// allocator once that is durable (and does not take it out at mount), so the donor
    /// and the borrower can both allocate its chunks.
    LentKept,
    /// A write that waited for a loan of space between shards (`loan_wait.rs`) is
    /// forgotten when the loan lands: its request completes as if it were written.
    LoanWaitDrops,
    /// A borrowed run is given back (its record removed) without waiting for the
    /// volumes' checkpoints to pass it: a journal may still name one of its chunks, and a
    /// mount then refuses it as lying beyond the pool (`give_back.rs`).
    GiveBackEarly,
    /// A `Control::GiveBackNow` hint gives the last borrowed run back without looking
    /// whether it is wholly free: chunks a volume still maps leave the shard
    /// (`give_back.rs`); the ownership check sees them claimed twice.
    GiveBackNowUsed,
    /// When a loan's answer ends write requests (denied: ENOSPC), what waits for requests
    /// to end is not stepped: a job pausing its volume for its pivot waits for ever if
    /// nothing else wakes it (DST seed 1032 with `copy_priority = equal`, at 652341a).
    LoanAnswerNoStep,
    /// LR/SLR: a write that lands on the destination while older writes of its range are
    /// still on their way to the source does not keep its `Moved` entry from their
    /// completion, which clears it: the range reads the source's older data again, and
    /// the chunk's copy takes that to the destination (DST seed 5548, the fixed bug).
    StaleWriteClearsMoved,
    /// LR/SLR: a write that lands on the destination after a newer write of its range
    /// (queued after it, once a cancel sent writes home) completed at home points the
    /// range at the destination all the same: the newer write is hidden, and the
    /// destination may hold a still older write's data there (DST seed 13127, the fixed
    /// bug).
    StaleDstWriteHidesHome,
    /// DST's queueing HDD (`crates/sim/src/dst/ncq.rs`) lets commands queued after a
    /// FLUSH be served before it. Not an engine defect: the simulated drive carries it.
    NcqJumpsFlush,
}

impl InjectedBug {
    /// The bugs the CI DST set must catch.
    pub fn all() -> [InjectedBug; 11] {
        [
            InjectedBug::AckFlushBeforeJournal,
            InjectedBug::TrimKeepsData,
            InjectedBug::ReuseFreedImmediately,
            InjectedBug::NoZeroFill,
            InjectedBug::MoveIgnoresWrites,
            InjectedBug::CommitSkipsLogWait,
            InjectedBug::SchedLosesWakeup,
            InjectedBug::StatusMissesLog,
            InjectedBug::ThrottleEarlyRelease,
            InjectedBug::PunchBeforeFreeDurable,
            InjectedBug::BitvisorReusesLive,
        ]
    }
    /// The host write-back buffer's: DST gives pools buffers in a third of the seeds (not
    /// with `TIERVISOR_DST_NO_WBUF=1`); CI's DST must catch both (docs/TESTING.md).
    pub fn host_flush() -> [InjectedBug; 2] {
        [InjectedBug::WbufFlushEarly, InjectedBug::WbufReplaceForgets]
    }
    /// One per live-migration scheme, the pivot's, tiered, thick and cache volumes': DST's CI seed set
    /// catches all but `aio-unordered-dups`, which seeds 1280..1536 catch
    /// (`crates/sim/tests/dst.rs` says why); `tests/migration.rs` catches every one at the
    /// engine level (docs/TESTING.md).
    pub fn migration() -> [InjectedBug; 11] {
        [
            InjectedBug::DbtMissesDirty,
            InjectedBug::DbtCoalesceSkipsLastRun,
            InjectedBug::MirrorAcksEarly,
            InjectedBug::LrReadsSource,
            InjectedBug::SlrWritesSource,
            InjectedBug::AioUnorderedDups,
            InjectedBug::PivotFlushEarly,
            InjectedBug::TierMovesWhileMigrating,
            InjectedBug::ThickOldRegionFreedEarly,
            InjectedBug::CacheMigrateDropsDirty,
            InjectedBug::LogMigrateDropsLive,
        ]
    }
    pub fn name(self) -> &'static str {
        match self {
            InjectedBug::AckFlushBeforeJournal => "ack-flush-before-journal",
            InjectedBug::TrimKeepsData => "trim-keeps-data",
            InjectedBug::ReuseFreedImmediately => "reuse-freed-immediately",
            InjectedBug::NoZeroFill => "no-zero-fill",
            InjectedBug::MoveIgnoresWrites => "move-ignores-writes",
            InjectedBug::CommitSkipsLogWait => "commit-skips-log-wait",
            InjectedBug::SchedLosesWakeup => "sched-loses-wakeup",
            InjectedBug::StatusMissesLog => "status-misses-log",
            InjectedBug::CfqCompletesWrongContext => "cfq-completes-wrong-context",
            InjectedBug::CfqThinkTimeUnrecorded => "cfq-think-time-unrecorded",
            InjectedBug::NoSpaceAsEio => "enospc-as-eio",
            InjectedBug::DbtMissesDirty => "dbt-misses-dirty",
            InjectedBug::DbtCoalesceSkipsLastRun => "dbt-coalesce-skips-last-run",
            InjectedBug::MirrorAcksEarly => "mirror-acks-early",
            InjectedBug::LrReadsSource => "lr-reads-source",
            InjectedBug::SlrWritesSource => "slr-writes-source",
            InjectedBug::AioUnorderedDups => "aio-unordered-dups",
            InjectedBug::PivotFlushEarly => "pivot-flush-early",
            InjectedBug::WbufFlushEarly => "wbuf-flush-early",
            InjectedBug::WbufReplaceForgets => "wbuf-replace-forgets",
            InjectedBug::ThrottleEarlyRelease => "throttle-early-release",
            InjectedBug::PunchBeforeFreeDurable => "punch-before-free-durable",
            InjectedBug::CreateSkipsTable => "create-skips-table",
            InjectedBug::ShardOverlap => "shard-overlap",
            InjectedBug::BudgetOvercommit => "budget-overcommit",
            InjectedBug::ShareOvercommit => "share-overcommit",
            InjectedBug::ResizeBeforeDurable => "resize-before-durable",
            InjectedBug::ShrinkTableFirst => "shrink-table-first",
            InjectedBug::DeleteBeforeDurable => "delete-before-durable",
            InjectedBug::DeleteCompactsAtOnce => "delete-compacts-at-once",
            InjectedBug::TierMovesWhileMigrating => "tier-moves-while-migrating",
            InjectedBug::ThickOldRegionFreedEarly => "thick-old-region-freed-early",
            InjectedBug::CacheCleanTooEarly => "cache-clean-too-early",
            InjectedBug::CacheWritebackIgnoresWrites => "cache-writeback-ignores-writes",
            InjectedBug::CacheMigrateDropsDirty => "cache-migrate-drops-dirty",
            InjectedBug::HotDemotesStaleHome => "hot-demotes-stale-home",
            InjectedBug::HotSpanNotWidened => "hot-span-not-widened",
            InjectedBug::CleanStopMarkerKept => "clean-stop-marker-kept",
            InjectedBug::LogMigrateDropsLive => "log-migrate-drops-live",
            InjectedBug::BitvisorReusesLive => "bitvisor-reuses-live",
            InjectedBug::LentKept => "lent-kept",
            InjectedBug::LoanWaitDrops => "loan-wait-drops",
            InjectedBug::GiveBackEarly => "give-back-early",
            InjectedBug::GiveBackNowUsed => "give-back-now-used",
            InjectedBug::LoanAnswerNoStep => "loan-answer-no-step",
            InjectedBug::NcqJumpsFlush => "ncq-jumps-flush",
            InjectedBug::StaleWriteClearsMoved => "stale-write-clears-moved",
            InjectedBug::StaleDstWriteHidesHome => "stale-dst-write-hides-home",
        }
    }
    /// Caught by DST's out-of-space seeds (a third of the seeds; CI DST must catch it).
    pub fn space() -> [InjectedBug; 1] {
        [InjectedBug::NoSpaceAsEio]
    }
    /// Caught by DST's seeds that create, resize and delete volumes while running (CI DST
    /// must catch each).
    pub fn create() -> [InjectedBug; 5] {
        [
            InjectedBug::CreateSkipsTable,
            InjectedBug::ResizeBeforeDurable,
            InjectedBug::ShrinkTableFirst,
            InjectedBug::DeleteBeforeDurable,
            InjectedBug::DeleteCompactsAtOnce,
        ]
    }
    /// Caught by DST's seeds that draw several shards (CI DST must catch it).
    pub fn shard() -> [InjectedBug; 7] {
        [
            InjectedBug::ShardOverlap,
            InjectedBug::LentKept,
            InjectedBug::LoanWaitDrops,
            InjectedBug::GiveBackEarly,
            InjectedBug::GiveBackNowUsed,
            InjectedBug::BudgetOvercommit,
            InjectedBug::ShareOvercommit,
        ]
    }
    /// Caught by DST's seeds that draw `cache` placements, or `hot` ones with
    /// `keep_home` (CI DST must catch each, `cache-writeback-ignores-writes` in seeds
    /// 256..512: `crates/sim/tests/dst.rs`), and by `crates/engine/tests/cache.rs` and
    /// `crates/engine/tests/tier_home.rs`.
    pub fn cache() -> [InjectedBug; 4] {
        [
            InjectedBug::CacheCleanTooEarly,
            InjectedBug::CacheWritebackIgnoresWrites,
            InjectedBug::HotDemotesStaleHome,
            InjectedBug::HotSpanNotWidened,
        ]
    }
    /// Caught by DST's seeds that stop in order now and then instead of crashing (CI DST
    /// must catch it) and by `crates/engine/tests/clean_stop.rs`.
    pub fn clean_stop() -> [InjectedBug; 1] {
        [InjectedBug::CleanStopMarkerKept]
    }
    /// Caught by DST's seeds whose HDD queues commands (`ncq.rs`; CI DST must catch it)
    /// and by `tiervisor-model`'s `queue::tests::flush_is_a_barrier`.
    pub fn device() -> [InjectedBug; 1] {
        [InjectedBug::NcqJumpsFlush]
    }
    /// A lost wake-up after a loan's answer: caught by
    /// `crates/engine/tests/migration_wakeups.rs`, and within DST's CI seed set (seed 117)
    /// by the check after every call that no job is left paused for its pivot with
    /// nothing in flight (`Engine::check_pauses_stepped`), in the seeds whose slow driver
    /// answers loans while a pause waits for the write (docs/TESTING.md).
    pub fn wakeup() -> [InjectedBug; 1] {
        [InjectedBug::LoanAnswerNoStep]
    }
    /// Caught by DST's seeds whose requests name processes and whose pool runs cfq
    /// (`crates/sim/tests/dst.rs` names the range), and by `sched::cfq`'s unit test.
    pub fn contexts() -> [InjectedBug; 1] {
        [InjectedBug::CfqCompletesWrongContext]
    }
    /// The idle window's state: caught by `sched::cfq`'s
    /// `a_process_that_thinks_longer_than_slice_idle_is_not_idled_for`. DST does not
    /// catch it (idling longer loses no data and starves nothing).
    pub fn idle_window() -> [InjectedBug; 1] {
        [InjectedBug::CfqThinkTimeUnrecorded]
    }
    /// An LR destination write's `Moved` entry against older source writes in flight:
    /// caught by `crates/engine/tests/migration_stale_source.rs` and by DST seed 5548
    /// (`crates/sim/tests/dst.rs`), where it was found. It needs an older write to the
    /// source still in flight when a newer one lands on the destination, and newer data
    /// than the older write on the source under it (a buffered write).
    pub fn stale_moved() -> [InjectedBug; 1] {
        [InjectedBug::StaleWriteClearsMoved]
    }
    /// An LR/SLR destination write's `Moved` entry against newer home writes completed
    /// before it: caught by `crates/engine/tests/migration_stale_destination.rs` and by
    /// DST seed 13127 (`crates/sim/tests/dst.rs`), where it was found. It needs a cancel
    /// (writes go home again) while an older destination write is in flight, and that
    /// write's completion reported after a newer one of the range at home.
    pub fn stale_dst() -> [InjectedBug; 1] {
        [InjectedBug::StaleDstWriteHidesHome]
    }
    pub fn parse(s: &str) -> Option<InjectedBug> {
        Self::all()
            .into_iter()
            .chain(Self::migration())
            .chain(Self::host_flush())
            .chain(Self::space())
            .chain(Self::create())
            .chain(Self::shard())
            .chain(Self::cache())
            .chain(Self::clean_stop())
            .chain(Self::device())
            .chain(Self::wakeup())
            .chain(Self::contexts())
            .chain(Self::idle_window())
            .chain(Self::stale_moved())
            .chain(Self::stale_dst())
            .find(|b| b.name() == s)
    }
}
