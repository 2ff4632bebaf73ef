//! NBD extended headers (`NBD_OPT_EXTENDED_HEADERS`) end to end: QEMU 10's client negotiates
//! them (its `--trace 'nbd_*'` shows the option acknowledged and the 64-bit block-status
//! replies), writes, reads back and maps a volume larger than 4 GiB; libnbd 1.14, which does
//! not ask for them, keeps structured replies; a raw client checks refusals that keep the
//! connection and a malformed header that closes only its own.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

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
size = "2g"
kind = "hdd"

[[volume]]
name = "big"
size = "6g"
pool = "hdd"
provisioning = "thin"
"#;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn start(d: &TempDir) -> ServerProc {
    let conf = d.path().join("ext.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()])
}

/// `qemu-img map --output=json` as (start, length, data) rows, and the NBD trace.
fn qemu_map(uri: &str) -> (Vec<(u64, u64, bool)>, String) {
    let out = run(Command::new("qemu-img")
        .args(["--trace", "nbd_*", "map", "--output=json", "-f", "raw"])
        .arg(uri));
    let rows = out
        .lines()
        .filter(|l| l.contains("\"start\""))
        .map(|l| {
            let num = |key: &str| -> u64 {
                let rest = &l[l.find(key).unwrap() + key.len()..];
                let end = rest.find(',').unwrap();
                rest[..end].trim().parse().unwrap()
            };
            (
                num("\"start\":"),
                num("\"length\":"),
                l.contains("\"data\": true"),
            )
        })
        .collect();
    (rows, out)
}

#[test]
fn qemu_negotiates_extended_headers_and_libnbd_keeps_structured_replies() {
    if !have("qemu-io") || !have("qemu-img") || !have("nbdinfo") {
        return;
    }
    let d = TempDir::new("exthdr");
    let s = start(&d);
    let uri = s.uri("big");
    let out = run(Command::new("qemu-io")
        .args(["--trace", "nbd_*", "-f", "raw"])
        .args(["-c", &format!("write -P 0x5a {} {MIB}", 5 * GIB)])
        .args(["-c", &format!("read -P 0x5a {} {MIB}", 5 * GIB)])
        .args(["-c", "write -P 0xa5 0 64k", "-c", "flush"])
        .args(["-c", "read -P 0xa5 0 64k", "-c", "read -P 0 64k 64k"])
        .arg(&uri));
    assert!(
        out.contains("Received option reply 11 (extended headers), type 1 (ack)"),
        "extended headers not negotiated:\n{out}"
    );
    assert!(
        !out.contains("compliance"),
        "QEMU saw a protocol slip:\n{out}"
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    // Block status over 6 GiB: QEMU asks for the whole export in one request (a length
    // beyond 4 GiB) and gets 64-bit replies.
    let (rows, trace) = qemu_map(&uri);
    assert!(
        trace.contains(&format!(
            ".len = {}, .cookie = 1, .flags = 0x8, .type = 7",
            6 * GIB
        )),
        "no 6 GiB block-status request:\n{trace}"
    );
    assert!(
        trace.contains("type = 6 (block status (64-bit))"),
        "{trace}"
    );
    // Data where written, by whole 1 MiB chunks (the 64 KiB write maps its chunk).
    let data: Vec<(u64, u64)> = rows.iter().filter(|r| r.2).map(|r| (r.0, r.1)).collect();
    assert_eq!(data, vec![(0, MIB), (5 * GIB, MIB)], "{rows:?}");
    let total: u64 = rows.iter().map(|r| r.1).sum();
    assert_eq!(total, 6 * GIB);
    // libnbd 1.14 (nbdinfo) does not ask for extended headers: structured replies, and
    // the same map.
    let info = run(Command::new("nbdinfo").arg(&uri));
    assert!(info.contains("using structured packets"), "{info}");
    let map = run(Command::new("nbdinfo").args(["--map", &uri]));
    assert!(
        map.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == [&(5 * GIB).to_string()[..], "1048576", "0", "data"]),
        "{map}"
    );
}

/// A hand-rolled client with extended headers.
struct Ext(TcpStream);

impl Ext {
    fn connect(addr: &str) -> Ext {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        s.write_all(&3u32.to_be_bytes()).unwrap();
        let mut c = Ext(s);
        c.option(11, &[]); // NBD_OPT_EXTENDED_HEADERS
        let mut go = 3u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"big");
        go.extend_from_slice(&0u16.to_be_bytes());
        c.option(7, &go); // NBD_OPT_GO
        c
    }

    /// Send an option and read replies up to its ACK.
    fn option(&mut self, o: u32, d: &[u8]) {
        let mut b = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
        b.extend_from_slice(&o.to_be_bytes());
        b.extend_from_slice(&(d.len() as u32).to_be_bytes());
        b.extend_from_slice(d);
        self.0.write_all(&b).unwrap();
        loop {
            let mut h = [0u8; 20];
            self.0.read_exact(&mut h).unwrap();
            let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
            self.0.read_exact(&mut data).unwrap();
            match u32::from_be_bytes(h[12..16].try_into().unwrap()) {
                1 => return,
                3 => {}
                other => panic!("option {o}: reply {other:#x}"),
            }
        }
    }

    fn request(&mut self, flags: u16, cmd: u16, handle: u64, off: u64, len: u64, data: &[u8]) {
        let mut b = 0x21e4_1c71u32.to_be_bytes().to_vec();
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&handle.to_be_bytes());
        b.extend_from_slice(&off.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
    }

    /// One extended reply chunk: (type, handle, offset, payload).
    fn chunk(&mut self) -> (u16, u64, u64, Vec<u8>) {
        let mut h = [0u8; 32];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(
            &h[0..4],
            &0x6e8a_278cu32.to_be_bytes(),
            "not an extended reply"
        );
        let be64 = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap());
        let mut p = vec![0u8; be64(24) as usize];
        self.0.read_exact(&mut p).unwrap();
        (u16::from_be_bytes([h[6], h[7]]), be64(8), be64(16), p)
    }

    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.0.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn refusals_keep_the_connection_and_a_malformed_header_closes_only_its_own() {
    let d = TempDir::new("exthdr-raw");
    let s = start(&d);
    let mut a = Ext::connect(&s.addr);
    let mut b = Ext::connect(&s.addr);
    // A read beyond the 32 MiB maximum payload: EOVERFLOW; the connection goes on.
    a.request(0, 0, 1, 0, 8 * GIB, &[]);
    let (ty, handle, off, p) = a.chunk();
    assert_eq!((ty, handle, off), (0x8001, 1, 0));
    assert_eq!(&p[0..4], &75u32.to_be_bytes());
    // A write with NBD_CMD_FLAG_PAYLOAD_LEN, a read of it, a 64-bit trim, a flush.
    a.request(1 << 5, 1, 2, 4 * GIB + 512, 4, b"tvtv");
    assert_eq!(a.chunk().0, 0); // NBD_REPLY_TYPE_NONE
    a.request(0, 0, 3, 4 * GIB + 512, 4, &[]);
    let (ty, _, off, p) = a.chunk();
    assert_eq!((ty, off), (1, 4 * GIB + 512));
    assert_eq!(&p[8..], b"tvtv");
    a.request(0, 4, 4, 0, 6 * GIB, &[]);
    assert_eq!(a.chunk().0, 0);
    a.request(0, 3, 5, 0, 0, &[]);
    assert_eq!(a.chunk().0, 0);
    // A compact header where an extended one is due: that connection closes, the other
    // goes on.
    let mut compact = 0x2560_9513u32.to_be_bytes().to_vec();
    compact.extend_from_slice(&[0; 28]);
    a.0.write_all(&compact).unwrap();
    assert!(a.closed(), "a malformed header must close the connection");
    b.request(0, 0, 9, 0, 4096, &[]);
    let (ty, handle, _, p) = b.chunk();
    assert_eq!((ty, handle, p.len()), (1, 9, 8 + 4096));
    s.wait_log("bad request magic");
}
