//! A small NBD client for `tiervisor load`: the fixed-newstyle handshake with NBD_OPT_GO,
//! then simple replies only (no structured replies are asked for), so it works against
//! tiervisor, qemu-nbd, nbdkit or nbd-server alike. The stream is split in two: one
//! thread writes requests, another reads replies.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tiervisor_server::nbd::proto::{
    CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES,
    FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, IHAVEOPT, INFO_EXPORT, NBDMAGIC, OPT_GO, OPT_REPLY_MAGIC,
    REP_ACK, REP_INFO, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC, TFLAG_READ_ONLY, TFLAG_SEND_FLUSH,
};

/// Where an export is: `nbd://HOST[:PORT]/EXPORT` or `nbd+unix:///EXPORT?socket=PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub target: Target,
    /// Empty: one export per VM, named after the VM's volume.
    pub export: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Tcp(String),
    Unix(String),
}

impl NbdUri {
    pub fn parse(uri: &str) -> Result<NbdUri, String> {
        let bad = |why: &str| {
            format!(
                "{uri}: {why}; expected nbd://HOST[:PORT][/EXPORT] or nbd+unix:///[EXPORT]?socket=PATH"
            )
        };
        if let Some(rest) = uri.strip_prefix("nbd://") {
            let (host, export) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() {
                return Err(bad("no host"));
            }
            let host = if host
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                host.to_string()
            } else if host.contains(':') && !host.ends_with(']') {
                return Err(bad("the port is not a number"));
            } else {
                format!("{host}:10809")
            };
            return Ok(NbdUri {
                target: Target::Tcp(host),
                export: export.to_string(),
            });
        }
        if let Some(rest) = uri.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').ok_or_else(|| bad("no ?socket=PATH"))?;
            let socket = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("socket="))
                .filter(|s| !s.is_empty())
                .ok_or_else(|| bad("no socket=PATH"))?;
            return Ok(NbdUri {
                target: Target::Unix(socket.to_string()),
                export: path.trim_start_matches('/').to_string(),
            });
        }
        Err(bad("unknown scheme"))
    }
}

trait Stream: Read + Write + Send {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>>;
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
}

impl Stream for TcpStream {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
}

impl Stream for UnixStream {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
}

/// What the server said about the export.
#[derive(Clone, Copy, Debug)]
pub struct ExportInfo {
    pub size_bytes: u64,
    pub read_only: bool,
    pub can_flush: bool,
}

/// The writing half of a connection.
pub struct Requests {
    w: BufWriter<Box<dyn Stream>>,
}

/// The reading half: replies in any order, matched by handle.
pub struct Replies {
    r: BufReader<Box<dyn Stream>>,
}

/// One reply: the request's handle and its error (0: success). A read's data is read
/// and dropped (its length is known from the request).
pub struct Reply {
    pub handle: u64,
    pub error: u32,
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Connect and negotiate `export`; the two halves and what the server said of it.
pub fn connect(uri: &NbdUri, export: &str) -> Result<(Requests, Replies, ExportInfo), String> {
    let mut s: Box<dyn Stream> = match &uri.target {
        Target::Tcp(a) => {
            let s = TcpStream::connect(a).map_err(io_err(&format!("connect to {a}")))?;
            let _ = s.set_nodelay(true);
            Box::new(s)
        }
        Target::Unix(p) => {
            Box::new(UnixStream::connect(p).map_err(io_err(&format!("connect to {p}")))?)
        }
    };
    s.set_timeout(Some(Duration::from_secs(30)))
        .map_err(io_err("socket"))?;
    let info = handshake(&mut s, export)?;
    s.set_timeout(None).map_err(io_err("socket"))?;
    let r = s.try_clone_box().map_err(io_err("socket"))?;
    Ok((
        Requests {
            w: BufWriter::with_capacity(1 << 20, s),
        },
        Replies {
            r: BufReader::with_capacity(1 << 20, r),
        },
        info,
    ))
}

/// The next `N` handshake bytes.
fn take<const N: usize>(s: &mut dyn Stream) -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    s.read_exact(&mut b).map_err(io_err("handshake"))?;
    Ok(b)
}

fn handshake(s: &mut Box<dyn Stream>, export: &str) -> Result<ExportInfo, String> {
    let s: &mut dyn Stream = s.as_mut();
    if u64::from_be_bytes(take(s)?) != NBDMAGIC || u64::from_be_bytes(take(s)?) != IHAVEOPT {
        return Err("not an NBD server speaking the newstyle handshake".into());
    }
    let server_flags = u16::from_be_bytes(take(s)?);
    if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err("the server does not speak fixed newstyle".into());
    }
    let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
    let mut flags = FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        flags |= FLAG_C_NO_ZEROES;
    }
    let mut m = flags.to_be_bytes().to_vec();
    // NBD_OPT_GO: export name, then no information requests (the export info is sent).
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&OPT_GO.to_be_bytes());
    m.extend_from_slice(&(4 + export.len() as u32 + 2).to_be_bytes());
    m.extend_from_slice(&(export.len() as u32).to_be_bytes());
    m.extend_from_slice(export.as_bytes());
    m.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&m).map_err(io_err("handshake"))?;
    let mut info = None;
    loop {
        if u64::from_be_bytes(take(s)?) != OPT_REPLY_MAGIC {
            return Err("bad option reply magic".into());
        }
        let _opt = u32::from_be_bytes(take(s)?);
        let kind = u32::from_be_bytes(take(s)?);
        let len = u32::from_be_bytes(take(s)?) as usize;
        if len > 64 << 10 {
            return Err(format!("option reply of {len} bytes"));
        }
        let mut data = vec![0u8; len];
        s.read_exact(&mut data).map_err(io_err("handshake"))?;
        match kind {
            REP_ACK => break,
            REP_INFO
                if data.len() >= 12 && u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT =>
            {
                let size_bytes = u64::from_be_bytes(data[2..10].try_into().unwrap_or_default());
                let tflags = u16::from_be_bytes([data[10], data[11]]);
                info = Some(ExportInfo {
                    size_bytes,
                    read_only: tflags & TFLAG_READ_ONLY != 0,
                    can_flush: tflags & TFLAG_SEND_FLUSH != 0,
                });
            }
            REP_INFO => {}
            k if k & (1 << 31) != 0 => {
                return Err(format!(
                    "the server refused export {export:?} (error {}): {}",
                    k & !(1 << 31),
                    String::from_utf8_lossy(&data)
                ));
            }
            k => return Err(format!("unexpected option reply {k}")),
        }
    }
    info.ok_or_else(|| "the server sent no export information".to_string())
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    Read,
    Write,
    Flush,
}

/// An NBD request header (no command flags).
fn request_header(kind: u16, handle: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[6..8].copy_from_slice(&kind.to_be_bytes());
    h[8..16].copy_from_slice(&handle.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&len.to_be_bytes());
    h
}

impl Requests {
    /// Queue one request; `data` is a write's payload. Call `send` to push them out.
    pub fn push(
        &mut self,
        cmd: Cmd,
        handle: u64,
        offset: u64,
        len: u32,
        data: &[u8],
    ) -> Result<(), String> {
        let kind = match cmd {
            Cmd::Read => CMD_READ,
            Cmd::Write => CMD_WRITE,
            Cmd::Flush => CMD_FLUSH,
        };
        let h = request_header(kind, handle, offset, len);
        self.w.write_all(&h).map_err(io_err("send"))?;
        if cmd == Cmd::Write {
            self.w
                .write_all(&data[..len as usize])
                .map_err(io_err("send"))?;
        }
        Ok(())
    }

    pub fn send(&mut self) -> Result<(), String> {
        self.w.flush().map_err(io_err("send"))
    }

    /// NBD_CMD_DISC: the server finishes what is in flight and closes.
    pub fn disconnect(mut self) {
        let h = request_header(CMD_DISC, 0, 0, 0);
        let _ = self.w.write_all(&h).and_then(|_| self.w.flush());
    }
}

impl Replies {
    /// Reply bytes already read from the socket and not yet taken.
    pub fn buffered_bytes(&self) -> usize {
        self.r.buffer().len()
    }

    /// The next reply; `read_len` gives the data length of a read's handle.
    pub fn next(&mut self, read_len: impl Fn(u64) -> Option<u32>) -> Result<Reply, String> {
        let mut h = [0u8; 16];
        self.r.read_exact(&mut h).map_err(io_err("reply"))?;
        let magic = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(format!("reply magic {magic:#x}, expected a simple reply"));
        }
        let error = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let handle = u64::from_be_bytes(h[8..16].try_into().unwrap_or_default());
        if error == 0
            && let Some(n) = read_len(handle)
        {
            // A read's data follows a successful reply; it is not checked.
            std::io::copy(&mut (&mut self.r).take(n as u64), &mut std::io::sink())
                .map_err(io_err("reply data"))?;
        }
        Ok(Reply { handle, error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_or_say_what_was_expected() {
        let u = NbdUri::parse("nbd://127.0.0.1:1234/vm1").unwrap();
        assert_eq!(u.target, Target::Tcp("127.0.0.1:1234".into()));
        assert_eq!(u.export, "vm1");
        let u = NbdUri::parse("nbd://localhost").unwrap();
        assert_eq!(u.target, Target::Tcp("localhost:10809".into()));
        assert_eq!(u.export, "");
        let u = NbdUri::parse("nbd+unix:///db?socket=/run/tv.sock").unwrap();
        assert_eq!(u.target, Target::Unix("/run/tv.sock".into()));
        assert_eq!(u.export, "db");
        for (bad, why) in [
            ("http://x/y", "unknown scheme"),
            ("nbd:///vm1", "no host"),
            ("nbd://h:port/vm1", "not a number"),
            ("nbd+unix:///db", "no ?socket"),
        ] {
            let e = NbdUri::parse(bad).unwrap_err();
            assert!(
                e.contains(why) && e.contains("expected nbd://"),
                "{bad}: {e}"
            );
        }
    }
}
