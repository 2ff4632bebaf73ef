//! What a migration is asked to do, and how a volume table records it: the job's
//! parameters as a leaf the layout and control code can name without reaching into the
//! running jobs (issue 11's import cycle).

use crate::codec::{Dec, Enc};
use crate::types::PoolId;

/// The default of `MigrationParams::copy_window_chunks`: QEMU's mirror job keeps
/// `MAX_IN_FLIGHT` 16 operations of at most 1 MiB (its default `buf-size` 16 MiB). One
/// chunk at a time, DBT's dirty copies were one read and one write per dirty chunk end to
/// end: at 30 GB under random writes that latency, not the rate cap, set the floor of the
/// dirty set and so the pause (seed 004's Table 3 at window 1 and 16, BENCHMARKS.md). The
/// first pass copies one chunk at a time whatever the window (whole chunks in
/// `buffer_bytes` pieces, all in flight at once): the rate cap is what bounds it, and the
/// schemes' "block being copied" rules name one chunk.
pub const DEFAULT_COPY_WINDOW_CHUNKS: u32 = 16;

/// `MigrationParams::coalesce_runs` into an HDD when the job does not say. Each dirty run
/// DBT copies is a write of its own, and into an HDD each pays a rotation, so a chunk
/// dirtied in many places costs many rotations where one sequential chunk write would do.
/// Measured (`reproduce migration --table3-image-mib 1024 --tiervisor-coalesce-runs N`,
/// BENCHMARKS.md) for N = 0, 1, 2, 4, 8, 16 with the window of 16: SSD to HDD's pause in
/// Table 3's experiment 16.3 s without, 7.2-7.5 s with any N; in Table 5's 2.48 s
/// without, 1.36 s at 4 (1.45-2.25 s at the others); lambda_migration_time 9.13 without,
/// 5.0 at 4 (4.9-5.8); HDD to HDD as without from 4 up (its pause 39 ms against 56 ms at 2).
pub const DEFAULT_COALESCE_RUNS: u32 = 4;

/// The largest `coalesce_runs` (a 1 MiB chunk at 512-byte tracking has at most 1,024
/// runs; the bound leaves room for larger chunks).
pub const MAX_COALESCE_RUNS: u32 = 1 << 16;

/// `coalesce_runs` when the job does not say: [`DEFAULT_COALESCE_RUNS`] into an HDD, never
/// into an SSD. Into an SSD a 4 KiB write costs a few tens of microseconds, and whole
/// chunks only add writes: at 1 GiB with the window of 16, SSD to SSD's pause went from
/// 0.7 ms to 2.3-3.7 s (the passes' longer copies let more be dirtied), its SSD bytes per
/// VM byte from 1.5 to 3.8-6.5, and HDD to SSD's Table 6 share from 0.55 to 1.4-26.5.
pub fn default_coalesce_runs(dst: crate::config::Medium) -> u32 {
    match dst {
        crate::config::Medium::Hdd => DEFAULT_COALESCE_RUNS,
        crate::config::Medium::Ssd => 0,
    }
}

/// The largest `copy_window_chunks`: each copy in flight holds up to a chunk of data in
/// the server's buffers (64 MiB at 1 MiB chunks), and past the devices' queue depths
/// more copies only queue in the scheduler.
pub const MAX_COPY_WINDOW_CHUNKS: u32 = 64;

/// How a migration routes the volume's requests while it copies (seed 004, section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheme {
    /// Dirty block tracking: writes go to the source and mark a bitmap; passes recopy
    /// dirty blocks; the last ones are copied with the volume paused.
    Dbt,
    /// IO mirroring: writes to copied chunks go to both pools and complete when both do.
    Mirror,
    /// Low redundancy: writes go to the destination; reads go by the bitmap.
    Lr,
    /// Source-based low redundancy: the uncopied region is served by the source, writes
    /// to the copied region go to the destination.
    Slr,
    /// Asynchronous mirroring: like `Mirror`, but the duplicate does not hold the write.
    Aio,
}

impl Scheme {
    pub const ALL: [Scheme; 5] = [
        Scheme::Dbt,
        Scheme::Mirror,
        Scheme::Lr,
        Scheme::Slr,
        Scheme::Aio,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Dbt => "dbt",
            Scheme::Mirror => "mirror",
            Scheme::Lr => "lr",
            Scheme::Slr => "slr",
            Scheme::Aio => "aio",
        }
    }
    pub fn parse(s: &str) -> Option<Scheme> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// How the copy shares a disk the VM keeps busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CopyPriority {
    /// The VM's I/O first: the copy's operations wait in the pool's background queue
    /// until the device idles or they have waited 100 ms, then take turns with the VM's
    /// (`sched/classes.rs`). Least I/O penalty, longest copy under load.
    #[default]
    Background,
    /// The copy's operations queue with the VM's in the pool's scheduler and compete as
    /// equals, as seed 004's copy process did (section 3.1: the two "compete for IO
    /// bandwidth"; its lambda_migration_time of 1-3 is that share).
    Equal,
}

impl CopyPriority {
    pub fn name(self) -> &'static str {
        match self {
            CopyPriority::Background => "background",
            CopyPriority::Equal => "equal",
        }
    }
    pub fn parse(s: &str) -> Result<CopyPriority, String> {
        match s {
            "background" => Ok(CopyPriority::Background),
            "equal" => Ok(CopyPriority::Equal),
            _ => Err(format!(
                "unknown copy priority {s:?}; expected background or equal"
            )),
        }
    }
}

/// A scheme or `auto` (pick by predicted migration cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemeChoice {
    Fixed(Scheme),
    Auto,
}

impl SchemeChoice {
    pub fn parse(s: &str) -> Result<SchemeChoice, String> {
        if s == "auto" {
            return Ok(SchemeChoice::Auto);
        }
        Scheme::parse(s).map(SchemeChoice::Fixed).ok_or_else(|| {
            format!("unknown migration scheme {s:?}; expected dbt, mirror, lr, slr, aio or auto")
        })
    }
}

/// What a migration is asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationParams {
    pub to: PoolId,
    pub scheme: SchemeChoice,
    /// Copy bandwidth cap (bytes read plus written counts once per byte copied).
    pub rate_bytes_per_s: u64,
    /// DBT's dirty-tracking unit: a power of two from 512 bytes (the paper's sector
    /// bitmap) to the chunk size.
    pub granularity_bytes: u64,
    /// Largest single copy operation.
    pub buffer_bytes: u64,
    /// DBT pauses after this many passes even if the dirty set still shrinks.
    pub dbt_max_passes: u32,
    /// AIO: while more duplicates than this are unfinished, writes to the faster pool
    /// wait `aio_delay_ns`.
    pub aio_threshold: u32,
    pub aio_delay_ns: u64,
    /// Weight of SSD wear against I/O performance in the migration cost (for `auto`).
    pub gamma: f64,
    /// The copy's share of a disk the VM keeps busy.
    pub copy_priority: CopyPriority,
    /// Chunk copies DBT keeps in flight in its dirty passes and the pause's final copy,
    /// 1 to [`MAX_COPY_WINDOW_CHUNKS`]: 1 is one chunk at a time (seed 004's single copy
    /// process), 16 QEMU mirror's `MAX_IN_FLIGHT` (the default).
    pub copy_window_chunks: u32,
    /// DBT copies a dirty chunk whole (one read and one write of the chunk) rather than
    /// run by run when its dirty blocks form at least this many separate runs, in its
    /// dirty passes and the pause's final copy; 0 never (seed 004's copy, and jobs
    /// recorded before this existed). None: by the destination's medium, set when the
    /// job starts ([`default_coalesce_runs`]).
    pub coalesce_runs: Option<u32>,
}

impl MigrationParams {
    pub fn new(to: PoolId) -> MigrationParams {
        MigrationParams {
            to,
            scheme: SchemeChoice::Auto,
            rate_bytes_per_s: 64 << 20,
            granularity_bytes: 64 << 10,
            buffer_bytes: 1 << 20,
            dbt_max_passes: 8,
            aio_threshold: 100,
            aio_delay_ns: 1_000_000,
            gamma: 0.5,
            copy_priority: CopyPriority::Background,
            copy_window_chunks: DEFAULT_COPY_WINDOW_CHUNKS,
            coalesce_runs: None,
        }
    }

    /// Whether DBT copies a chunk whose dirty blocks form `runs` runs whole.
    pub(crate) fn coalesces(&self, runs: usize) -> bool {
        self.coalesce_runs
            .is_some_and(|n| n > 0 && runs >= n as usize)
    }

    /// Refuse parameters no job can run with, for a system of `chunk_bytes` chunks.
    pub(crate) fn validate(&self, chunk_bytes: u64) -> Result<(), String> {
        let (g, cb) = (self.granularity_bytes, chunk_bytes);
        if g < 512 || !g.is_power_of_two() || g > cb {
            return Err(format!(
                "granularity {g} bytes: must be a power of two from 512 bytes to the chunk size ({cb})"
            ));
        }
        if self.buffer_bytes < 512 || !self.buffer_bytes.is_multiple_of(512) {
            return Err(format!(
                "buffer {} bytes: must be a positive multiple of 512",
                self.buffer_bytes
            ));
        }
        if self.rate_bytes_per_s == 0 {
            return Err("rate must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.gamma) {
            return Err(format!("gamma {} must lie in [0, 1]", self.gamma));
        }
        if let Some(n) = self.coalesce_runs.filter(|&n| n > MAX_COALESCE_RUNS) {
            return Err(format!(
                "coalesce runs {n}: must be 0 (never) to {MAX_COALESCE_RUNS}"
            ));
        }
        if !(1..=MAX_COPY_WINDOW_CHUNKS).contains(&self.copy_window_chunks) {
            return Err(format!(
                "copy window {} chunks: must be 1 to {MAX_COPY_WINDOW_CHUNKS}",
                self.copy_window_chunks
            ));
        }
        Ok(())
    }
}

/// Encode a volume's recorded job: a tag byte (0: none; 1: a job; 2: a thick volume's
/// job, followed after the parameters by the first chunk of the new home region it
/// reserved), then the copy priority (0 background, 1 equal), the copy window in chunks
/// (a byte) and DBT's `coalesce_runs` (a u32). Tags 0 and 1 are what tables written
/// before thick migration hold; the priority, window and coalescing bytes are the entry's
/// zero padding in tables written before them, and so read as background, for the window
/// as the default, and as no coalescing (what those jobs ran with).
pub(crate) fn encode_job(e: &mut Enc, job: Option<&MigrationParams>, base_chunk: Option<u64>) {
    let Some(p) = job else {
        e.u8(0);
        return;
    };
    let scheme = match p.scheme {
        SchemeChoice::Fixed(s) => Scheme::ALL.iter().position(|&x| x == s).unwrap_or(0) as u8,
        SchemeChoice::Auto => u8::MAX,
    };
    e.u8(if base_chunk.is_some() { 2 } else { 1 })
        .u16(p.to.0)
        .u8(scheme);
    e.u64(p.rate_bytes_per_s)
        .u64(p.granularity_bytes)
        .u64(p.buffer_bytes)
        .u32(p.dbt_max_passes)
        .u32(p.aio_threshold)
        .u64(p.aio_delay_ns)
        .u64(p.gamma.to_bits());
    if let Some(b) = base_chunk {
        e.u64(b);
    }
    e.u8(match p.copy_priority {
        CopyPriority::Background => 0,
        CopyPriority::Equal => 1,
    });
    // Validated at the start to 1..=MAX_COPY_WINDOW_CHUNKS, which fits a byte.
    e.u8(u8::try_from(p.copy_window_chunks).unwrap_or(u8::MAX));
    // Set at the start (`Engine::try_start_migration`); an unset one is recorded as the
    // largest count, which reads back as unset.
    e.u32(p.coalesce_runs.unwrap_or(u32::MAX));
}

/// A decoded job record: the job's parameters, and a thick volume's new region.
type Decoded = (Option<MigrationParams>, Option<u64>);

/// Decode what `encode_job` wrote: `None` if the bytes are not a job record.
pub(crate) fn decode_job(d: &mut Dec) -> Option<Decoded> {
    let thick = match d.u8()? {
        0 => return Some((None, None)),
        1 => false,
        2 => true,
        _ => return None,
    };
    let to = PoolId(d.u16()?);
    let scheme = match d.u8()? {
        u8::MAX => SchemeChoice::Auto,
        i => SchemeChoice::Fixed(*Scheme::ALL.get(i as usize)?),
    };
    let mut params = MigrationParams {
        to,
        scheme,
        rate_bytes_per_s: d.u64()?,
        granularity_bytes: d.u64()?,
        buffer_bytes: d.u64()?,
        dbt_max_passes: d.u32()?,
        aio_threshold: d.u32()?,
        aio_delay_ns: d.u64()?,
        gamma: f64::from_bits(d.u64()?),
        copy_priority: CopyPriority::Background,
        copy_window_chunks: DEFAULT_COPY_WINDOW_CHUNKS,
        coalesce_runs: Some(0),
    };
    let base = if thick { Some(d.u64()?) } else { None };
    params.copy_priority = match d.u8()? {
        0 => CopyPriority::Background,
        1 => CopyPriority::Equal,
        _ => return None,
    };
    params.copy_window_chunks = match d.u8()? {
        0 => DEFAULT_COPY_WINDOW_CHUNKS,
        w => u32::from(w).min(MAX_COPY_WINDOW_CHUNKS),
    };
    // Zero in tables written before: those jobs copied dirty runs one by one.
    params.coalesce_runs = match d.u32()? {
        u32::MAX => None,
        n => Some(n),
    };
    Some((Some(params), base))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What tables written before thick migration hold: tag 1 and the parameters.
    fn old_format(p: &MigrationParams) -> Vec<u8> {
        let mut e = Enc::with_capacity(64);
        e.u8(1).u16(p.to.0).u8(2);
        e.u64(p.rate_bytes_per_s)
            .u64(p.granularity_bytes)
            .u64(p.buffer_bytes)
            .u32(p.dbt_max_passes)
            .u32(p.aio_threshold)
            .u64(p.aio_delay_ns)
            .u64(p.gamma.to_bits());
        e.pad_to(80);
        e.seal(84)
    }

    #[test]
    fn an_old_job_record_decodes_and_a_thin_job_is_written_as_before() {
        let p = MigrationParams {
            scheme: SchemeChoice::Fixed(Scheme::Lr),
            // What an old record reads as: no coalescing.
            coalesce_runs: Some(0),
            ..MigrationParams::new(PoolId(3))
        };
        let old = old_format(&p);
        let (params, base) = decode_job(&mut Dec::new(&old)).unwrap();
        assert_eq!((params, base), (Some(p.clone()), None));
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(&p), None);
        e.pad_to(80);
        let b = e.seal(84);
        // The old encoding, then the priority byte (0: background) and the window byte.
        assert_eq!(
            b[..52],
            old[..52],
            "a thin volume's job keeps the old encoding"
        );
        assert_eq!(b[52..54], [0, 16]);
        // A thick volume's job is tagged 2 and carries its new region.
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(&p), Some(77));
        let b = e.seal(84);
        assert_eq!(b[0], 2);
        assert_eq!(decode_job(&mut Dec::new(&b)).unwrap(), (Some(p), Some(77)));
        let mut bad = b.clone();
        bad[0] = 3;
        assert!(decode_job(&mut Dec::new(&bad)).is_none());
    }

    /// `p`'s job record with `base` in a sealed 84-byte slot, checked to decode to itself.
    fn sealed_round_trip(p: &MigrationParams, base: Option<u64>) -> Vec<u8> {
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(p), base);
        e.pad_to(80);
        let b = e.seal(84);
        assert_eq!(
            decode_job(&mut Dec::new(&b)).unwrap(),
            (Some(p.clone()), base)
        );
        b
    }

    /// The copy priority rides in the byte after the job (zero padding in older tables,
    /// so they read as background), for thin and thick jobs alike.
    #[test]
    fn the_copy_priority_is_recorded_after_the_job() {
        for base in [None, Some(77)] {
            let p = MigrationParams {
                scheme: SchemeChoice::Fixed(Scheme::Dbt),
                copy_priority: CopyPriority::Equal,
                ..MigrationParams::new(PoolId(1))
            };
            let b = sealed_round_trip(&p, base);
            // An unknown priority is not a job record.
            let at = if base.is_some() { 60 } else { 52 };
            let mut bad = b.clone();
            bad[at] = 2;
            assert!(decode_job(&mut Dec::new(&bad)).is_none(), "{base:?}");
        }
    }

    /// The copy window rides in the byte after the priority; zero (older tables) reads as
    /// the default.
    #[test]
    fn the_copy_window_is_recorded_after_the_priority() {
        for base in [None, Some(77)] {
            let p = MigrationParams {
                scheme: SchemeChoice::Fixed(Scheme::Dbt),
                copy_window_chunks: 3,
                ..MigrationParams::new(PoolId(1))
            };
            let b = sealed_round_trip(&p, base);
            let at = if base.is_some() { 61 } else { 53 };
            assert_eq!(b[at], 3);
            let mut old = b.clone();
            old[at] = 0;
            let (q, _) = decode_job(&mut Dec::new(&old)).unwrap();
            assert_eq!(
                q.map(|q| q.copy_window_chunks),
                Some(DEFAULT_COPY_WINDOW_CHUNKS)
            );
        }
    }

    /// DBT's `coalesce_runs` rides in the four bytes after the window; zero (older
    /// tables) reads as no coalescing, what those jobs did.
    #[test]
    fn the_coalescing_is_recorded_after_the_window() {
        for base in [None, Some(77)] {
            let p = MigrationParams {
                scheme: SchemeChoice::Fixed(Scheme::Dbt),
                coalesce_runs: Some(300),
                ..MigrationParams::new(PoolId(1))
            };
            let b = sealed_round_trip(&p, base);
            let at = if base.is_some() { 62 } else { 54 };
            assert_eq!(b[at..at + 4], 300u32.to_le_bytes());
            let mut old = b.clone();
            old[at..at + 4].fill(0);
            let (q, _) = decode_job(&mut Dec::new(&old)).unwrap();
            assert_eq!(q.map(|q| q.coalesce_runs), Some(Some(0)));
            let unset = MigrationParams {
                coalesce_runs: None,
                ..p.clone()
            };
            sealed_round_trip(&unset, base);
        }
    }
}
