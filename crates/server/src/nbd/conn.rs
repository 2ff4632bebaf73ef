//! One NBD connection as a state machine over bytes: feed it what the socket delivered,
//! it appends replies to its output queue and reports the requests to run. No sockets
//! here, so every protocol path is testable with plain byte strings.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tiervisor_engine::{Errno, ReqKind, VolumeId};

use super::meta;
use super::proto::*;
use crate::tls::TlsMode;

/// An export the server offers: a volume under a name.
#[derive(Clone, Debug)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub volume: VolumeId,
    pub size_bytes: u64,
    pub rotational: bool,
    /// Writes, trims and zeroing fail with EPERM.
    pub read_only: bool,
    /// Deleted while serving (`ctl volume delete`): no longer listed or negotiated. Its
    /// slot stays so the indexes connections hold stay valid.
    pub deleted: bool,
}

/// A `NBD_CMD_BLOCK_STATUS` the server answers from the engine's mapping table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusQuery {
    pub handle: u64,
    pub volume: VolumeId,
    pub offset: u64,
    pub length: u64,
    /// `NBD_CMD_FLAG_REQ_ONE`: a single run.
    pub req_one: bool,
}

/// A request decoded from the wire, ready for the engine.
/// The payload bytes a request holds while in flight: a write's data, a read's reply.
pub fn payload_cost(cmd: u16, length: u64) -> u64 {
    if (cmd == CMD_READ || cmd == CMD_WRITE) && length <= MAX_PAYLOAD_BYTES as u64 {
        length
    } else {
        0
    }
}

#[derive(Debug)]
pub struct WireRequest {
    pub handle: u64,
    pub cmd: u16,
    pub volume: VolumeId,
    pub kind: ReqKind,
    pub offset: u64,
    pub length: u64,
    pub fua: bool,
    pub no_hole: bool,
    pub payload: Option<Bytes>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    ClientFlags,
    Options,
    /// `NBD_OPT_STARTTLS` was acknowledged: the next bytes are a TLS handshake, for the
    /// stream to take over (`wants_tls`, `tls_started`).
    StartTls,
    Transmission,
}

/// Why a connection is closing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closing {
    /// Send what is queued and the replies still due, then close (DISC, ABORT).
    Graceful(String),
    /// Close now: the peer broke the protocol.
    Abort(String),
}

pub struct Conn {
    phase: Phase,
    pub no_zeroes: bool,
    /// Simple, structured or extended (`NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_EXTENDED_HEADERS`).
    framing: Framing,
    export: Option<usize>,
    /// Bytes received and not yet consumed.
    pub inbuf: BytesMut,
    /// Payload bytes of an oversized write still to throw away.
    skip: u64,
    pub out: VecDeque<Bytes>,
    pub out_bytes: usize,
    pub in_flight: u32,
    /// Read and write payload bytes of accepted requests not yet answered.
    pub in_flight_bytes: u64,
    /// Parse no further read or write while this connection holds this much (in flight
    /// plus queued output), unless it holds nothing: set by the server before `process`.
    pub budget_bytes: u64,
    /// `process` stopped at a request because of `budget_bytes`; it waits in `inbuf`.
    pub over_budget: bool,
    pub closing: Option<Closing>,
    /// The export `base:allocation` was selected for (`NBD_OPT_SET_META_CONTEXT`).
    meta_export: Option<usize>,
    /// Block-status queries for the server to answer (then `status_reply`).
    pub status_queries: Vec<StatusQuery>,
    /// Stop parsing on entering transmission: the front ran the handshake and hands the
    /// connection to the shard that owns its export (which parses the rest).
    pub handoff: bool,
    /// `tls = "off" | "on" | "require"` (set by the server before the first `process`).
    pub tls_mode: TlsMode,
    /// The stream is inside TLS.
    tls_active: bool,
}

impl Default for Conn {
    fn default() -> Self {
        Self::new()
    }
}

impl Conn {
    /// A new connection; the greeting is already queued.
    pub fn new() -> Conn {
        let mut c = Conn {
            phase: Phase::ClientFlags,
            no_zeroes: false,
            framing: Framing::Simple,
            export: None,
            inbuf: BytesMut::with_capacity(64 << 10),
            skip: 0,
            out: VecDeque::new(),
            out_bytes: 0,
            in_flight: 0,
            in_flight_bytes: 0,
            budget_bytes: u64::MAX,
            over_budget: false,
            closing: None,
            meta_export: None,
            status_queries: Vec::new(),
            handoff: false,
            tls_mode: TlsMode::Off,
            tls_active: false,
        };
        c.send(greeting());
        c
    }

    pub fn export(&self) -> Option<usize> {
        self.export
    }

    pub fn in_transmission(&self) -> bool {
        self.phase == Phase::Transmission
    }

    /// How requests and replies are framed (as negotiated so far).
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The export chosen is number `i` in the list the connection is served from now on
    /// (a handed-off connection negotiated against the front's list of every shard's).
    pub fn set_export(&mut self, i: usize) {
        let meta_same = self.meta_export.is_some() && self.meta_export == self.export;
        self.export = self.export.map(|_| i);
        self.meta_export = meta_same.then_some(i);
    }

    /// The client asked for TLS and the acknowledgement is queued: once it is written,
    /// the stream starts TLS with what `tls_started` returns.
    pub fn wants_tls(&self) -> bool {
        self.phase == Phase::StartTls
    }

    /// The stream now speaks TLS. Returns the bytes already received after the
    /// `NBD_OPT_STARTTLS` (the start of the ClientHello), which are the stream's now. What
    /// was negotiated in plaintext is forgotten, as doc/proto.md asks.
    pub fn tls_started(&mut self) -> BytesMut {
        self.tls_active = true;
        self.phase = Phase::Options;
        self.framing = Framing::Simple;
        self.meta_export = None;
        std::mem::take(&mut self.inbuf)
    }

    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    fn send(&mut self, b: Bytes) {
        self.out_bytes += b.len();
        self.out.push_back(b);
    }

    /// Bytes this connection holds in memory for requests: payloads in flight and output.
    pub fn held_bytes(&self) -> u64 {
        self.in_flight_bytes + self.out_bytes as u64
    }

    /// Bytes the socket should try to receive next, so a write's payload lands in place.
    pub fn want_bytes(&self) -> usize {
        64 << 10
    }

    /// Parse everything complete in `inbuf`; requests for the engine go to `reqs`.
    pub fn process(&mut self, exports: &[Export], reqs: &mut Vec<WireRequest>) {
        self.over_budget = false;
        while self.closing.is_none() {
            if self.handoff && self.phase == Phase::Transmission {
                break;
            }
            let progressed = match self.phase {
                Phase::ClientFlags => self.client_flags(),
                Phase::Options => self.option(exports),
                Phase::StartTls => false,
                Phase::Transmission => self.request(exports, reqs),
            };
            if !progressed {
                break;
            }
        }
    }

    fn abort(&mut self, why: impl Into<String>) -> bool {
        self.closing = Some(Closing::Abort(why.into()));
        false
    }

    fn client_flags(&mut self) -> bool {
        if self.inbuf.len() < 4 {
            return false;
        }
        let flags = self.inbuf.get_u32();
        if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return self.abort(format!("unknown client flags {flags:#x}"));
        }
        if self.tls_mode == TlsMode::Require && flags & FLAG_C_FIXED_NEWSTYLE == 0 {
            return self
                .abort("TLS is required and the client cannot negotiate it (no fixed newstyle)");
        }
        self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
        self.phase = Phase::Options;
        true
    }

    fn tflags(&self, e: &Export) -> u16 {
        let mut f = TFLAG_HAS_FLAGS
            | TFLAG_SEND_FLUSH
            | TFLAG_SEND_FUA
            | TFLAG_SEND_TRIM
            | TFLAG_SEND_WRITE_ZEROES
            | TFLAG_CAN_MULTI_CONN;
        if e.rotational {
            f |= TFLAG_ROTATIONAL;
        }
        if self.framing.chunked() {
            f |= TFLAG_SEND_DF;
        }
        if e.read_only {
            f |= TFLAG_READ_ONLY;
        }
        f | TFLAG_SEND_CACHE
    }

    fn find(exports: &[Export], name: &[u8]) -> Option<usize> {
        // The empty name selects the first (default) export.
        if name.is_empty() {
            return exports.iter().position(|e| !e.deleted);
        }
        (exports.iter()).position(|e| e.name.as_bytes() == name && !e.deleted)
    }

    fn option(&mut self, exports: &[Export]) -> bool {
        if self.inbuf.len() < 16 {
            return false;
        }
        let magic = u64::from_be_bytes(self.inbuf[0..8].try_into().unwrap_or_default());
        let opt = u32::from_be_bytes(self.inbuf[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(self.inbuf[12..16].try_into().unwrap_or_default());
        if magic != IHAVEOPT {
            return self.abort(format!("bad option magic {magic:#x}"));
        }
        if len > MAX_OPTION_BYTES {
            return self.abort(format!(
                "option {opt} carries {len} bytes, more than {MAX_OPTION_BYTES}"
            ));
        }
        if self.inbuf.len() < 16 + len as usize {
            return false;
        }
        self.inbuf.advance(16);
        let data = self.inbuf.split_to(len as usize).freeze();
        if self.tls_mode == TlsMode::Require
            && !self.tls_active
            && opt != OPT_STARTTLS
            && opt != OPT_ABORT
        {
            if opt == OPT_EXPORT_NAME {
                // This option cannot be refused politely: the protocol says close.
                return self.abort("TLS is required: NBD_OPT_EXPORT_NAME before NBD_OPT_STARTTLS");
            }
            self.send(option_error(
                opt,
                REP_ERR_TLS_REQD,
                "TLS is required: send NBD_OPT_STARTTLS first",
            ));
            return true;
        }
        match opt {
            OPT_EXPORT_NAME if self.framing == Framing::Extended => {
                // The spec forbids it after extended headers, and it has no error reply.
                return self
                    .abort("NBD_OPT_EXPORT_NAME after NBD_OPT_EXTENDED_HEADERS (use NBD_OPT_GO)");
            }
            OPT_EXPORT_NAME => match Self::find(exports, &data) {
                Some(i) => {
                    let e = &exports[i];
                    let mut b = BytesMut::with_capacity(134);
                    b.put_u64(e.size_bytes);
                    b.put_u16(self.tflags(e));
                    if !self.no_zeroes {
                        b.put_bytes(0, 124);
                    }
                    self.send(b.freeze());
                    self.export = Some(i);
                    self.phase = Phase::Transmission;
                }
                None => {
                    // This option cannot fail politely: the protocol says close.
                    return self.abort(format!(
                        "unknown export {:?}",
                        String::from_utf8_lossy(&data)
                    ));
                }
            },
            OPT_ABORT => {
                self.send(option_reply(opt, REP_ACK, &[]));
                self.closing = Some(Closing::Graceful("client aborted the handshake".into()));
                return false;
            }
            OPT_LIST => {
                if !data.is_empty() {
                    self.send(option_error(
                        opt,
                        REP_ERR_INVALID,
                        "NBD_OPT_LIST takes no data",
                    ));
                } else {
                    for e in exports.iter().filter(|e| !e.deleted) {
                        let mut d = BytesMut::with_capacity(4 + e.name.len() + e.description.len());
                        d.put_u32(e.name.len() as u32);
                        d.put_slice(e.name.as_bytes());
                        d.put_slice(e.description.as_bytes());
                        self.send(option_reply(opt, REP_SERVER, &d));
                    }
                    self.send(option_reply(opt, REP_ACK, &[]));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.send(option_error(
                        opt,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    ));
                } else if self.framing == Framing::Extended {
                    // Extended headers take precedence: no going back to 20-byte chunks.
                    self.send(option_error(
                        opt,
                        REP_ERR_EXT_HEADER_REQD,
                        "extended headers are already negotiated",
                    ));
                } else {
                    self.framing = Framing::Structured;
                    self.send(option_reply(opt, REP_ACK, &[]));
                }
            }
            OPT_EXTENDED_HEADERS => {
                if !data.is_empty() {
                    self.send(option_error(
                        opt,
                        REP_ERR_INVALID,
                        "NBD_OPT_EXTENDED_HEADERS takes no data",
                    ));
                } else if self.framing == Framing::Extended {
                    self.send(option_error(
                        opt,
                        REP_ERR_INVALID,
                        "extended headers are already negotiated",
                    ));
                } else {
                    // With or without structured replies first (it implies them). Meta
                    // contexts already set stay set: `base:allocation` is 32-bit status,
                    // which the 64-bit reply type carries as well.
                    self.framing = Framing::Extended;
                    self.send(option_reply(opt, REP_ACK, &[]));
                }
            }
            OPT_INFO | OPT_GO => return self.info_or_go(opt, &data, exports),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.meta_context(opt, &data, exports),
            OPT_STARTTLS => return self.starttls(&data),
            _ => self.send(option_error(opt, REP_ERR_UNSUP, "option not supported")),
        }
        true
    }

    fn starttls(&mut self, data: &[u8]) -> bool {
        let refuse = |c: &mut Conn, rep: u32, why: &str| {
            c.send(option_error(OPT_STARTTLS, rep, why));
            true
        };
        if self.tls_mode == TlsMode::Off {
            return refuse(
                self,
                REP_ERR_POLICY,
                "TLS is off on this server (tls = \"off\")",
            );
        }
        if self.tls_active {
            return refuse(self, REP_ERR_INVALID, "TLS is already on");
        }
        if !data.is_empty() {
            return refuse(self, REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
        }
        self.send(option_reply(OPT_STARTTLS, REP_ACK, &[]));
        self.phase = Phase::StartTls;
        false
    }

    fn info_or_go(&mut self, opt: u32, data: &[u8], exports: &[Export]) -> bool {
        let bad = |c: &mut Conn| {
            c.send(option_error(
                opt,
                REP_ERR_INVALID,
                "malformed NBD_OPT_INFO/GO payload",
            ));
            true
        };
        if data.len() < 6 {
            return bad(self);
        }
        let nlen = u32::from_be_bytes(data[0..4].try_into().unwrap_or_default()) as usize;
        if data.len() < 4 + nlen + 2 {
            return bad(self);
        }
        let name = &data[4..4 + nlen];
        let nreq = u16::from_be_bytes([data[4 + nlen], data[5 + nlen]]) as usize;
        let reqs = &data[6 + nlen..];
        if reqs.len() != 2 * nreq {
            return bad(self);
        }
        let Some(i) = Self::find(exports, name) else {
            let msg = format!("no export named {:?}", String::from_utf8_lossy(name));
            self.send(option_error(opt, REP_ERR_UNKNOWN, &msg));
            return true;
        };
        let e = exports[i].clone();
        let mut info = BytesMut::new();
        info.put_u16(INFO_EXPORT);
        info.put_u64(e.size_bytes);
        info.put_u16(self.tflags(&e));
        self.send(option_reply(opt, REP_INFO, &info));
        for r in reqs.chunks(2) {
            match u16::from_be_bytes([r[0], r[1]]) {
                INFO_NAME => {
                    let mut d = BytesMut::new();
                    d.put_u16(INFO_NAME);
                    d.put_slice(e.name.as_bytes());
                    self.send(option_reply(opt, REP_INFO, &d));
                }
                INFO_DESCRIPTION => {
                    let mut d = BytesMut::new();
                    d.put_u16(INFO_DESCRIPTION);
                    d.put_slice(e.description.as_bytes());
                    self.send(option_reply(opt, REP_INFO, &d));
                }
                INFO_BLOCK_SIZE => {
                    let mut d = BytesMut::new();
                    d.put_u16(INFO_BLOCK_SIZE);
                    d.put_u32(1);
                    d.put_u32(4096);
                    d.put_u32(MAX_PAYLOAD_BYTES);
                    self.send(option_reply(opt, REP_INFO, &d));
                }
                _ => {}
            }
        }
        self.send(option_reply(opt, REP_ACK, &[]));
        if opt == OPT_GO {
            // Contexts chosen for another export do not carry over.
            if self.meta_export != Some(i) {
                self.meta_export = None;
            }
            self.export = Some(i);
            self.phase = Phase::Transmission;
        }
        true
    }

    /// An error reply: a chunk with the message where chunks are due (every reply with
    /// extended headers, reads with structured replies), else a simple reply.
    pub fn error_reply(&mut self, handle: u64, cmd: u16, offset: u64, errno: u32, msg: &str) {
        let chunk = match self.framing {
            Framing::Extended => true,
            Framing::Structured => cmd == CMD_READ,
            Framing::Simple => false,
        };
        if chunk {
            self.send(self.framing.error_chunk(handle, offset, errno, msg));
        } else {
            self.send(simple_reply_header(errno, handle));
        }
    }

    fn request(&mut self, exports: &[Export], reqs: &mut Vec<WireRequest>) -> bool {
        if self.skip > 0 {
            let n = (self.skip as usize).min(self.inbuf.len());
            self.inbuf.advance(n);
            self.skip -= n as u64;
            if self.skip > 0 {
                return false;
            }
        }
        let hlen = self.framing.request_header_bytes();
        if self.inbuf.len() < hlen {
            return false;
        }
        let mut h = match parse_request(&self.inbuf[..hlen], self.framing) {
            Ok(h) => h,
            Err(m) => return self.abort(format!("bad request magic {m:#x}")),
        };
        let extended = self.framing == Framing::Extended;
        // Whether a payload follows the header: WRITE's data, and with extended headers
        // whatever `NBD_CMD_FLAG_PAYLOAD_LEN` announces (then `length` is its size and not
        // the range the command affects). The spec has WRITE set the flag; QEMU 10's client
        // does not (and QEMU's server takes WRITE's payload either way), so neither do we
        // insist: a WRITE's length is its payload's.
        let has_payload = h.cmd == CMD_WRITE || (extended && h.flags & CMD_FLAG_PAYLOAD_LEN != 0);
        let too_long = h.length > MAX_PAYLOAD_BYTES as u64;
        if extended && has_payload && too_long {
            // Beyond the advertised maximum payload the spec asks for a hard disconnect
            // rather than reading that much to throw away.
            return self.abort(format!(
                "request payload of {} bytes, more than the {MAX_PAYLOAD_BYTES} advertised",
                h.length
            ));
        }
        let cost = payload_cost(h.cmd, h.length);
        let held = self.held_bytes();
        if held > 0 && held + cost > self.budget_bytes {
            // Leave the request (and its payload) unread until replies drain.
            self.over_budget = true;
            return false;
        }
        let take = has_payload && !too_long;
        if take && self.inbuf.len() < hlen + h.length as usize {
            // Make room so the payload arrives in one buffer.
            self.inbuf
                .reserve(hlen + h.length as usize - self.inbuf.len());
            return false;
        }
        self.inbuf.advance(hlen);
        let payload = take.then(|| self.inbuf.split_to(h.length as usize).freeze());
        if has_payload && too_long {
            // A compact WRITE too large to serve: skip its data and stay in sync.
            self.skip = h.length;
        }
        let Some(e) = self.export.and_then(|i| exports.get(i)) else {
            return self.abort("request before an export was chosen");
        };
        if extended {
            if has_payload && h.cmd != CMD_WRITE {
                // Consumed above, so the next request is found where it starts.
                let why = "a payload this command does not take";
                self.error_reply(h.handle, h.cmd, h.offset, EINVAL, why);
                return true;
            }
            // From here on the flag says nothing `cmd` does not already imply.
            h.flags &= !CMD_FLAG_PAYLOAD_LEN;
        }
        let volume = e.volume;
        if let Some(progressed) = self.local_command(&h, e) {
            return progressed;
        }
        let allowed = match h.cmd {
            CMD_READ if self.framing.chunked() => CMD_FLAG_DF,
            CMD_WRITE | CMD_TRIM => CMD_FLAG_FUA,
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            _ => 0,
        };
        let kind = match h.cmd {
            CMD_READ => ReqKind::Read,
            CMD_WRITE => ReqKind::Write,
            CMD_FLUSH => ReqKind::Flush,
            CMD_TRIM => ReqKind::Trim,
            CMD_WRITE_ZEROES => ReqKind::WriteZeroes,
            CMD_DISC => {
                self.closing = Some(Closing::Graceful("client disconnected".into()));
                return false;
            }
            other => {
                self.error_reply(h.handle, other, h.offset, EINVAL, "unknown command");
                return true;
            }
        };
        if h.flags & !allowed != 0 {
            self.error_reply(
                h.handle,
                h.cmd,
                h.offset,
                EINVAL,
                "command flag not valid for this command",
            );
            return true;
        }
        if too_long && matches!(h.cmd, CMD_READ | CMD_WRITE) {
            // TRIM and WRITE_ZEROES carry no payload: any length within the export goes.
            self.error_reply(
                h.handle,
                h.cmd,
                h.offset,
                if h.cmd == CMD_READ { EOVERFLOW } else { EINVAL },
                "request larger than 32 MiB",
            );
            return true;
        }
        self.in_flight += 1;
        self.in_flight_bytes += cost;
        reqs.push(WireRequest {
            handle: h.handle,
            cmd: h.cmd,
            volume,
            kind,
            offset: h.offset,
            length: h.length,
            fua: h.flags & CMD_FLAG_FUA != 0,
            no_hole: h.flags & CMD_FLAG_NO_HOLE != 0,
            payload,
        });
        true
    }

    /// Options `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`.
    fn meta_context(&mut self, opt: u32, data: &[u8], exports: &[Export]) {
        let set = opt == OPT_SET_META_CONTEXT;
        if set && !self.framing.chunked() {
            let msg = "NBD_OPT_SET_META_CONTEXT needs NBD_OPT_STRUCTURED_REPLY or \
                       NBD_OPT_EXTENDED_HEADERS first";
            return self.send(option_error(opt, REP_ERR_INVALID, msg));
        }
        let req = match meta::parse_request(data) {
            Ok(r) => r,
            Err((kind, msg)) => return self.send(option_error(opt, kind, msg)),
        };
        let Some(i) = Self::find(exports, req.export) else {
            let name = String::from_utf8_lossy(req.export);
            return self.send(option_error(
                opt,
                REP_ERR_UNKNOWN,
                &format!("no export named {name:?}"),
            ));
        };
        let chosen = meta::selects_allocation(&req.queries, !set);
        if set {
            self.meta_export = chosen.then_some(i);
        }
        if chosen {
            self.send(meta::context_reply(opt));
        }
        self.send(option_reply(opt, REP_ACK, &[]));
    }

    /// Commands answered without the engine's I/O path: refused writes to a read-only
    /// export, `NBD_CMD_CACHE` (a hint: nothing to do) and block status. `None` for the
    /// commands the engine runs.
    fn local_command(&mut self, h: &RequestHeader, e: &Export) -> Option<bool> {
        let bad_flags = |allowed: u16| h.flags & !allowed != 0;
        let in_bounds = h
            .offset
            .checked_add(h.length)
            .is_some_and(|end| end <= e.size_bytes);
        let (handle, cmd, offset) = (h.handle, h.cmd, h.offset);
        match h.cmd {
            CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES if e.read_only => {
                self.error_reply(handle, cmd, offset, EPERM, "the export is read-only");
            }
            CMD_CACHE if bad_flags(0) || !in_bounds => {
                self.error_reply(handle, cmd, offset, EINVAL, "bad NBD_CMD_CACHE");
            }
            CMD_CACHE => self.send(self.framing.done(handle, offset)),
            CMD_BLOCK_STATUS if self.meta_export.is_none() || !self.framing.chunked() => {
                let msg = "NBD_CMD_BLOCK_STATUS needs a metadata context (base:allocation)";
                self.error_reply(handle, cmd, offset, EINVAL, msg);
            }
            CMD_BLOCK_STATUS if bad_flags(CMD_FLAG_REQ_ONE) || h.length == 0 || !in_bounds => {
                self.error_reply(handle, cmd, offset, EINVAL, "bad NBD_CMD_BLOCK_STATUS");
            }
            CMD_BLOCK_STATUS => {
                self.in_flight += 1;
                self.status_queries.push(StatusQuery {
                    handle,
                    volume: e.volume,
                    offset,
                    // The length is a hint and the answer may stop short: bound the work
                    // one query does on the shard's thread (the engine walks the range
                    // chunk by chunk) when a 64-bit length asks for a whole large export.
                    length: h.length.min(meta::MAX_STATUS_QUERY_BYTES),
                    req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                });
            }
            _ => return None,
        }
        Some(true)
    }

    /// Queue the answer to a block-status query (`offset` as the request had it).
    pub fn status_reply(
        &mut self,
        handle: u64,
        offset: u64,
        result: Result<Vec<tiervisor_engine::StatusExtent>, Errno>,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match result {
            Ok(ext) => self.send(meta::block_status_reply(self.framing, handle, offset, &ext)),
            Err(e) => {
                let msg = errno_message(e);
                self.error_reply(handle, CMD_BLOCK_STATUS, offset, e.code(), msg)
            }
        }
    }

    /// Queue the reply to a request the engine finished (`cost` as it was accepted with).
    pub fn reply_costed(
        &mut self,
        cost: u64,
        handle: u64,
        cmd: u16,
        offset: u64,
        result: Result<(), Errno>,
        data: Option<Bytes>,
    ) {
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(cost);
        self.reply(handle, cmd, offset, result, data);
    }

    /// Queue the reply to a request the engine finished.
    pub fn reply(
        &mut self,
        handle: u64,
        cmd: u16,
        offset: u64,
        result: Result<(), Errno>,
        data: Option<Bytes>,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match result {
            Ok(()) if cmd == CMD_READ => {
                let data = data.unwrap_or_default();
                if self.framing.chunked() {
                    if data.is_empty() {
                        self.send(self.framing.done(handle, offset));
                    } else {
                        self.send(self.framing.data_header(handle, offset, data.len()));
                        self.send(data);
                    }
                } else {
                    self.send(simple_reply_header(0, handle));
                    if !data.is_empty() {
                        self.send(data);
                    }
                }
            }
            // Structured replies may answer these simply; extended headers may not.
            Ok(()) if self.framing == Framing::Extended => {
                self.send(self.framing.done(handle, offset))
            }
            Ok(()) => self.send(simple_reply_header(0, handle)),
            Err(e) => self.error_reply(handle, cmd, offset, e.code(), errno_message(e)),
        }
    }

    /// After writing `n` bytes of the output queue.
    pub fn consumed(&mut self, mut n: usize) {
        self.out_bytes -= n;
        while n > 0 {
            let Some(front) = self.out.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                self.out.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }

    /// Whether the connection can be closed now.
    pub fn finished(&self) -> bool {
        match &self.closing {
            Some(Closing::Abort(_)) => true,
            Some(Closing::Graceful(_)) => self.in_flight == 0 && self.out.is_empty(),
            None => false,
        }
    }
}

fn errno_message(e: Errno) -> &'static str {
    match e {
        Errno::Io => "input/output error on a pool device",
        Errno::Inval => "invalid request (offset, length or arguments)",
        Errno::NoSpc => "beyond the end of the export, or no space left in the pools",
        Errno::Perm => "operation not permitted",
        Errno::Shutdown => "server is shutting down",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports() -> Vec<Export> {
        vec![
            Export {
                name: "vm1".into(),
                description: "first".into(),
                volume: VolumeId(0),
                size_bytes: 1 << 30,
                rotational: false,
                read_only: false,
                deleted: false,
            },
            Export {
                name: "vm2".into(),
                description: "second".into(),
                volume: VolumeId(1),
                size_bytes: 2 << 30,
                rotational: true,
                read_only: false,
                deleted: false,
            },
        ]
    }

    fn out(c: &mut Conn) -> Vec<u8> {
        let v: Vec<u8> = c.out.iter().flat_map(|b| b.iter().copied()).collect();
        let n = c.out_bytes;
        c.consumed(n);
        v
    }

    fn opt(o: u32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&o.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    fn req(flags: u16, cmd: u16, handle: u64, off: u64, len: u32) -> Vec<u8> {
        let mut b = REQUEST_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&handle.to_be_bytes());
        b.extend_from_slice(&off.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b
    }

    /// Replies parsed as (option, type, data).
    fn replies(mut b: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        while b.len() >= 20 {
            assert_eq!(
                u64::from_be_bytes(b[0..8].try_into().unwrap()),
                OPT_REPLY_MAGIC
            );
            let o = u32::from_be_bytes(b[8..12].try_into().unwrap());
            let t = u32::from_be_bytes(b[12..16].try_into().unwrap());
            let n = u32::from_be_bytes(b[16..20].try_into().unwrap()) as usize;
            v.push((o, t, b[20..20 + n].to_vec()));
            b = &b[20 + n..];
        }
        v
    }

    fn handshake(c: &mut Conn, structured: bool) {
        let ex = exports();
        let mut reqs = Vec::new();
        assert_eq!(out(c).len(), 18);
        c.inbuf.extend_from_slice(&3u32.to_be_bytes());
        if structured {
            c.inbuf.extend_from_slice(&opt(OPT_STRUCTURED_REPLY, &[]));
        }
        c.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm1", &[INFO_BLOCK_SIZE])));
        c.process(&ex, &mut reqs);
        let r = replies(&out(c));
        assert_eq!(r.last().unwrap().1, REP_ACK);
        assert!(c.in_transmission());
    }

    #[test]
    fn starttls_is_refused_when_off_and_required_before_anything_on_require() {
        let ex = exports();
        let mut reqs = Vec::new();
        // Require: every option but STARTTLS waits for TLS; STARTTLS is acknowledged and
        // the bytes after it (the ClientHello) are left for the stream.
        let mut c = Conn::new();
        c.tls_mode = TlsMode::Require;
        out(&mut c);
        c.inbuf.extend_from_slice(&3u32.to_be_bytes());
        c.inbuf.extend_from_slice(&opt(OPT_LIST, &[]));
        c.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm1", &[])));
        c.inbuf.extend_from_slice(&opt(OPT_STARTTLS, &[]));
        c.inbuf.extend_from_slice(b"\x16\x03\x01hello");
        c.process(&ex, &mut reqs);
        let types: Vec<u32> = replies(&out(&mut c)).iter().map(|r| r.1).collect();
        assert_eq!(types, vec![REP_ERR_TLS_REQD, REP_ERR_TLS_REQD, REP_ACK]);
        assert!(c.wants_tls() && !c.in_transmission() && c.closing.is_none());
        // Nothing more is parsed as NBD until the stream has taken over.
        c.process(&ex, &mut reqs);
        assert!(c.out.is_empty());
        assert_eq!(&c.tls_started()[..], b"\x16\x03\x01hello");
        assert!(c.tls_active() && !c.wants_tls());
        // Inside TLS: a second STARTTLS is invalid, GO works.
        c.inbuf.extend_from_slice(&opt(OPT_STARTTLS, &[]));
        c.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm1", &[])));
        c.process(&ex, &mut reqs);
        let r = replies(&out(&mut c));
        assert_eq!(r.first().map(|x| x.1), Some(REP_ERR_INVALID));
        assert_eq!(r.last().map(|x| x.1), Some(REP_ACK));
        assert!(c.in_transmission());

        // Require: NBD_OPT_EXPORT_NAME in plaintext closes; so does a client that cannot
        // negotiate options at all.
        for (flags, option) in [(3u32, Some(OPT_EXPORT_NAME)), (2, None)] {
            let mut c = Conn::new();
            c.tls_mode = TlsMode::Require;
            out(&mut c);
            c.inbuf.extend_from_slice(&flags.to_be_bytes());
            if let Some(o) = option {
                c.inbuf.extend_from_slice(&opt(o, b"vm1"));
            }
            c.process(&ex, &mut reqs);
            assert!(
                matches!(c.closing, Some(Closing::Abort(_))),
                "{flags} {option:?}"
            );
            assert!(!c.in_transmission());
        }

        // Off: STARTTLS is refused by policy and plaintext goes on.
        let mut c = Conn::new();
        out(&mut c);
        c.inbuf.extend_from_slice(&3u32.to_be_bytes());
        c.inbuf.extend_from_slice(&opt(OPT_STARTTLS, &[]));
        c.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm1", &[])));
        c.process(&ex, &mut reqs);
        let r = replies(&out(&mut c));
        assert_eq!(r.first().map(|x| x.1), Some(REP_ERR_POLICY));
        assert!(c.in_transmission() && !c.wants_tls());
        assert!(reqs.is_empty());
    }

    #[test]
    fn list_info_and_unknown_options() {
        let ex = exports();
        let mut c = Conn::new();
        let mut reqs = Vec::new();
        out(&mut c);
        c.inbuf.extend_from_slice(&1u32.to_be_bytes());
        c.inbuf.extend_from_slice(&opt(OPT_LIST, &[]));
        c.inbuf.extend_from_slice(&opt(
            OPT_INFO,
            &go_data("vm2", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
        ));
        c.inbuf
            .extend_from_slice(&opt(OPT_INFO, &go_data("nope", &[])));
        c.inbuf.extend_from_slice(&opt(99, &[])); // unknown option
        c.inbuf.extend_from_slice(&opt(OPT_STARTTLS, &[]));
        c.process(&ex, &mut reqs);
        let r = replies(&out(&mut c));
        let types: Vec<u32> = r.iter().map(|x| x.1).collect();
        assert_eq!(
            types,
            vec![
                REP_SERVER,
                REP_SERVER,
                REP_ACK,
                REP_INFO,
                REP_INFO,
                REP_INFO,
                REP_INFO,
                REP_ACK,
                REP_ERR_UNKNOWN,
                REP_ERR_UNSUP,
                REP_ERR_POLICY
            ]
        );
        assert_eq!(&r[0].2[4..7], b"vm1");
        // NBD_INFO_EXPORT: size and flags; vm2 is rotational.
        let info = &r[3].2;
        assert_eq!(u16::from_be_bytes([info[0], info[1]]), INFO_EXPORT);
        assert_eq!(u64::from_be_bytes(info[2..10].try_into().unwrap()), 2 << 30);
        let tf = u16::from_be_bytes([info[10], info[11]]);
        assert!(
            tf & TFLAG_CAN_MULTI_CONN != 0
                && tf & TFLAG_ROTATIONAL != 0
                && tf & TFLAG_SEND_FLUSH != 0
        );
        assert!(!c.in_transmission() && c.closing.is_none());
    }

    #[test]
    fn export_name_enters_transmission_and_unknown_name_closes() {
        let ex = exports();
        let mut c = Conn::new();
        out(&mut c);
        c.inbuf.extend_from_slice(&0u32.to_be_bytes());
        c.inbuf.extend_from_slice(&opt(OPT_EXPORT_NAME, b"vm2"));
        c.process(&ex, &mut Vec::new());
        let o = out(&mut c);
        assert_eq!(o.len(), 8 + 2 + 124);
        assert_eq!(u64::from_be_bytes(o[0..8].try_into().unwrap()), 2 << 30);
        assert!(c.in_transmission());
        let mut d = Conn::new();
        d.inbuf.extend_from_slice(&2u32.to_be_bytes());
        d.inbuf.extend_from_slice(&opt(OPT_EXPORT_NAME, b"zzz"));
        d.process(&ex, &mut Vec::new());
        assert!(matches!(d.closing, Some(Closing::Abort(_))));
    }

    #[test]
    fn requests_are_decoded_and_bad_ones_answered() {
        let ex = exports();
        let mut c = Conn::new();
        handshake(&mut c, false);
        let mut reqs = Vec::new();
        let mut w = req(CMD_FLAG_FUA, CMD_WRITE, 7, 4096, 5);
        w.extend_from_slice(b"hello");
        // Deliver the write in two pieces: it waits for its payload.
        c.inbuf.extend_from_slice(&w[..30]);
        c.process(&ex, &mut reqs);
        assert!(reqs.is_empty());
        c.inbuf.extend_from_slice(&w[30..]);
        c.inbuf.extend_from_slice(&req(0, CMD_READ, 8, 0, 512));
        c.inbuf.extend_from_slice(&req(0, 99, 9, 0, 0)); // unknown command
        c.inbuf
            .extend_from_slice(&req(CMD_FLAG_NO_HOLE, CMD_WRITE, 10, 0, 0)); // bad flag for WRITE
        c.inbuf
            .extend_from_slice(&req(0, CMD_READ, 11, 0, 64 << 20)); // oversize read
        c.inbuf.extend_from_slice(&req(
            CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
            CMD_WRITE_ZEROES,
            12,
            0,
            4096,
        ));
        c.process(&ex, &mut reqs);
        assert_eq!(reqs.len(), 3);
        assert_eq!(
            (
                reqs[0].handle,
                reqs[0].kind,
                reqs[0].fua,
                reqs[0].payload.as_deref()
            ),
            (7, ReqKind::Write, true, Some(&b"hello"[..]))
        );
        assert_eq!((reqs[1].kind, reqs[1].length), (ReqKind::Read, 512));
        assert!(reqs[2].no_hole && reqs[2].fua);
        let o = out(&mut c);
        // Three simple error replies: EINVAL, EINVAL, EOVERFLOW.
        assert_eq!(o.len(), 48);
        let errs: Vec<(u32, u64)> = o
            .chunks(16)
            .map(|r| {
                (
                    u32::from_be_bytes(r[4..8].try_into().unwrap()),
                    u64::from_be_bytes(r[8..16].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(errs, vec![(EINVAL, 9), (EINVAL, 10), (EOVERFLOW, 11)]);
        assert!(c.closing.is_none());
    }

    #[test]
    fn oversize_write_payload_is_skipped_and_the_stream_stays_in_sync() {
        let ex = exports();
        let mut c = Conn::new();
        handshake(&mut c, false);
        let mut reqs = Vec::new();
        let n = (33u32 << 20) as usize;
        c.inbuf
            .extend_from_slice(&req(0, CMD_WRITE, 1, 0, n as u32));
        c.inbuf.extend_from_slice(&vec![0xAB; n]);
        c.inbuf.extend_from_slice(&req(0, CMD_FLUSH, 2, 0, 0));
        c.process(&ex, &mut reqs);
        assert_eq!(reqs.len(), 1);
        assert_eq!((reqs[0].handle, reqs[0].kind), (2, ReqKind::Flush));
        let o = out(&mut c);
        assert_eq!(u32::from_be_bytes(o[4..8].try_into().unwrap()), EINVAL);
    }

    #[test]
    fn bad_magic_aborts_and_disc_closes_gracefully() {
        let ex = exports();
        let mut c = Conn::new();
        handshake(&mut c, false);
        let mut bad = req(0, CMD_READ, 1, 0, 512);
        bad[0] = 0;
        c.inbuf.extend_from_slice(&bad);
        c.process(&ex, &mut Vec::new());
        assert!(matches!(c.closing, Some(Closing::Abort(_))) && c.finished());
        let mut d = Conn::new();
        handshake(&mut d, false);
        let mut reqs = Vec::new();
        d.inbuf.extend_from_slice(&req(0, CMD_READ, 1, 0, 512));
        d.inbuf.extend_from_slice(&req(0, CMD_DISC, 2, 0, 0));
        d.process(&ex, &mut reqs);
        assert_eq!(reqs.len(), 1);
        assert!(!d.finished(), "a reply is still due");
        d.reply(1, CMD_READ, 0, Ok(()), Some(Bytes::from(vec![0; 512])));
        out(&mut d);
        assert!(d.finished());
    }

    #[test]
    fn structured_read_replies() {
        let ex = exports();
        let mut c = Conn::new();
        handshake(&mut c, true);
        c.reply(5, CMD_READ, 4096, Ok(()), Some(Bytes::from_static(b"abcd")));
        let o = out(&mut c);
        assert_eq!(
            u32::from_be_bytes(o[0..4].try_into().unwrap()),
            STRUCTURED_REPLY_MAGIC
        );
        assert_eq!(u16::from_be_bytes([o[4], o[5]]), REPLY_FLAG_DONE);
        assert_eq!(u16::from_be_bytes([o[6], o[7]]), REPLY_TYPE_OFFSET_DATA);
        assert_eq!(u32::from_be_bytes(o[16..20].try_into().unwrap()), 12);
        assert_eq!(u64::from_be_bytes(o[20..28].try_into().unwrap()), 4096);
        assert_eq!(&o[28..], b"abcd");
        c.reply(6, CMD_READ, 0, Err(Errno::Inval), None);
        let o = out(&mut c);
        assert_eq!(u16::from_be_bytes([o[6], o[7]]), REPLY_TYPE_ERROR);
        assert_eq!(u32::from_be_bytes(o[20..24].try_into().unwrap()), 22);
        // Non-read commands may use simple replies.
        c.reply(7, CMD_FLUSH, 0, Ok(()), None);
        assert_eq!(out(&mut c).len(), 16);
        let _ = ex;
    }

    fn meta_data(export: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = (export.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(export.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    #[test]
    fn meta_contexts_are_negotiated_and_gate_block_status() {
        let ex = exports();
        let mut c = Conn::new();
        out(&mut c);
        c.inbuf.extend_from_slice(&3u32.to_be_bytes());
        // SET before structured replies: refused. LIST works and names the context.
        let set = meta_data("vm1", &["base:allocation", "qemu:other"]);
        c.inbuf.extend_from_slice(&opt(OPT_SET_META_CONTEXT, &set));
        c.inbuf
            .extend_from_slice(&opt(OPT_LIST_META_CONTEXT, &meta_data("vm1", &[])));
        c.inbuf.extend_from_slice(&opt(OPT_STRUCTURED_REPLY, &[]));
        c.inbuf.extend_from_slice(&opt(
            OPT_SET_META_CONTEXT,
            &meta_data("nope", &["base:allocation"]),
        ));
        c.inbuf.extend_from_slice(&opt(OPT_SET_META_CONTEXT, &set));
        c.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm1", &[])));
        c.process(&ex, &mut Vec::new());
        let r = replies(&out(&mut c));
        let types: Vec<u32> = r.iter().map(|x| x.1).collect();
        assert_eq!(
            types,
            vec![
                REP_ERR_INVALID,
                REP_META_CONTEXT,
                REP_ACK,
                REP_ACK,
                REP_ERR_UNKNOWN,
                REP_META_CONTEXT,
                REP_ACK,
                REP_INFO,
                REP_ACK
            ]
        );
        assert_eq!(&r[5].2[..4], &1u32.to_be_bytes());
        assert_eq!(&r[5].2[4..], b"base:allocation");
        let tf = u16::from_be_bytes([r[7].2[10], r[7].2[11]]);
        assert!(tf & TFLAG_SEND_CACHE != 0 && tf & TFLAG_READ_ONLY == 0);
        let mut reqs = Vec::new();
        c.inbuf
            .extend_from_slice(&req(CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, 4, 4096, 8192));
        c.inbuf
            .extend_from_slice(&req(0, CMD_BLOCK_STATUS, 5, 1 << 30, 1)); // beyond the end
        c.process(&ex, &mut reqs);
        assert!(reqs.is_empty());
        assert_eq!(
            c.status_queries,
            vec![StatusQuery {
                handle: 4,
                volume: VolumeId(0),
                offset: 4096,
                length: 8192,
                req_one: true
            }]
        );
        assert_eq!(c.in_flight, 1);
        let o = out(&mut c);
        assert_eq!(u32::from_be_bytes(o[4..8].try_into().unwrap()), EINVAL);
        // Contexts chosen for vm1 do not apply to a connection that went to vm2.
        let mut d = Conn::new();
        out(&mut d);
        d.inbuf.extend_from_slice(&3u32.to_be_bytes());
        d.inbuf.extend_from_slice(&opt(OPT_STRUCTURED_REPLY, &[]));
        d.inbuf.extend_from_slice(&opt(OPT_SET_META_CONTEXT, &set));
        d.inbuf
            .extend_from_slice(&opt(OPT_GO, &go_data("vm2", &[])));
        d.inbuf
            .extend_from_slice(&req(0, CMD_BLOCK_STATUS, 6, 0, 4096));
        d.process(&ex, &mut Vec::new());
        assert!(d.status_queries.is_empty());
        let o = out(&mut d);
        assert_eq!(
            u32::from_be_bytes(o[o.len() - 12..o.len() - 8].try_into().unwrap()),
            EINVAL
        );
    }
}
