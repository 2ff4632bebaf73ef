//! The committed seeds (fuzz/seeds/TARGET) are what this file generates: valid encodings of
//! every on-disk structure and whole NBD sessions. `TV_WRITE_SEEDS=1 cargo test` rewrites
//! them (after a format change); without it the test fails if they are stale. Every seed
//! and every file in fuzz/regressions/TARGET (inputs that once crashed a target) is run
//! through its target again.

use std::path::{Path, PathBuf};

use tiervisor_engine::chunkmap::{ChunkLoc, ChunkMap};
use tiervisor_engine::extents::ExtentMap;
use tiervisor_engine::journal::checkpoint::{CkptChunkHeader, encode_state};
use tiervisor_engine::journal::{Block, Record};
use tiervisor_engine::layout::{JournalHeader, Superblock, VolumeRecord, VolumeTable};
use tiervisor_engine::overlay::Overlay;
use tiervisor_engine::{Medium, Placement, PoolId, Provisioning};

fn opt(o: u32, d: &[u8]) -> Vec<u8> {
    let mut b = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
    b.extend_from_slice(&o.to_be_bytes());
    b.extend_from_slice(&(d.len() as u32).to_be_bytes());
    b.extend_from_slice(d);
    b
}

fn req(flags: u16, cmd: u16, handle: u64, off: u64, len: u32) -> Vec<u8> {
    let mut b = 0x2560_9513u32.to_be_bytes().to_vec();
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// An extended request header (32 bytes, 64-bit length).
fn ereq(flags: u16, cmd: u16, handle: u64, off: u64, len: u64) -> Vec<u8> {
    let mut b = 0x21e4_1c71u32.to_be_bytes().to_vec();
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// The same with extended headers: the write's payload announced by
/// NBD_CMD_FLAG_PAYLOAD_LEN (32), 64-bit trims and block status, a refused payload.
fn extended_requests() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(ereq(0, 0, 1, 0, 4096)); // read
    b.extend(ereq(32 | 1, 1, 2, 4096, 8)); // write, FUA
    b.extend_from_slice(b"tvtvtvtv");
    b.extend(ereq(0, 3, 3, 0, 0)); // flush
    b.extend(ereq(0, 4, 4, 1 << 20, 5 << 30)); // trim beyond 4 GiB (past the end)
    b.extend(ereq(0, 5, 5, 0, 65536)); // cache
    b.extend(ereq(2, 6, 6, 0, 4096)); // write zeroes, no hole
    b.extend(ereq(8, 7, 7, 0, 1 << 30)); // block status, one run
    b.extend(ereq(0, 7, 8, 4096, 1 << 20)); // block status
    b.extend(ereq(32, 3, 9, 0, 4)); // a payload FLUSH does not take
    b.extend_from_slice(b"junk");
    b.extend(ereq(0, 1, 10, 0, 4)); // write without PAYLOAD_LEN (as QEMU 10 sends it)
    b.extend_from_slice(b"qemu");
    b.extend(ereq(0, 0, 11, 0, 1 << 33)); // a read too long
    b.extend(ereq(0, 2, 12, 0, 0)); // disconnect
    b
}

/// A few requests of every kind, one write with its payload.
fn requests() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(req(0, 0, 1, 0, 4096)); // read
    b.extend(req(1, 1, 2, 4096, 8)); // write, FUA
    b.extend_from_slice(b"tvtvtvtv");
    b.extend(req(0, 3, 3, 0, 0)); // flush
    b.extend(req(0, 4, 4, 1 << 20, 1 << 20)); // trim
    b.extend(req(0, 5, 5, 0, 65536)); // cache
    b.extend(req(2, 6, 6, 0, 4096)); // write zeroes, no hole
    b.extend(req(8, 7, 7, 0, 1 << 30)); // block status, one run
    b.extend(req(0, 7, 8, 4096, 1 << 20)); // block status
    b.extend(req(0, 2, 9, 0, 0)); // disconnect
    b
}

fn nbd_seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let name = |n: &str| {
        let mut d = (n.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(n.as_bytes());
        d
    };
    let mut meta = name("vm1");
    meta.extend_from_slice(&1u32.to_be_bytes());
    meta.extend(name("base:allocation"));
    let mut list_meta = name("vm1");
    list_meta.extend_from_slice(&0u32.to_be_bytes());
    let mut info = name("ro");
    info.extend_from_slice(&3u16.to_be_bytes());
    info.extend_from_slice(&[0, 1, 0, 2, 0, 3]);
    let mut go = name("vm1");
    go.extend_from_slice(&0u16.to_be_bytes());
    let mut session = vec![0u8, 0, 0, 0, 3];
    for (o, d) in [
        (3, &[][..]),
        (8, &[]),
        (9, &list_meta),
        (10, &meta),
        (6, &info),
        (5, &[]),
        (7, &go),
    ] {
        session.extend(opt(o, d));
    }
    session.extend(requests());
    let mut oldstyle = vec![3u8, 0, 0, 0, 1];
    oldstyle.extend(opt(1, b"ro"));
    oldstyle.extend(req(0, 1, 1, 0, 4));
    oldstyle.extend_from_slice(b"nope");
    // TLS required (first byte 5: pieces of 36 bytes, policy 5 % 3 = require): refused LIST,
    // STARTTLS ending the first piece, then the session as TLS would deliver it.
    let mut starttls = vec![5u8, 0, 0, 0, 3];
    starttls.extend(opt(3, &[]));
    starttls.extend(opt(5, &[]));
    starttls.extend(opt(7, &go));
    starttls.extend(requests());
    // Extended headers: refused with data, accepted, accepted again as an error,
    // structured replies refused after them, contexts, GO, then 32-byte requests.
    let mut extended = vec![0u8, 0, 0, 0, 3];
    for (o, d) in [
        (11, &b"x"[..]),
        (11, &[]),
        (11, &[]),
        (8, &[]),
        (10, &meta),
        (7, &go),
    ] {
        extended.extend(opt(o, d));
    }
    extended.extend(extended_requests());
    let mut reqs = vec![0u8];
    reqs.extend(requests());
    // First byte's top bit: extended headers (0x80 | 0: one-byte pieces).
    let mut ext_reqs = vec![0x80u8];
    ext_reqs.extend(extended_requests());
    vec![
        ("nbd_handshake", "session", session),
        ("nbd_handshake", "export_name", oldstyle),
        ("nbd_handshake", "starttls", starttls),
        ("nbd_handshake", "extended", extended),
        ("nbd_requests", "requests", reqs),
        ("nbd_requests", "extended", ext_reqs),
    ]
}

fn disk_seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
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
        shard: Default::default(),
    };
    let vol = |id: u32, placement| VolumeRecord {
        id,
        name: format!("vm{id}"),
        size_bytes: 4 << 30,
        provisioning: if id == 1 {
            Provisioning::Thick
        } else {
            Provisioning::Thin
        },
        placement,
        home_pool: PoolId(1),
        fast_pool: Some(PoolId(0)),
        home_base_chunk: 12,
        journal_pool: PoolId(0),
        journal_first_chunk: 3,
        journal_chunks: 4,
        migration: None,
        migration_base_chunk: None,
        deleted: id == 3,
    };
    let vt = VolumeTable {
        generation: 5,
        volumes: vec![
            vol(1, Placement::Pinned),
            vol(2, Placement::Split { fast_percent: 50 }),
            vol(
                3,
                Placement::Hot {
                    fast_budget_bytes: 1 << 30,
                    priority: 3,
                },
            ),
        ],
        // A loan between shards (`engine::loan`), so the corpus covers the records.
        loans: vec![tiervisor_engine::loan::LoanRecord {
            kind: tiervisor_engine::loan::LoanKind::Lent,
            pool: PoolId(1),
            peer: 1,
            first_chunk: 40,
            chunks: 8,
        }],
    };
    let block = Block {
        volume_id: 2,
        block_seq: 9,
        mount_generation: 4,
        prev_crc: 0xdead_beef,
        first_record_seq: 100,
        records: vec![
            Record::Map {
                chunk: 3,
                entry: ChunkLoc::At(PoolId(1), 77).encode(),
            },
            Record::Overlay {
                start: 4096,
                end: 8192,
                value: Overlay::Log {
                    pool: PoolId(0),
                    dev_offset: 1 << 22,
                },
            },
            Record::Overlay {
                start: 10_000,
                end: 20_000,
                value: Overlay::Zero,
            },
            Record::OverlayClear {
                start: 4096,
                end: 6000,
            },
        ],
    };
    let jh = JournalHeader {
        volume_id: 2,
        generation: 8,
        mount_generation: 4,
        checkpoint: Some((PoolId(0), 19)),
        checkpoint_seq: 90,
        mount_block_seq: 7,
        replay_block_seq: 8,
        replay_prev_crc: 0x1234_5678,
        stopped_clean: true,
    };
    let mut map = ChunkMap::new(4, ChunkLoc::Unmapped);
    map.set(1, ChunkLoc::Home);
    map.set(2, ChunkLoc::At(PoolId(0), 5));
    let mut overlay = ExtentMap::new();
    overlay.insert(100, 600, Overlay::Zero);
    overlay.insert(
        1 << 20,
        (1 << 20) + 4096,
        Overlay::Log {
            pool: PoolId(1),
            dev_offset: 1 << 24,
        },
    );
    let state = encode_state(&map, &overlay);
    let mut ckpt = CkptChunkHeader {
        volume_id: 2,
        checkpoint_seq: 90,
        index: 0,
        next: Some((PoolId(0), 20)),
        payload_bytes: state.len() as u32,
        payload_crc: crc32c::crc32c(&state),
    }
    .encode();
    ckpt.extend_from_slice(&state);
    // The state target's form: map size in the first byte, the rest after the size field.
    let mut state_seed = vec![4u8];
    state_seed.extend_from_slice(&state[16..]);
    let with = |tag: u8, b: Vec<u8>| [vec![tag], b].concat();
    vec![
        ("superblock", "superblock", sb.encode()),
        ("volume_table", "three_volumes", vt.encode()),
        ("journal", "block", with(0, block.encode())),
        ("journal", "header", with(1, jh.encode())),
        ("checkpoint", "chunk", ckpt),
        ("checkpoint", "state", state_seed),
    ]
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn run(target: &str, data: &[u8]) {
    match target {
        "nbd_handshake" => tiervisor_fuzz::nbd_handshake(data),
        "nbd_requests" => tiervisor_fuzz::nbd_requests(data),
        "superblock" => tiervisor_fuzz::superblock(data),
        "volume_table" => tiervisor_fuzz::volume_table(data),
        "journal" => tiervisor_fuzz::journal(data),
        "checkpoint" => tiervisor_fuzz::checkpoint(data),
        "trace" => tiervisor_fuzz::trace(data),
        other => panic!("unknown target {other}"),
    }
}

#[test]
fn seeds_are_current_and_every_seed_and_regression_runs_clean() {
    let write = std::env::var_os("TV_WRITE_SEEDS").is_some();
    for (target, name, bytes) in nbd_seeds().into_iter().chain(disk_seeds()) {
        let p = dir().join("seeds").join(target).join(name);
        if write {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &bytes).unwrap();
        } else {
            let on_disk = std::fs::read(&p).unwrap_or_default();
            assert!(
                on_disk == bytes,
                "{} is stale: run TV_WRITE_SEEDS=1 cargo test in fuzz/",
                p.display()
            );
        }
        run(target, &bytes);
    }
    for sub in ["seeds", "regressions"] {
        let Ok(targets) = std::fs::read_dir(dir().join(sub)) else {
            continue;
        };
        for t in targets.flatten() {
            let target = t.file_name().to_string_lossy().to_string();
            for f in std::fs::read_dir(t.path()).unwrap().flatten() {
                run(&target, &std::fs::read(f.path()).unwrap());
            }
        }
    }
}

#[test]
fn the_sealed_decoders_accept_the_seeds() {
    // The targets' sealing must reach the parsers: a valid structure, re-sealed, decodes.
    use tiervisor_engine::layout::BLOCK_BYTES;
    for (target, _, bytes) in disk_seeds() {
        let ok = match target {
            "superblock" => Superblock::decode(&tiervisor_fuzz::sealed(
                &bytes,
                BLOCK_BYTES as usize,
                b"TVPOOL01",
            ))
            .is_ok(),
            "volume_table" => {
                VolumeTable::decode(&tiervisor_fuzz::sealed(&bytes, 64 << 10, b"TVVOLTAB"))
                    .is_some()
            }
            _ => true,
        };
        assert!(ok, "{target}: sealing does not reach the parser");
    }
}
