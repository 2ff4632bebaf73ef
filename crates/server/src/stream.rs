//! A client's byte stream: a TCP or Unix socket, in plaintext or, once the client sent
//! `NBD_OPT_STARTTLS`, inside a rustls server session. Reads append plaintext to the
//! connection's buffer and writes take plaintext, so `nbd::conn` never knows which; both
//! are non-blocking and report `WouldBlock` as the sockets do.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use bytes::BytesMut;
use mio::net::{TcpStream, UnixStream};

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(b),
            Sock::Unix(s) => s.read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(b),
            Sock::Unix(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(b),
            Sock::Unix(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(crate) struct Stream {
    sock: Sock,
    tls: Option<Box<rustls::ServerConnection>>,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl Stream {
    pub(crate) fn tcp(s: TcpStream) -> Stream {
        Stream {
            sock: Sock::Tcp(s),
            tls: None,
        }
    }

    pub(crate) fn unix(s: UnixStream) -> Stream {
        Stream {
            sock: Sock::Unix(s),
            tls: None,
        }
    }

    fn fd(&self) -> RawFd {
        match &self.sock {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }

    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match &mut self.sock {
            Sock::Tcp(s) => s,
            Sock::Unix(s) => s,
        }
    }

    /// Begin the server side of a TLS handshake. `early` holds bytes the client sent after
    /// its `NBD_OPT_STARTTLS` that were already read as plaintext: the start of its
    /// ClientHello.
    pub(crate) fn start_tls(
        &mut self,
        cfg: Arc<rustls::ServerConfig>,
        mut early: &[u8],
    ) -> io::Result<()> {
        let mut tls = rustls::ServerConnection::new(cfg).map_err(tls_error)?;
        while !early.is_empty() {
            tls.read_tls(&mut early)?;
            tls.process_new_packets().map_err(tls_error)?;
        }
        self.tls = Some(Box::new(tls));
        // A ClientHello that arrived whole is answered at once.
        match self.flush_pending() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }

    /// Append at most `want` bytes of plaintext to `buf`. `Ok(0)`: the peer closed.
    pub(crate) fn read_into(&mut self, buf: &mut BytesMut, want: usize) -> io::Result<usize> {
        buf.reserve(want);
        if self.tls.is_none() {
            let spare = buf.capacity() - buf.len();
            loop {
                // SAFETY: reading into the buffer's spare capacity, then extending its
                // length by exactly the number of bytes the kernel wrote.
                let n =
                    unsafe { libc::read(self.fd(), buf.as_mut_ptr().add(buf.len()).cast(), spare) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                // SAFETY: see above.
                unsafe { buf.set_len(buf.len() + n as usize) };
                return Ok(n as usize);
            }
        }
        loop {
            let Some(tls) = self.tls.as_deref_mut() else {
                return Ok(0);
            };
            // Plaintext rustls already decrypted goes first: the socket may have no more.
            let len = buf.len();
            buf.resize(len + want, 0);
            let got = tls.reader().read(&mut buf[len..]);
            buf.truncate(len + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify: the same as a plaintext client going away.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match tls.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Send the alert that says why, then give up on the connection.
                        let _ = tls.write_tls(&mut self.sock);
                        return Err(tls_error(e));
                    }
                    // Handshake messages, key updates, alerts.
                    if let Err(e) = self.flush_pending()
                        && e.kind() != io::ErrorKind::WouldBlock
                    {
                        return Err(e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Send the TLS records rustls holds. `WouldBlock` if some are left for the next
    /// writable event; plaintext streams have none.
    pub(crate) fn flush_pending(&mut self) -> io::Result<()> {
        let Some(tls) = &mut self.tls else {
            return Ok(());
        };
        while tls.wants_write() {
            match tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Write plaintext; returns how much was taken. Under TLS, nothing new is taken while
    /// earlier records wait for the socket, so what rustls buffers stays bounded.
    pub(crate) fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.tls.is_none() {
            return self.sock.write_vectored(b);
        }
        self.flush_pending()?;
        let Some(tls) = &mut self.tls else {
            return Ok(0);
        };
        let n = tls.writer().write_vectored(b)?;
        match self.flush_pending() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }
}

/// When `conn` acknowledged `NBD_OPT_STARTTLS` and the acknowledgement is written, start
/// TLS on `stream` with the bytes that followed it. True when TLS started (the caller reads
/// again: the client's records may be waiting); a connection whose TLS cannot start is
/// closed.
pub(crate) fn start_tls_if_asked(
    stream: &mut Stream,
    conn: &mut crate::nbd::conn::Conn,
    tls: &crate::tls::TlsSettings,
) -> bool {
    use crate::nbd::conn::Closing;
    if !conn.wants_tls() || !conn.out.is_empty() {
        return false;
    }
    let early = conn.tls_started();
    let Some(cfg) = tls.server.clone() else {
        conn.closing = Some(Closing::Abort("TLS asked for but not configured".into()));
        return false;
    };
    match stream.start_tls(cfg, &early) {
        Ok(()) => true,
        Err(e) => {
            conn.closing = Some(Closing::Abort(format!("TLS handshake: {e}")));
            false
        }
    }
}
