//! The NBD features clients lean on, checked with libnbd's and QEMU's own tools:
//! `base:allocation` block status (nbdinfo --map, qemu-img convert, nbdcopy),
//! NBD_CMD_CACHE, read-only exports and export descriptions.

mod support;

use std::process::Command;

use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "256m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "4g"
kind = "hdd"

[[volume]]
name = "vm1"
size = "2g"
pool = "hdd"
provisioning = "thin"
description = "first test disk"

[[volume]]
name = "src"
size = "256m"
pool = "hdd"
provisioning = "thin"

[[volume]]
name = "dst"
size = "256m"
pool = "hdd"
provisioning = "thin"

[[volume]]
name = "ro"
size = "64m"
pool = "ssd"
provisioning = "thin"
read_only = true
description = "golden image"
"#;

fn start(d: &TempDir) -> ServerProc {
    let conf = d.path().join("nbd.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()])
}

/// `nbdinfo --map` as (offset, length, type) rows.
fn map(uri: &str) -> Vec<(u64, u64, u32)> {
    let out = run(Command::new("nbdinfo").args(["--map", uri]));
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect()
}

fn volume_read_bytes(d: &TempDir, name: &str) -> u64 {
    let st: serde_json::Value = serde_json::from_str(&run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path())))
    .unwrap();
    st["engine"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .map(|v| v["read"]["bytes"].as_u64().unwrap())
        .unwrap()
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[test]
fn nbdinfo_map_shows_holes_and_qemu_img_convert_reads_only_data() {
    if !have("nbdinfo") || !have("qemu-img") {
        return;
    }
    let d = TempDir::new("map");
    let s = start(&d);
    let uri = s.uri("vm1");
    assert_eq!(
        map(&uri),
        vec![(0, 2 * GIB, 3)],
        "a fresh thin volume is one hole"
    );
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", &format!("write -P 0x5a {GIB} {MIB}")])
        .arg(&uri));
    assert_eq!(
        map(&uri),
        vec![(0, GIB, 3), (GIB, MIB, 0), (GIB + MIB, GIB - MIB, 3)],
        "exactly the written MiB is data"
    );
    // qemu-img asks for block status and reads only the data run.
    let before = volume_read_bytes(&d, "vm1");
    let img = d.path().join("copy.raw");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&img));
    let read = volume_read_bytes(&d, "vm1") - before;
    assert!(
        (MIB..=2 * MIB).contains(&read),
        "qemu-img convert read {read} bytes of a volume holding 1 MiB of data"
    );
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&img)
        .arg(&uri));
    assert!(out.contains("Images are identical"), "{out}");
}

#[test]
fn nbdcopy_with_four_connections_copies_a_volume() {
    if !have("nbdcopy") || !have("qemu-io") {
        return;
    }
    let d = TempDir::new("copy");
    let s = start(&d);
    // Data in a few places, one run crossing a chunk boundary; the rest holes.
    let img = d.path().join("random.raw");
    write_random_image(&img, 24 << 20);
    run(Command::new("qemu-img")
        .args(["dd", "-f", "raw", "-O", "raw", "bs=1M", "count=24"])
        .arg(format!("if={}", img.display()))
        .arg(format!("of={}", s.uri("src"))));
    run(Command::new("qemu-io")
        .args(["-f", "raw"])
        .args(["-c", "write -P 0x11 100000000 3000000"])
        .args(["-c", "write -P 0x22 200000000 4096"])
        .arg(s.uri("src")));
    // The destination starts with other data, so a copy that skipped a range would show.
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0x77 150000000 8000000"])
        .arg(s.uri("dst")));
    run(Command::new("nbdcopy")
        .args(["--connections=4", "--flush"])
        .arg(s.uri("src"))
        .arg(s.uri("dst")));
    let sum = |vol: &str| {
        let out = d.path().join(format!("{vol}.raw"));
        run(Command::new("nbdcopy").arg(s.uri(vol)).arg(&out));
        let o = run(Command::new("sha256sum").arg(&out));
        o.split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(sum("src"), sum("dst"));
    // And the destination's map shows holes where the source has them.
    let m = map(&s.uri("dst"));
    assert!(
        m.iter().any(|&(_, len, t)| t == 3 && len > 64 * MIB),
        "{m:?}"
    );
}

#[test]
fn a_read_only_export_advertises_itself_refuses_writes_and_caches() {
    if !have("nbdinfo") || !have("qemu-io") {
        return;
    }
    let d = TempDir::new("ro");
    let s = start(&d);
    let info: serde_json::Value = serde_json::from_str(&run(Command::new("nbdinfo")
        .args(["--json"])
        .arg(s.uri("ro"))))
    .unwrap();
    let e = &info["exports"][0];
    assert_eq!(e["is_read_only"], true, "{info}");
    assert_eq!(e["can_cache"], true, "{info}");
    assert_eq!(e["description"], "golden image", "{info}");
    assert!(
        info["exports"][0]["contexts"]
            .as_array()
            .is_some_and(|c| c.iter().any(|x| x == "base:allocation")),
        "{info}"
    );
    let rw: serde_json::Value = serde_json::from_str(&run(Command::new("nbdinfo")
        .args(["--json"])
        .arg(s.uri("vm1"))))
    .unwrap();
    assert_eq!(rw["exports"][0]["is_read_only"], false, "{rw}");
    // qemu-io opens a read-only export read-only itself: put the writes on the wire by hand.
    let mut c = RawClient::go(&s.addr, "ro");
    let mut w = c.request(CMD_WRITE, 1, 0, 4096);
    w.extend_from_slice(&[7u8; 4096]);
    c.send(&w);
    assert_eq!(c.simple_reply(), (EPERM, 1), "write to a read-only export");
    let t = c.request(CMD_TRIM, 2, 0, 4096);
    c.send(&t);
    assert_eq!(c.simple_reply(), (EPERM, 2), "trim of a read-only export");
    let k = c.request(CMD_CACHE, 3, 4096, 65536);
    c.send(&k);
    assert_eq!(c.simple_reply(), (0, 3), "cache hint");
    let k = c.request(CMD_CACHE, 4, 64 * MIB - 512, 1024);
    c.send(&k);
    assert_eq!(c.simple_reply(), (EINVAL, 4), "cache beyond the end");
    // The refused write left nothing behind.
    let out = run(Command::new("qemu-io")
        .args(["-r", "-f", "raw", "-c", "read -P 0 0 65536"])
        .arg(s.uri("ro")));
    assert!(!out.contains("verification failed"), "{out}");
}

const CMD_WRITE: u16 = 1;
const CMD_TRIM: u16 = 4;
const CMD_CACHE: u16 = 5;
const EPERM: u32 = 1;
const EINVAL: u32 = 22;

/// Just enough of an NBD client to send what qemu-io will not (writes to a read-only
/// export): newstyle handshake, NBD_OPT_GO, simple replies.
struct RawClient(std::net::TcpStream);

impl RawClient {
    fn go(addr: &str, export: &str) -> RawClient {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        s.write_all(&3u32.to_be_bytes()).unwrap();
        let mut o = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
        o.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
        o.extend_from_slice(&(6 + export.len() as u32).to_be_bytes());
        o.extend_from_slice(&(export.len() as u32).to_be_bytes());
        o.extend_from_slice(export.as_bytes());
        o.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&o).unwrap();
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h).unwrap();
            let mut d = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
            s.read_exact(&mut d).unwrap();
            match u32::from_be_bytes(h[12..16].try_into().unwrap()) {
                1 => return RawClient(s),
                3 => {}
                other => panic!("option reply {other:#x}"),
            }
        }
    }

    fn request(&self, cmd: u16, handle: u64, off: u64, len: u32) -> Vec<u8> {
        let mut b = 0x2560_9513u32.to_be_bytes().to_vec();
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&handle.to_be_bytes());
        b.extend_from_slice(&off.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b
    }

    fn send(&mut self, b: &[u8]) {
        use std::io::Write;
        self.0.write_all(b).unwrap();
    }

    /// (error, handle)
    fn simple_reply(&mut self) -> (u32, u64) {
        use std::io::Read;
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x6744_6698);
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }
}
