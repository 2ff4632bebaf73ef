//! A raw NBD client, for inputs real clients never send.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub fn handshake(addr: &str, export: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).unwrap(); // fixed newstyle, no zeroes
    // An option the server does not know: an error reply, then haggling goes on.
    send_opt(&mut s, 99, &[]);
    let (_, kind, _) = read_opt_reply(&mut s);
    assert_eq!(kind, (1 << 31) + 1, "NBD_REP_ERR_UNSUP");
    let mut data = (export.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(export.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    send_opt(&mut s, 7, &data); // NBD_OPT_GO
    loop {
        let (_, kind, _) = read_opt_reply(&mut s);
        if kind == 1 {
            break;
        }
        assert_eq!(kind, 3, "expected NBD_REP_INFO or ACK");
    }
    s
}

pub fn send_opt(s: &mut TcpStream, opt: u32, data: &[u8]) {
    let mut b = 0x4948_4156_454F_5054u64.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

pub fn read_opt_reply(s: &mut TcpStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut d = vec![0u8; len];
    s.read_exact(&mut d).unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        d,
    )
}

pub fn send_req(
    s: &mut TcpStream,
    magic: u32,
    cmd: u16,
    handle: u64,
    off: u64,
    len: u32,
    data: &[u8],
) {
    let mut b = magic.to_be_bytes().to_vec();
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

/// (error, handle) of a simple reply.
pub fn read_reply(s: &mut TcpStream) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x6744_6698);
    (
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    )
}

pub const MAGIC: u32 = 0x2560_9513;

/// NBD error of a write of `data` at `off` (one request at a time).
pub fn write_at(s: &mut TcpStream, off: u64, data: &[u8]) -> u32 {
    send_req(s, MAGIC, 1, 11, off, data.len() as u32, data);
    let (err, h) = read_reply(s);
    assert_eq!(h, 11);
    err
}

/// NBD error of a FLUSH.
pub fn flush_all(s: &mut TcpStream) -> u32 {
    send_req(s, MAGIC, 3, 12, 0, 0, &[]);
    let (err, h) = read_reply(s);
    assert_eq!(h, 12);
    err
}

/// `len` bytes read at `off` (the read must succeed).
pub fn read_at(s: &mut TcpStream, off: u64, len: usize) -> Vec<u8> {
    send_req(s, MAGIC, 0, 13, off, len as u32, &[]);
    assert_eq!(read_reply(s), (0, 13), "read at {off}");
    let mut got = vec![0u8; len];
    s.read_exact(&mut got).unwrap();
    got
}
