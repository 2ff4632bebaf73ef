//! On-disk layout of a pool.
//!
//! ```text
//! pool:      [0, 4K) superblock | [64K, 128K) volume table slot A | [128K, 192K) slot B
//!            (table only on the metadata pool) | [1 MiB, ...) chunks
//! journal:   a run of chunks on the metadata pool: [0, 4K) header A | [4K, 8K) header B |
//!            [8K, end) ring of 4 KiB record blocks
//! checkpoint: a chain of chunks on the metadata pool, each with a 64-byte header
//! ```
//! Every structure carries a magic number, a version and a CRC32C.

pub(crate) mod offsets;

use crate::codec::{Dec, Enc, sealed_ok};
use crate::config::{CachePolicy, Medium, Placement, Provisioning};
use crate::types::PoolId;

pub use offsets::{
    BLOCK_BYTES, DATA_START_BYTES, SUPERBLOCK_BACKUP_OFFSET, SUPERBLOCK_OFFSET, VOLTAB_OFFSETS,
    VOLTAB_SLOT_BYTES,
};
pub const FORMAT_VERSION: u32 = 2;

const SB_MAGIC: &[u8; 8] = b"TVPOOL01";

/// Whether `first_bytes` (a pool's first 8 KiB) carry a tiervisor superblock, primary or
/// backup, whatever its version: drivers use it to refuse formatting over an old pool.
pub fn looks_like_pool(first_bytes: &[u8]) -> bool {
    let at = |off: u64| {
        first_bytes
            .get(off as usize..off as usize + SB_MAGIC.len())
            .is_some_and(|m| m == SB_MAGIC)
    };
    at(SUPERBLOCK_OFFSET) || at(SUPERBLOCK_BACKUP_OFFSET)
}
const VT_MAGIC: &[u8; 8] = b"TVVOLTAB";
const VT_ENTRY_BYTES: usize = 256;
const VT_HEADER_BYTES: usize = 64;
const JH_MAGIC: &[u8; 8] = b"TVJHEAD1";

/// Identity and geometry of one pool, at its offset 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub system_uuid: [u8; 16],
    pub pool_index: u16,
    pub pool_count: u16,
    pub name: String,
    pub medium: Medium,
    pub capacity_bytes: u64,
    pub chunk_bytes: u64,
    pub meta_pool: u16,
    /// False while the format that wrote it is unfinished (the metadata pool's superblock,
    /// written last, completes a format).
    pub complete: bool,
    /// The shard whose slice of the pool this is (`shard.rs`). Stored after the fields
    /// above, where superblocks written before sharding hold zeros: those read as shard 0
    /// of 1, so no format version change was needed.
    pub shard: crate::shard::id::ShardId,
}

impl Superblock {
    pub fn chunks(&self) -> u64 {
        chunks_in(self.capacity_bytes, self.chunk_bytes)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::with_capacity(BLOCK_BYTES as usize);
        e.bytes(SB_MAGIC)
            .u32(FORMAT_VERSION)
            .bytes(&self.system_uuid);
        e.u16(self.pool_index).u16(self.pool_count).name(&self.name);
        e.u8(match self.medium {
            Medium::Ssd => 0,
            Medium::Hdd => 1,
        });
        e.u64(self.capacity_bytes)
            .u64(self.chunk_bytes)
            .u64(DATA_START_BYTES)
            .u64(self.chunks())
            .u16(self.meta_pool)
            .u8(self.complete as u8);
        e.u16(self.shard.index).u16(self.shard.count);
        e.seal(BLOCK_BYTES as usize)
    }

    /// Decode; `Err` says what is wrong (for the operator).
    pub fn decode(buf: &[u8]) -> Result<Superblock, String> {
        if buf.len() < BLOCK_BYTES as usize || &buf[..8] != SB_MAGIC {
            return Err("no tiervisor superblock (bad magic)".into());
        }
        if !sealed_ok(buf, BLOCK_BYTES as usize) {
            return Err("superblock checksum mismatch".into());
        }
        let mut d = Dec::new(buf);
        let bad = || "superblock truncated".to_string();
        d.skip(8).ok_or_else(bad)?;
        let version = d.u32().ok_or_else(bad)?;
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported format version {version} (this build reads {FORMAT_VERSION})"
            ));
        }
        let mut system_uuid = [0u8; 16];
        system_uuid.copy_from_slice(d.bytes(16).ok_or_else(bad)?);
        let pool_index = d.u16().ok_or_else(bad)?;
        let pool_count = d.u16().ok_or_else(bad)?;
        let name = d.name().ok_or_else(bad)?;
        let medium = match d.u8().ok_or_else(bad)? {
            0 => Medium::Ssd,
            _ => Medium::Hdd,
        };
        let capacity_bytes = d.u64().ok_or_else(bad)?;
        let chunk_bytes = d.u64().ok_or_else(bad)?;
        let _data_start = d.u64().ok_or_else(bad)?;
        let _chunks = d.u64().ok_or_else(bad)?;
        let meta_pool = d.u16().ok_or_else(bad)?;
        let complete = d.u8().ok_or_else(bad)? == 1;
        let shard_index = d.u16().ok_or_else(bad)?;
        let shard = match d.u16().ok_or_else(bad)? {
            // Written before sharding existed (zeros): the whole pool is one shard.
            0 => crate::shard::id::ShardId::default(),
            count => crate::shard::id::ShardId {
                index: shard_index,
                count,
            },
        };
        // Checksummed is not the same as sane: geometry divides by the chunk size.
        if !chunk_bytes.is_power_of_two() || chunk_bytes < 4096 {
            return Err(format!(
                "superblock names a chunk size of {chunk_bytes} bytes (expected a power of two of at least 4096)"
            ));
        }
        Ok(Superblock {
            system_uuid,
            pool_index,
            pool_count,
            name,
            medium,
            capacity_bytes,
            chunk_bytes,
            meta_pool,
            complete,
            shard,
        })
    }
}

/// Decode the primary superblock, falling back to the backup copy in the next block.
pub fn decode_superblock_pair(buf: &[u8]) -> Result<Superblock, String> {
    let primary = Superblock::decode(buf);
    if primary.is_ok() {
        return primary;
    }
    match buf.get(BLOCK_BYTES as usize..).map(Superblock::decode) {
        Some(Ok(sb)) => Ok(sb),
        // A pool of another format version must be recognised as one, torn primary or not.
        Some(Err(e)) if is_other_version(&e) => Err(e),
        _ => primary,
    }
}

/// Whether a superblock decode error says the pool holds another format version.
pub fn is_other_version(decode_error: &str) -> bool {
    decode_error.starts_with("unsupported format version")
}

/// Number of whole chunks in a pool of `capacity_bytes`.
pub fn chunks_in(capacity_bytes: u64, chunk_bytes: u64) -> u64 {
    capacity_bytes.saturating_sub(DATA_START_BYTES) / chunk_bytes
}

/// Byte offset of a chunk on its pool.
#[inline]
pub fn chunk_offset(pchunk: u64, chunk_bytes: u64) -> u64 {
    DATA_START_BYTES + pchunk * chunk_bytes
}

/// One volume as recorded in the volume table.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeRecord {
    pub id: u32,
    pub name: String,
    pub size_bytes: u64,
    pub provisioning: Provisioning,
    pub placement: Placement,
    pub home_pool: PoolId,
    pub fast_pool: Option<PoolId>,
    /// First chunk of the home region (thick volumes), or a placement hint (thin).
    pub home_base_chunk: u64,
    pub journal_pool: PoolId,
    pub journal_first_chunk: u64,
    pub journal_chunks: u32,
    /// The migration job running on the volume, resumed at mount (`jobs/migrate/resume.rs`).
    pub migration: Option<crate::jobs::migrate::params::MigrationParams>,
    /// A thick volume's job: the first chunk of the new home region it reserved on the
    /// destination pool (`migration.to`), claimed at mount while the job is recorded.
    /// Encoded as a tagged job record; tables written before have none.
    pub migration_base_chunk: Option<u64>,
    /// A tombstone (`delete.rs`): the volume was deleted; its id is never reused and it
    /// owns nothing. Stored in the entry's last byte, zero in tables written before.
    pub deleted: bool,
}

/// The table of volumes, stored twice on the metadata pool; the newest valid copy wins.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VolumeTable {
    pub generation: u64,
    pub volumes: Vec<VolumeRecord>,
    /// Space this shard lent to or borrowed from other shards (`loan.rs`). Stored after
    /// the volume entries, counted in a header field older tables hold as zero padding.
    pub loans: Vec<LoanRecord>,
}

/// Where the loan count sits in the table header (zero padding before loans existed).
const VT_LOANS_AT: usize = 24;
const VT_LOAN_BYTES: usize = 32;

fn encode_placement(e: &mut Enc, p: &Placement) {
    match *p {
        Placement::Pinned => e.u8(0).u8(0).u64(0),
        Placement::Split { fast_percent } => e.u8(1).u8(fast_percent).u64(0),
        Placement::Hot {
            fast_budget_bytes,
            priority,
        } => e.u8(2).u8(priority).u64(fast_budget_bytes),
        Placement::Cache {
            cache_policy,
            fast_budget_bytes,
        } => e
            .u8(3)
            .u8(match cache_policy {
                CachePolicy::Smq => 0,
                CachePolicy::Bcache => 1,
            })
            .u64(fast_budget_bytes),
    };
}

fn decode_placement(d: &mut Dec) -> Option<Placement> {
    let (code, small, big) = (d.u8()?, d.u8()?, d.u64()?);
    match code {
        0 => Some(Placement::Pinned),
        1 => Some(Placement::Split {
            fast_percent: small,
        }),
        2 => Some(Placement::Hot {
            fast_budget_bytes: big,
            priority: small,
        }),
        3 => Some(Placement::Cache {
            cache_policy: match small {
                0 => CachePolicy::Smq,
                1 => CachePolicy::Bcache,
                _ => return None,
            },
            fast_budget_bytes: big,
        }),
        _ => None,
    }
}

impl VolumeTable {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::with_capacity(VOLTAB_SLOT_BYTES as usize);
        e.bytes(VT_MAGIC)
            .u32(FORMAT_VERSION)
            .u64(self.generation)
            .u32(self.volumes.len() as u32);
        e.pad_to(VT_HEADER_BYTES);
        for (i, v) in self.volumes.iter().enumerate() {
            e.u32(v.id).name(&v.name).u64(v.size_bytes);
            e.u8(match v.provisioning {
                Provisioning::Thick => 0,
                Provisioning::Thin => 1,
            });
            e.u16(v.home_pool.0).u64(v.home_base_chunk);
            e.u16(v.journal_pool.0)
                .u64(v.journal_first_chunk)
                .u32(v.journal_chunks);
            encode_placement(&mut e, &v.placement);
            e.u16(v.fast_pool.map_or(u16::MAX, |p| p.0));
            crate::jobs::migrate::params::encode_job(
                &mut e,
                v.migration.as_ref(),
                v.migration_base_chunk,
            );
            e.pad_to(VT_HEADER_BYTES + (i + 1) * VT_ENTRY_BYTES - 1);
            e.u8(u8::from(v.deleted));
        }
        for (i, l) in self.loans.iter().enumerate() {
            l.encode(&mut e);
            e.pad_to(self.loans_at() + (i + 1) * VT_LOAN_BYTES);
        }
        // The count goes into the header's padding, zero in tables written before.
        let n = self.loans.len() as u32;
        e.buf[VT_LOANS_AT..VT_LOANS_AT + 4].copy_from_slice(&n.to_le_bytes());
        e.seal(VOLTAB_SLOT_BYTES as usize)
    }

    fn loans_at(&self) -> usize {
        VT_HEADER_BYTES + self.volumes.len() * VT_ENTRY_BYTES
    }

    /// Whether the table fits its slot (each volume entry and each loan; the checksum).
    pub fn fits(&self) -> bool {
        self.loans_at() + self.loans.len() * VT_LOAN_BYTES + 4 <= VOLTAB_SLOT_BYTES as usize
    }

    pub fn decode(buf: &[u8]) -> Option<VolumeTable> {
        if buf.len() < VOLTAB_SLOT_BYTES as usize
            || &buf[..8] != VT_MAGIC
            || !sealed_ok(buf, VOLTAB_SLOT_BYTES as usize)
        {
            return None;
        }
        let mut d = Dec::new(buf);
        d.skip(8)?;
        if d.u32()? != FORMAT_VERSION {
            return None;
        }
        let generation = d.u64()?;
        let count = d.u32()? as usize;
        if count > (VOLTAB_SLOT_BYTES as usize - VT_HEADER_BYTES) / VT_ENTRY_BYTES {
            return None;
        }
        let mut volumes = Vec::with_capacity(count);
        for i in 0..count {
            let mut d = Dec::new(buf.get(VT_HEADER_BYTES + i * VT_ENTRY_BYTES..)?);
            let id = d.u32()?;
            let name = d.name()?;
            let size_bytes = d.u64()?;
            let provisioning = match d.u8()? {
                0 => Provisioning::Thick,
                _ => Provisioning::Thin,
            };
            let home_pool = PoolId(d.u16()?);
            let home_base_chunk = d.u64()?;
            let journal_pool = PoolId(d.u16()?);
            let journal_first_chunk = d.u64()?;
            let journal_chunks = d.u32()?;
            let placement = decode_placement(&mut d)?;
            let fast_pool = match d.u16()? {
                u16::MAX => None,
                p => Some(PoolId(p)),
            };
            let (migration, migration_base_chunk) =
                crate::jobs::migrate::params::decode_job(&mut d)?;
            let deleted = *buf.get(VT_HEADER_BYTES + (i + 1) * VT_ENTRY_BYTES - 1)? != 0;
            volumes.push(VolumeRecord {
                deleted,
                migration,
                migration_base_chunk,
                fast_pool,
                id,
                name,
                size_bytes,
                provisioning,
                placement,
                home_pool,
                home_base_chunk,
                journal_pool,
                journal_first_chunk,
                journal_chunks,
            });
        }
        let loans_at = VT_HEADER_BYTES + count * VT_ENTRY_BYTES;
        let n_loans = u32::from_le_bytes(buf.get(VT_LOANS_AT..VT_LOANS_AT + 4)?.try_into().ok()?);
        let n_loans = n_loans as usize;
        if loans_at + n_loans.checked_mul(VT_LOAN_BYTES)? + 4 > VOLTAB_SLOT_BYTES as usize {
            return None;
        }
        let mut loans = Vec::with_capacity(n_loans);
        for i in 0..n_loans {
            let mut d = Dec::new(buf.get(loans_at + i * VT_LOAN_BYTES..)?);
            loans.push(LoanRecord::decode(&mut d)?);
        }
        Some(VolumeTable {
            generation,
            volumes,
            loans,
        })
    }
}

/// Where a volume's state was last checkpointed and where journal replay starts.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct JournalHeader {
    pub volume_id: u32,
    /// Incremented on every header write; the newer valid slot wins.
    pub generation: u64,
    /// Incremented at every mount; stamped into journal blocks so stale blocks from an
    /// earlier mount never chain onto new ones.
    pub mount_generation: u64,
    /// First chunk of the checkpoint chain, if any.
    pub checkpoint: Option<(PoolId, u64)>,
    /// Records with sequence numbers up to this are in the checkpoint.
    pub checkpoint_seq: u64,
    /// Block sequence at which the current mount generation's blocks begin (the ring
    /// head when this generation mounted). Blocks from there on must carry
    /// `mount_generation`: a block an earlier mount did not replay (torn, say) is dead,
    /// even if a later torn write at its slot happens to complete it.
    pub mount_block_seq: u64,
    /// Sequence number that block must carry.
    pub replay_block_seq: u64,
    /// CRC the first replayed block must name as its predecessor.
    pub replay_prev_crc: u32,
    /// Written by the last checkpoint of an orderly stop, once every acknowledged write
    /// of the volume was durable (`stopmark.rs`); every mount writes its header without
    /// it, so after a crash it is false. A header of an earlier format (the byte was
    /// padding, 0) reads as not clean: the cautious answer.
    pub stopped_clean: bool,
}

impl JournalHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::with_capacity(BLOCK_BYTES as usize);
        e.bytes(JH_MAGIC)
            .u32(FORMAT_VERSION)
            .u32(self.volume_id)
            .u64(self.generation)
            .u64(self.mount_generation);
        match self.checkpoint {
            Some((pool, chunk)) => e.u8(1).u16(pool.0).u64(chunk),
            None => e.u8(0).u16(0).u64(0),
        };
        e.u64(self.checkpoint_seq)
            .u64(self.mount_block_seq)
            .u64(self.replay_block_seq)
            .u32(self.replay_prev_crc)
            .u8(u8::from(self.stopped_clean));
        e.seal(BLOCK_BYTES as usize)
    }

    pub fn decode(buf: &[u8]) -> Option<JournalHeader> {
        if buf.len() < BLOCK_BYTES as usize
            || &buf[..8] != JH_MAGIC
            || !sealed_ok(buf, BLOCK_BYTES as usize)
        {
            return None;
        }
        let mut d = Dec::new(buf);
        d.skip(8)?;
        if d.u32()? != FORMAT_VERSION {
            return None;
        }
        let volume_id = d.u32()?;
        let generation = d.u64()?;
        let mount_generation = d.u64()?;
        let has = d.u8()?;
        let pool = PoolId(d.u16()?);
        let chunk = d.u64()?;
        Some(JournalHeader {
            volume_id,
            generation,
            mount_generation,
            checkpoint: (has == 1).then_some((pool, chunk)),
            checkpoint_seq: d.u64()?,
            mount_block_seq: d.u64()?,
            replay_block_seq: d.u64()?,
            replay_prev_crc: d.u32()?,
            // Any other value than 1 (a later format's flags, say) is not a clean stop.
            stopped_clean: d.u8()? == 1,
        })
    }
}

// The loan records of the volume table (issue 18; the protocol is in `loan.rs`).

/// Which side of a loan a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoanKind {
    /// This shard gave the run (its own chunks) to `peer`.
    Lent,
    /// This shard holds the run of `peer`'s chunks.
    Borrowed,
}

/// One loan as the volume table records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoanRecord {
    pub kind: LoanKind,
    pub pool: PoolId,
    /// The borrower of a `Lent` record, the donor of a `Borrowed` one.
    pub peer: u16,
    /// The run in the donor's slice: its first chunk and length.
    pub first_chunk: u64,
    pub chunks: u64,
}

impl LoanRecord {
    pub(crate) fn encode(&self, e: &mut Enc) {
        e.u8(match self.kind {
            LoanKind::Lent => 1,
            LoanKind::Borrowed => 2,
        })
        .u16(self.pool.0)
        .u16(self.peer)
        .u64(self.first_chunk)
        .u64(self.chunks);
    }

    pub(crate) fn decode(d: &mut Dec) -> Option<LoanRecord> {
        let kind = match d.u8()? {
            1 => LoanKind::Lent,
            2 => LoanKind::Borrowed,
            _ => return None,
        };
        let r = LoanRecord {
            kind,
            pool: PoolId(d.u16()?),
            peer: d.u16()?,
            first_chunk: d.u64()?,
            chunks: d.u64()?,
        };
        (r.chunks > 0 && r.first_chunk.checked_add(r.chunks).is_some()).then_some(r)
    }

    /// The same loan as the other shard records it.
    pub fn mirror(&self, me: u16) -> LoanRecord {
        LoanRecord {
            kind: match self.kind {
                LoanKind::Lent => LoanKind::Borrowed,
                LoanKind::Borrowed => LoanKind::Lent,
            },
            peer: me,
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `superblock` fuzz target: a checksummed superblock naming a chunk size
    /// of 0 decoded, and the first use of its geometry divided by zero.
    #[test]
    fn a_superblock_with_a_bad_chunk_size_is_refused() {
        let sb = Superblock {
            system_uuid: [1; 16],
            pool_index: 0,
            pool_count: 1,
            name: "ssd".into(),
            medium: Medium::Ssd,
            capacity_bytes: 64 << 20,
            chunk_bytes: 1 << 20,
            meta_pool: 0,
            complete: true,
            shard: Default::default(),
        };
        let good = sb.encode();
        assert_eq!(Superblock::decode(&good), Ok(sb));
        // chunk_bytes follows magic, version, uuid, indexes, name, medium and capacity.
        let at = 8 + 4 + 16 + 2 + 2 + 64 + 1 + 8;
        for bad_chunk in [0u64, 3000, 512] {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&bad_chunk.to_le_bytes());
            let n = BLOCK_BYTES as usize;
            let crc = crc32c::crc32c(&b[..n - 4]);
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
            let e = Superblock::decode(&b).unwrap_err();
            assert!(e.contains("chunk size"), "{bad_chunk}: {e}");
        }
    }

    #[test]
    fn superblock_roundtrip_and_corruption() {
        let sb = Superblock {
            system_uuid: [7; 16],
            pool_index: 1,
            pool_count: 2,
            name: "hdd".into(),
            medium: Medium::Hdd,
            capacity_bytes: 8 << 30,
            chunk_bytes: 1 << 20,
            meta_pool: 0,
            complete: true,
            shard: crate::shard::id::ShardId { index: 2, count: 3 },
        };
        let mut b = sb.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        b[40] ^= 1;
        assert!(Superblock::decode(&b).unwrap_err().contains("checksum"));
        assert!(
            Superblock::decode(&[0u8; 4096])
                .unwrap_err()
                .contains("magic")
        );
        assert!(Superblock::decode(&[0u8; 10]).is_err());
    }

    /// Superblocks written before sharding carry zeros where the shard fields are now:
    /// they read as the one shard of an unsharded system.
    #[test]
    fn a_superblock_from_before_sharding_reads_as_one_shard() {
        let sb = Superblock {
            system_uuid: [3; 16],
            pool_index: 0,
            pool_count: 1,
            name: "ssd".into(),
            medium: Medium::Ssd,
            capacity_bytes: 64 << 20,
            chunk_bytes: 1 << 20,
            meta_pool: 0,
            complete: true,
            shard: crate::shard::id::ShardId { index: 1, count: 2 },
        };
        let mut b = sb.encode();
        // The shard fields follow `complete`; zero them as an old build left them.
        let at = 8 + 4 + 16 + 2 + 2 + 64 + 1 + 8 * 4 + 2 + 1;
        assert_eq!(&b[at..at + 4], &[1, 0, 2, 0]);
        b[at..at + 4].fill(0);
        let n = BLOCK_BYTES as usize;
        let crc = crc32c::crc32c(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        let old = Superblock::decode(&b).unwrap();
        assert_eq!(old.shard, crate::shard::id::ShardId { index: 0, count: 1 });
    }

    #[test]
    fn volume_table_roundtrip() {
        let t = VolumeTable {
            generation: 3,
            volumes: (0..5)
                .map(|i| VolumeRecord {
                    id: i,
                    name: format!("vm{i}"),
                    size_bytes: (i as u64 + 1) << 30,
                    provisioning: if i % 2 == 0 {
                        Provisioning::Thin
                    } else {
                        Provisioning::Thick
                    },
                    placement: if i % 2 == 0 {
                        Placement::Hot {
                            fast_budget_bytes: 123 << 20,
                            priority: 3,
                        }
                    } else {
                        Placement::Split { fast_percent: 40 }
                    },
                    home_pool: PoolId(i as u16 % 2),
                    fast_pool: Some(PoolId(7)),
                    home_base_chunk: i as u64 * 100,
                    journal_pool: PoolId(0),
                    journal_first_chunk: 5 + i as u64,
                    journal_chunks: 4,
                    // A running migration job is recorded with its parameters.
                    migration: (i == 2 || i == 1).then(|| {
                        crate::jobs::migrate::params::MigrationParams {
                            scheme: crate::jobs::migrate::params::SchemeChoice::Fixed(
                                crate::jobs::migrate::params::Scheme::Slr,
                            ),
                            gamma: 0.3,
                            ..crate::jobs::migrate::params::MigrationParams::new(PoolId(1))
                        }
                    }),
                    // A thick volume's job also records its new home region.
                    migration_base_chunk: (i == 1).then_some(4242),
                    // A tombstone keeps its flag (the entry's last byte).
                    deleted: i == 3,
                })
                .collect(),
            loans: Vec::new(),
        };
        let b = t.encode();
        assert_eq!(b.len(), VOLTAB_SLOT_BYTES as usize);
        assert_eq!(VolumeTable::decode(&b).unwrap(), t);
        let mut c = b.clone();
        c[100] ^= 0x10;
        assert!(VolumeTable::decode(&c).is_none());
        // Loans follow the entries, counted in what was header padding: a table
        // without any (all tables before loans) encodes exactly as before.
        assert_eq!(&b[24..28], &[0, 0, 0, 0]);
        let mut with = t.clone();
        with.loans = vec![
            LoanRecord {
                kind: LoanKind::Lent,
                pool: PoolId(1),
                peer: 2,
                first_chunk: 700,
                chunks: 33,
            },
            LoanRecord {
                kind: LoanKind::Borrowed,
                pool: PoolId(0),
                peer: 0,
                first_chunk: 5,
                chunks: 1,
            },
        ];
        assert!(with.fits());
        let wb = with.encode();
        assert_eq!(VolumeTable::decode(&wb).unwrap(), with);
        assert_eq!(&wb[..24], &b[..24]);
        // A loan count that runs past the slot is refused, not read past.
        let mut bad = wb.clone();
        bad[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let n = bad.len();
        let crc = crc32c::crc32c(&bad[..n - 4]);
        bad[n - 4..].copy_from_slice(&crc.to_le_bytes());
        assert!(VolumeTable::decode(&bad).is_none());
    }

    #[test]
    fn journal_header_roundtrip() {
        let h = JournalHeader {
            volume_id: 4,
            generation: 9,
            mount_generation: 2,
            checkpoint: Some((PoolId(1), 77)),
            checkpoint_seq: 1000,
            mount_block_seq: 50,
            replay_block_seq: 55,
            replay_prev_crc: 0xdead_beef,
            stopped_clean: false,
        };
        assert_eq!(JournalHeader::decode(&h.encode()).unwrap(), h);
        let none = JournalHeader {
            checkpoint: None,
            ..h.clone()
        };
        assert_eq!(JournalHeader::decode(&none.encode()).unwrap(), none);
        let clean = JournalHeader {
            stopped_clean: true,
            ..h
        };
        assert_eq!(JournalHeader::decode(&clean.encode()).unwrap(), clean);
    }

    /// A header written before the clean-stop marker existed (the byte after
    /// `replay_prev_crc` was zero padding) reads as not clean; only 1 reads as clean.
    #[test]
    fn journal_header_clean_stop_byte_reads_cautiously() {
        let h = JournalHeader {
            volume_id: 1,
            replay_prev_crc: 7,
            stopped_clean: true,
            ..Default::default()
        };
        let img = h.encode();
        // The marker is the byte after the fixed fields: 8 magic, 4 version, 4 id,
        // 8 + 8 generations, 1 + 2 + 8 checkpoint, 8 + 8 + 8 sequences, 4 CRC.
        let at = 8 + 4 + 4 + 8 + 8 + 11 + 24 + 4;
        assert_eq!(img[at], 1);
        let reseal = |v: u8| {
            let mut b = img.clone();
            b[at] = v;
            let n = b.len();
            let crc = crc32c::crc32c(&b[..n - 4]);
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
            JournalHeader::decode(&b).unwrap()
        };
        assert!(!reseal(0).stopped_clean);
        assert!(!reseal(2).stopped_clean);
        assert!(reseal(1).stopped_clean);
    }
}
