//! Named device presets.
//!
//! Each parameter says where it comes from: a datasheet or paper ("spec", "paper"), or
//! "est." for an estimate. Parameters marked "fit" were tuned so that `tiervisor
//! calibrate` reproduces the papers' measurements (seed 000 section 3, seed 004 Table 1);
//! `docs/MODELS.md` lists the resulting model-vs-paper figures.

use crate::hdd::HddParams;
use crate::ssd::{FlushMode, FtlKind, Precondition, SsdParams};
use crate::units::{GIB, KIB, MIB, NS_PER_MS, NS_PER_US};
use crate::{DeviceKind, SECTOR_BYTES};

const MB: u64 = 1_000_000;
const GB: u64 = 1_000_000_000;

/// A named device configuration.
#[derive(Clone, Debug)]
pub enum Preset {
    Hdd {
        name: &'static str,
        description: &'static str,
        params: HddParams,
    },
    Ssd {
        name: &'static str,
        description: &'static str,
        params: SsdParams,
    },
}

impl Preset {
    pub fn name(&self) -> &'static str {
        match self {
            Preset::Hdd { name, .. } | Preset::Ssd { name, .. } => name,
        }
    }
    pub fn description(&self) -> &'static str {
        match self {
            Preset::Hdd { description, .. } | Preset::Ssd { description, .. } => description,
        }
    }
    pub fn kind(&self) -> DeviceKind {
        match self {
            Preset::Hdd { .. } => DeviceKind::Hdd,
            Preset::Ssd { .. } => DeviceKind::Ssd,
        }
    }
    pub fn capacity_bytes(&self) -> u64 {
        match self {
            Preset::Hdd { params, .. } => params.capacity_bytes,
            Preset::Ssd { params, .. } => params.capacity_bytes,
        }
    }
}

fn hitachi_7k1000c() -> HddParams {
    HddParams {
        capacity_bytes: 1_000_204_886_016, // spec: 1,953,525,168 sectors
        drive_bytes: 1_000_204_886_016,
        rpm: 7200,                                      // spec
        surfaces: 4,                                    // est.: two 500 GB platters
        zones: 24,                                      // est.
        media_outer_bytes_per_sec: 138 * MB,            // est. from reviews: ~138 MB/s outer
        media_inner_bytes_per_sec: 70 * MB,             // est.: ~70 MB/s inner
        seek_track_to_track_ns: NS_PER_MS,              // est.
        seek_avg_ns: 8_200 * NS_PER_US,                 // spec: 8.2 ms average (read)
        seek_full_ns: 15 * NS_PER_MS,                   // est.
        write_settle_ns: 300 * NS_PER_US,               // est.
        head_switch_ns: 800 * NS_PER_US,                // est.
        command_overhead_ns: 600 * NS_PER_US, // fit: seed 000 sequential 4 KB ratios (QD1 through Xen blktap)
        interface_bytes_per_sec: 300 * MB,    // spec: SATA 3 Gb/s
        cache_bytes: 32 * MIB,                // spec: 32 MB buffer
        cache_segments: 16,                   // est.
        readahead_bytes: 1024 * KIB,          // est.
        write_cache: true,                    // spec default: WCE on
        write_cache_bytes: 16 * MIB,          // est.: half the buffer
        write_cache_max_entries: 32,          // est.
        queue_depth: 32,                      // spec: SATA NCQ, 32 commands
        queue_age_limit_ns: crate::queue::AGE_LIMIT_NS, // est.: see crate::queue
    }
}

fn cheetah_15k4() -> HddParams {
    HddParams {
        capacity_bytes: 73_400 * MB, // spec / paper: 73.4 GB formatted
        drive_bytes: 73_400 * MB,
        rpm: 15_000,                             // spec, paper (4 ms rotation)
        surfaces: 4,                             // paper
        zones: 16,                               // est.
        media_outer_bytes_per_sec: 112 * MB, // fit: 50,864 tracks per surface (paper); spec sustained 96 MB/s
        media_inner_bytes_per_sec: 68 * MB,  // fit: as outer; spec sustained 58 MB/s
        seek_track_to_track_ns: 200 * NS_PER_US, // spec: 0.2 ms read
        seek_avg_ns: 3_500 * NS_PER_US,      // spec: 3.5 ms average read
        seek_full_ns: 7_400 * NS_PER_US,     // spec: 7.4 ms full stroke read (est.)
        write_settle_ns: 400 * NS_PER_US,    // spec: write seeks ~0.4-0.5 ms longer
        head_switch_ns: 300 * NS_PER_US,     // est.
        command_overhead_ns: 250 * NS_PER_US, // fit: seed 003 cache hits at 250 us and its seek line
        interface_bytes_per_sec: 320 * MB,    // spec: Ultra320 SCSI
        cache_bytes: 7_077 * KIB,             // paper: 7,077 KB available for caching
        cache_segments: 64,                   // paper: 221 sectors per segment
        readahead_bytes: 64 * SECTOR_BYTES,   // paper: 64-sector prefetch
        write_cache: false,                   // est.: SCSI drives commonly ship with WCE off
        write_cache_bytes: 0,
        write_cache_max_entries: 0,
        // spec: the drive has TCQ; paper: seed 003 disabled it for every test (section 5).
        queue_depth: 1,
        queue_age_limit_ns: crate::queue::AGE_LIMIT_NS,
    }
}

fn intel_320_160g() -> SsdParams {
    SsdParams {
        capacity_bytes: 160 * GB,             // spec
        over_provisioning: 0.07,              // est.: GB vs GiB spare area
        page_bytes: 4 * KIB,                  // est.: 4 KiB mapping unit
        pages_per_block: 256,                 // est.
        channels: 10,                         // spec: 10-channel controller
        dies_per_channel: 4,                  // est.
        read_ns: 40 * NS_PER_US,              // est.: 25 nm MLC
        program_ns: 1_000 * NS_PER_US,        // fit: 165 MB/s sequential write (spec) over 40 dies
        erase_ns: 3 * NS_PER_MS,              // est.
        channel_bytes_per_sec: 200 * MB,      // est.
        interface_bytes_per_sec: 300 * MB,    // spec: SATA 3 Gb/s (270 MB/s reads)
        command_overhead_ns: 120 * NS_PER_US, // fit: seed 000 4 KB ratios (QD1 through Xen blktap)
        controller_read_iops: 39_500, // spec: 4 KB random reads, QD32 (Intel 320 product specification)
        controller_write_iops: 21_000, // spec: 4 KB random writes, QD32, 160 GB model
        write_buffer_bytes: MIB,      // est.
        write_back: false,
        flush: FlushMode::All,
        ftl: FtlKind::Page {
            map_cache_entries: 0,
        }, // est.: map held in DRAM
        gc_free_blocks_low: 2,
        precondition: Precondition::Sequential,
    }
}

fn intel_x25m_80g() -> SsdParams {
    SsdParams {
        capacity_bytes: 80 * GB,             // spec
        over_provisioning: 0.07,             // est.
        page_bytes: 4 * KIB,                 // spec: 4 KB NAND pages (50 nm MLC)
        pages_per_block: 128,                // spec: 512 KB blocks
        channels: 10,                        // spec
        dies_per_channel: 2,                 // est.
        read_ns: 50 * NS_PER_US,             // est.
        program_ns: 1_100 * NS_PER_US,       // fit: 70 MB/s sequential write (spec) over 20 dies
        erase_ns: 2 * NS_PER_MS,             // est.
        channel_bytes_per_sec: 200 * MB,     // est.
        interface_bytes_per_sec: 300 * MB,   // spec: SATA 3 Gb/s (250 MB/s reads)
        command_overhead_ns: 60 * NS_PER_US, // est.
        controller_read_iops: 35_000, // spec: 4 KB random reads, QD32 (X25-M product specification, both generations)
        controller_write_iops: 3_300, // spec: 4 KB random writes, first-generation (50 nm) 80 GB X25-M; the 34 nm G2 is quoted at 6,600 (fit: seed 002's log-off bar, about 9 MB/s, needs the G1 figure)
        write_buffer_bytes: 256 * KIB, // est.: the controller's on-chip SRAM buffers user data (the DRAM holds the map)
        write_back: false,
        flush: FlushMode::All,
        ftl: FtlKind::Page {
            map_cache_entries: 4 << 20,
        }, // est.: 16 MB DRAM caches 4M entries
        gc_free_blocks_low: 2,
        precondition: Precondition::Sequential,
    }
}

fn mtron_msd_sata3035() -> SsdParams {
    SsdParams {
        capacity_bytes: 32 * GB,             // spec: MSD-SATA3035-032
        over_provisioning: 0.0,              // BAST sizes its own spare blocks
        page_bytes: 2 * KIB,                 // spec: SLC large-block NAND
        pages_per_block: 64,                 // spec: 128 KiB blocks
        channels: 4,                         // est.
        dies_per_channel: 2,                 // est.
        read_ns: 25 * NS_PER_US,             // spec (SLC)
        program_ns: 200 * NS_PER_US,         // spec (SLC); 8 dies give ~80 MB/s sequential write
        erase_ns: 1_500 * NS_PER_US,         // spec (SLC)
        channel_bytes_per_sec: 40 * MB,      // spec: 25 ns/byte asynchronous NAND bus
        interface_bytes_per_sec: 150 * MB,   // spec: SATA 1.5 Gb/s
        command_overhead_ns: 60 * NS_PER_US, // est.
        controller_read_iops: 0,             // no datasheet IOPS figure found; unlimited
        controller_write_iops: 0,
        write_buffer_bytes: 0, // est.: writes complete when programmed
        write_back: false,
        flush: FlushMode::All,
        ftl: FtlKind::Bast { log_blocks: 16 }, // est.: few log blocks, slow small random writes
        gc_free_blocks_low: 2,
        precondition: Precondition::Sequential,
    }
}

fn intel_520() -> SsdParams {
    SsdParams {
        capacity_bytes: 240 * GB,        // est.: seed 004 does not give the capacity
        over_provisioning: 0.07,         // est.
        page_bytes: 4 * KIB,             // est.
        pages_per_block: 256,            // est.
        channels: 8,                     // spec: SandForce SF-2281, 8 channels
        dies_per_channel: 4,             // est.
        read_ns: 50 * NS_PER_US,         // est.
        program_ns: 400 * NS_PER_US,     // fit: seed 004 Table 1 (incompressible ~320 MB/s)
        erase_ns: 3 * NS_PER_MS,         // est.
        channel_bytes_per_sec: 200 * MB, // est.
        interface_bytes_per_sec: 600 * MB, // spec: SATA 6 Gb/s
        command_overhead_ns: 20 * NS_PER_US, // est. (the Table 4 IOPS are the controller limit's)
        controller_read_iops: 50_000,    // paper: seed 004 Table 4, 4 KB random reads
        controller_write_iops: 60_000,   // paper: seed 004 Table 4, 4 KB random writes
        write_buffer_bytes: MIB,         // est.
        write_back: false,
        flush: FlushMode::All,
        ftl: FtlKind::Page {
            map_cache_entries: 0,
        },
        gc_free_blocks_low: 2,
        precondition: Precondition::Sequential,
    }
}

fn openssd_jasmine() -> SsdParams {
    SsdParams {
        capacity_bytes: 64 * GB,             // spec: 64 GB board
        over_provisioning: 0.07,             // est.
        page_bytes: 8 * KIB,                 // spec: 8 KB pages
        pages_per_block: 128,                // spec
        channels: 4,                         // spec: Indilinx Barefoot, 4 channels
        dies_per_channel: 8,                 // spec: 8 banks per channel
        read_ns: 60 * NS_PER_US,             // est.
        program_ns: 1_300 * NS_PER_US,       // est.: 35 nm MLC
        erase_ns: 2 * NS_PER_MS,             // est.
        channel_bytes_per_sec: 40 * MB,      // est.
        interface_bytes_per_sec: 300 * MB,   // spec: SATA 3 Gb/s
        command_overhead_ns: 80 * NS_PER_US, // est.
        controller_read_iops: 0,             // no datasheet IOPS figure for the board; unlimited
        controller_write_iops: 0,
        write_buffer_bytes: 16 * MIB, // est.: part of the 64 MB DRAM
        write_back: true, // paper: a DRAM write buffer with LRU eviction (section III-C)
        flush: FlushMode::All,
        ftl: FtlKind::Page {
            map_cache_entries: 0,
        }, // spec: 64 MB DRAM holds the page map
        gc_free_blocks_low: 2,
        precondition: Precondition::Sequential,
    }
}

/// All presets, in a fixed order.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset::Hdd {
            name: "hitachi-7k1000c",
            description: "Hitachi Deskstar 7K1000.C HDS721010CLA332, 7200 rpm, 1 TB (seed 000)",
            params: hitachi_7k1000c(),
        },
        Preset::Hdd {
            name: "cheetah-15k4",
            description: "Seagate Cheetah 15K.4 ST373454, 15000 rpm, 73 GB SCSI (seed 003)",
            params: cheetah_15k4(),
        },
        Preset::Ssd {
            name: "intel-320-160g",
            description: "Intel SSD 320 160 GB, 25 nm MLC, SATA 3 Gb/s (seed 000)",
            params: intel_320_160g(),
        },
        Preset::Ssd {
            name: "intel-x25m-80g",
            description: "Intel X25-M 80 GB, 50 nm MLC, page-mapped, map cached in 16 MB DRAM (seed 002)",
            params: intel_x25m_80g(),
        },
        Preset::Ssd {
            name: "mtron-msd-sata3035",
            description: "MTRON MSD-SATA3035 32 GB, SLC, hybrid log-block FTL, slow small random writes (seed 002)",
            params: mtron_msd_sata3035(),
        },
        Preset::Ssd {
            name: "intel-520",
            description: "Intel SSD 520 240 GB, MLC, SandForce, SATA 6 Gb/s (seed 004)",
            params: intel_520(),
        },
        Preset::Ssd {
            name: "openssd-jasmine",
            description: "OpenSSD Jasmine 64 GB, 64 MB DRAM, 8 KB pages (seed 001)",
            params: openssd_jasmine(),
        },
    ]
}

pub fn preset_names() -> Vec<&'static str> {
    presets().iter().map(|p| p.name()).collect()
}

/// Look a preset up by name.
pub fn preset(name: &str) -> Option<Preset> {
    presets().into_iter().find(|p| p.name() == name)
}

/// Gibibytes, for documentation of capacities.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}
