//! Trims and write-zeroes give the pool file's space back (issue 15): whole chunks freed
//! by a trim are punched once their unmap is durable, parts of chunks at once; a
//! write-zeroes with NBD_CMD_FLAG_NO_HOLE keeps its space, also on a filesystem without
//! `ZERO_RANGE` (tmpfs). On both I/O backends.
//!
//! Always one shard (`--threads 1`, whatever `TIERVISOR_TEST_THREADS` says): the pools and
//! filesystems here are sized to the byte for one engine's layout (a 16 MiB metadata pool
//! cut in two cannot hold its journals), and the assertions name offsets in the pool file.

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

/// One thin volume whose chunks all live in the hdd pool's file (metadata is on ssd).
const THIN: &str = r#"
chunk = "1m"
journal = "1m"
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "16m"
kind = "ssd"
[[pool]]
name = "hdd"
path = "hdd.pool"
size = "64m"
kind = "hdd"
[[volume]]
name = "vm1"
size = "32m"
pool = "hdd"
placement = "pinned"
"#;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// What the filesystem may add meanwhile (extent tree blocks when a range is split).
const SLACK: u64 = 64 * KIB;

/// Send one request with `flags` and return its NBD error.
fn request(s: &mut TcpStream, flags: u16, cmd: u16, off: u64, len: u64, data: &[u8]) -> u32 {
    let mut b = MAGIC.to_be_bytes().to_vec();
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&7u64.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&(len as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
    let (err, h) = read_reply(s);
    assert_eq!(h, 7);
    err
}

fn write(s: &mut TcpStream, off: u64, data: &[u8]) {
    assert_eq!(request(s, 0, 1, off, data.len() as u64, data), 0, "write");
}

fn flush(s: &mut TcpStream) {
    assert_eq!(request(s, 0, 3, 0, 0, &[]), 0, "flush");
}

fn trim(s: &mut TcpStream, off: u64, len: u64) {
    assert_eq!(request(s, 0, 4, off, len, &[]), 0, "trim");
}

fn write_zeroes(s: &mut TcpStream, off: u64, len: u64, flags: u16) {
    assert_eq!(request(s, flags, 6, off, len, &[]), 0, "write-zeroes");
}

fn read(s: &mut TcpStream, off: u64, len: u64) -> Vec<u8> {
    assert_eq!(request(s, 0, 0, off, len, &[]), 0, "read at {off}");
    let mut got = vec![0u8; len as usize];
    s.read_exact(&mut got).unwrap();
    got
}

/// Bytes the filesystem holds for the file.
fn allocated(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

/// Wait (up to 10 s: a freed chunk is discarded after the FLUSH that made its unmap
/// durable, not before the FLUSH's reply) until the file holds at most `max` bytes.
fn wait_allocated_at_most(p: &Path, max: u64, log: impl Fn() -> String) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = allocated(p);
        if a <= max {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "{} still holds {a} bytes, expected at most {max}; log:\n{}",
            p.display(),
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Not all zeros, so the filesystem cannot store it sparsely by itself.
fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i % 251) as u8 ^ seed) | 1).collect()
}

/// A server on a fresh directory with the thin configuration and I/O backend `io`.
fn start(d: &TempDir, io: &str) -> ServerProc {
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, THIN).unwrap();
    ServerProc::start(
        d.path(),
        &[
            "--threads",
            "1",
            "--config",
            conf.to_str().unwrap(),
            "--io",
            io,
        ],
    )
}

#[test]
fn a_trim_of_whole_chunks_shrinks_the_pool_file() {
    for io in ["uring", "threads"] {
        let d = TempDir::new(&format!("punch-whole-{io}"));
        let s = start(&d, io);
        let hdd = d.path().join("hdd.pool");
        let mut c = handshake(&s.addr, "vm1");
        let data = pattern(8 * MIB, 0x5A);
        write(&mut c, 0, &data);
        flush(&mut c);
        let full = allocated(&hdd);
        assert!(full >= 8 * MIB, "{io}: {full} bytes after writing 8 MiB");
        trim(&mut c, 0, 8 * MIB);
        flush(&mut c);
        let after = wait_allocated_at_most(&hdd, full - 8 * MIB + SLACK, || s.log());
        assert!(after < full, "{io}: {after} of {full}");
        assert!(read(&mut c, 0, 8 * MIB).iter().all(|&b| b == 0), "{io}");
        drop(c);
        assert_eq!(s.term(), Some(0), "{io}");
    }
}

#[test]
fn a_trim_of_part_of_a_chunk_punches_that_part() {
    for io in ["uring", "threads"] {
        let d = TempDir::new(&format!("punch-part-{io}"));
        let s = start(&d, io);
        let hdd = d.path().join("hdd.pool");
        let mut c = handshake(&s.addr, "vm1");
        let data = pattern(MIB, 0x33);
        write(&mut c, 4 * MIB, &data);
        flush(&mut c);
        let full = allocated(&hdd);
        // 512 KiB in the middle of the chunk: its page-aligned part goes back.
        let (off, len) = (4 * MIB + 128 * KIB, 512 * KIB);
        trim(&mut c, off, len);
        flush(&mut c);
        wait_allocated_at_most(&hdd, full - len + SLACK, || s.log());
        let got = read(&mut c, 4 * MIB, MIB);
        let (a, b) = ((128 * KIB) as usize, (640 * KIB) as usize);
        assert_eq!(got[..a], data[..a], "{io}: before the trim");
        assert!(got[a..b].iter().all(|&x| x == 0), "{io}: trimmed");
        assert_eq!(got[b..], data[b..], "{io}: after the trim");
        drop(c);
        // The rest of the chunk and the hole survive a restart.
        assert_eq!(s.term(), Some(0), "{io}");
        let conf = d.path().join("c.toml");
        let s = ServerProc::start_plain(
            d.path(),
            &["--threads", "1", "--config", conf.to_str().unwrap()],
        );
        let mut c = handshake(&s.addr, "vm1");
        assert_eq!(read(&mut c, 4 * MIB, MIB), got, "{io}: after a restart");
        drop(c);
        assert_eq!(s.term(), Some(0), "{io}");
    }
}

#[test]
fn write_zeroes_read_back_zeroes_and_punch_unless_no_hole() {
    for io in ["uring", "threads"] {
        let d = TempDir::new(&format!("punch-zeroes-{io}"));
        let s = start(&d, io);
        let hdd = d.path().join("hdd.pool");
        let mut c = handshake(&s.addr, "vm1");
        write(&mut c, 0, &pattern(2 * MIB, 0x77));
        flush(&mut c);
        let full = allocated(&hdd);
        // With NO_HOLE the range stays allocated.
        write_zeroes(&mut c, 256 * KIB, 256 * KIB, NBD_CMD_FLAG_NO_HOLE);
        flush(&mut c);
        assert!(read(&mut c, 256 * KIB, 256 * KIB).iter().all(|&b| b == 0));
        assert!(allocated(&hdd) >= full, "{io}: NO_HOLE gave space back");
        // Without it the range is punched (in the second chunk).
        write_zeroes(&mut c, MIB + 256 * KIB, 512 * KIB, 0);
        flush(&mut c);
        wait_allocated_at_most(&hdd, full - 512 * KIB + SLACK, || s.log());
        assert!(
            read(&mut c, MIB + 256 * KIB, 512 * KIB)
                .iter()
                .all(|&b| b == 0)
        );
        assert_ne!(
            read(&mut c, MIB, 4096),
            vec![0u8; 4096],
            "{io}: data before"
        );
        drop(c);
        assert_eq!(s.term(), Some(0), "{io}");
    }
}

/// Whether `dir`'s filesystem refuses `fallocate(ZERO_RANGE)` but can punch (tmpfs).
fn zero_range_refused_but_punch_works(dir: &Path) -> bool {
    use std::os::fd::AsRawFd as _;
    let probe = dir.join("probe");
    let Ok(f) = std::fs::File::create(&probe) else {
        return false;
    };
    let fd = f.as_raw_fd();
    // SAFETY: plain syscalls on an open descriptor.
    let (zero, punch) = unsafe {
        (
            libc::fallocate(fd, 0, 0, 1 << 20) == 0
                && libc::fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 0, 4096) != 0,
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                4096,
            ) == 0,
        )
    };
    let _ = std::fs::remove_file(&probe);
    zero && punch
}

/// On a filesystem without ZERO_RANGE (tmpfs, btrfs) a NO_HOLE write-zeroes fell back to
/// punching and gave the space back; it must punch and allocate again.
#[test]
fn write_zeroes_with_no_hole_keep_their_space_where_the_filesystem_cannot_zero_ranges() {
    let shm = Path::new("/dev/shm");
    if !zero_range_refused_but_punch_works(shm) {
        skip("/dev/shm is missing, or its filesystem can zero ranges or cannot punch");
        return;
    }
    for io in ["uring", "threads"] {
        let d = TempDir::new_in(shm, &format!("punch-nohole-{io}"));
        let s = start(&d, io);
        let hdd = d.path().join("hdd.pool");
        let mut c = handshake(&s.addr, "vm1");
        write(&mut c, 0, &pattern(2 * MIB, 0x42));
        flush(&mut c);
        let full = allocated(&hdd);
        write_zeroes(&mut c, 256 * KIB, 512 * KIB, NBD_CMD_FLAG_NO_HOLE);
        flush(&mut c);
        assert!(
            read(&mut c, 256 * KIB, 512 * KIB).iter().all(|&b| b == 0),
            "{io}"
        );
        assert_ne!(read(&mut c, 0, 4096), vec![0u8; 4096], "{io}: data before");
        let after = allocated(&hdd);
        assert!(
            after >= full,
            "{io}: NO_HOLE gave space back: {after} of {full} bytes"
        );
        drop(c);
        assert_eq!(s.term(), Some(0), "{io}");
    }
}
