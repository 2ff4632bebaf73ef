//! In-process request sources: threads of this process (the vhost-user-blk queue workers)
//! hand the server requests through a channel and get each completion back through a
//! callback. The engine stays on the server's thread, and these requests take the NBD
//! path: the same `Engine::submit`, the same in-flight budget, the same FLUSH semantics
//! (a FLUSH completes once every write acknowledged before it is durable).
//!
//! The server's part is small on purpose: one doorbell token, [`LocalSource::take`] when it
//! fires, and [`LocalSource::complete`] for completions whose id carries [`LOCAL_ID_BIT`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};

use bytes::Bytes;
use slab::Slab;
use tiervisor_engine::{Errno, ReqKind, VmCompletion, VmRequest, VolumeId};

use crate::budget::Budget;

/// Engine request ids with this bit set belong to in-process requests (NBD routes are
/// slab keys, far below it).
pub const LOCAL_ID_BIT: u64 = 1 << 63;

/// Called once with the engine's result (and read data); runs on the server's thread, so
/// it must only hand the result over (a channel send and a wake-up), never block.
pub type ReplyFn = Box<dyn FnOnce(Result<(), Errno>, Option<Bytes>) + Send>;

/// Called on the server's thread once at the end of a pass in which replies carrying it were
/// made (a vhost-user queue signals its guest once per batch, not per request).
pub type NotifyFn = Arc<dyn Fn() + Send + Sync>;

pub struct LocalRequest {
    pub volume: VolumeId,
    pub kind: ReqKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// WRITE_ZEROES must leave the range allocated.
    pub no_hole: bool,
    /// Durable before it is answered (NBD's FUA; a vhost-user volume without a write
    /// cache).
    pub fua: bool,
    pub payload: Option<Bytes>,
    pub reply: ReplyFn,
    pub notify: Option<NotifyFn>,
}

/// An eventfd registered on the shard's poll. Not a `mio::Waker`: mio allows one waker per
/// poll (debug builds assert it), and a shard thread's poll has its own for messages.
struct Doorbell(OwnedFd);

impl Doorbell {
    fn ring(&self) {
        crate::io::poke_eventfd(self.0.as_raw_fd());
    }
}

/// The sending side, cloned into every worker thread.
#[derive(Clone)]
pub struct Submitter {
    tx: Sender<LocalRequest>,
    waker: Arc<Doorbell>,
}

impl Submitter {
    /// Queue a request; call [`Submitter::wake`] once after a batch. Gives the request
    /// back if the server has gone.
    pub fn send(&self, r: LocalRequest) -> Result<(), Box<LocalRequest>> {
        self.tx.send(r).map_err(|e| Box::new(e.0))
    }

    pub fn wake(&self) {
        self.waker.ring();
    }
}

struct Route {
    reply: ReplyFn,
    notify: Option<NotifyFn>,
    /// Payload bytes held against the budget until the reply.
    cost_bytes: u64,
}

/// The server's side.
pub struct LocalSource {
    rx: Receiver<LocalRequest>,
    waker: Arc<Doorbell>,
    routes: Slab<Route>,
    held_bytes: u64,
    /// Requests were left in the channel for the budget: wake once replies free it.
    held_back: bool,
    /// Notifications owed at the end of this pass (each once).
    to_notify: Vec<NotifyFn>,
}

impl LocalSource {
    pub fn new(registry: &mio::Registry, token: mio::Token) -> std::io::Result<(Self, Submitter)> {
        let fd = crate::io::new_eventfd()?;
        registry.register(
            &mut mio::unix::SourceFd(&fd.as_raw_fd()),
            token,
            mio::Interest::READABLE,
        )?;
        let waker = Arc::new(Doorbell(fd));
        let (tx, rx) = channel();
        let source = LocalSource {
            rx,
            waker: waker.clone(),
            routes: Slab::new(),
            held_bytes: 0,
            held_back: false,
            to_notify: Vec::new(),
        };
        Ok((source, Submitter { tx, waker }))
    }

    pub fn owns(id: u64) -> bool {
        id & LOCAL_ID_BIT != 0
    }

    /// Requests in the engine, not yet answered.
    pub fn in_flight(&self) -> usize {
        self.routes.len()
    }

    /// Take waiting requests as engine requests while the budget allows. All in-process
    /// sources count as one connection against `budget` (at least one request is taken
    /// when none is held, as for an idle NBD connection).
    pub fn take(&mut self, budget: &mut Budget, out: &mut Vec<VmRequest>) {
        // Reset the count; a ring after this reads is a new readiness edge.
        crate::io::drain_eventfd(self.waker.0.as_raw_fd());
        loop {
            let limit = budget.limit_for_conn();
            if self.held_bytes > 0 && self.held_bytes >= limit {
                self.held_back = true;
                return;
            }
            let r = match self.rx.try_recv() {
                Ok(r) => r,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            let cost_bytes = match r.kind {
                ReqKind::Read | ReqKind::Write => r.len_bytes,
                _ => 0,
            };
            let id = self.routes.insert(Route {
                reply: r.reply,
                notify: r.notify,
                cost_bytes,
            }) as u64;
            budget.adjust(self.held_bytes, self.held_bytes + cost_bytes);
            self.held_bytes += cost_bytes;
            let mut v = VmRequest::new(
                id | LOCAL_ID_BIT,
                r.volume,
                r.kind,
                r.offset_bytes,
                r.len_bytes,
            );
            v.no_hole = r.no_hole;
            v.fua = r.fua;
            v.payload = r.payload;
            out.push(v);
        }
    }

    /// Answer a completion whose id [`LocalSource::owns`].
    pub fn complete(&mut self, c: VmCompletion, budget: &mut Budget) {
        let Some(route) = self.routes.try_remove((c.id & !LOCAL_ID_BIT) as usize) else {
            return;
        };
        budget.adjust(self.held_bytes, self.held_bytes - route.cost_bytes);
        self.held_bytes -= route.cost_bytes;
        (route.reply)(c.result, c.data);
        if let Some(n) = route.notify
            && !self.to_notify.iter().any(|m| Arc::ptr_eq(m, &n))
        {
            self.to_notify.push(n);
        }
        if self.held_back {
            self.held_back = false;
            self.waker.ring();
        }
    }
}

impl LocalSource {
    /// The server's pass is done: run the notifications its replies owe.
    pub fn end_pass(&mut self) {
        for n in self.to_notify.drain(..) {
            n();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn req(kind: ReqKind, len: u64, log: Arc<Mutex<Vec<Result<(), Errno>>>>) -> LocalRequest {
        LocalRequest {
            volume: VolumeId(0),
            kind,
            offset_bytes: 0,
            len_bytes: len,
            no_hole: false,
            fua: false,
            payload: None,
            reply: Box::new(move |r, _| log.lock().unwrap().push(r)),
            notify: None,
        }
    }

    #[test]
    fn requests_wait_in_the_channel_while_the_budget_is_used_and_replies_wake_them() {
        let mut poll = mio::Poll::new().unwrap();
        let (mut src, tx) = LocalSource::new(poll.registry(), mio::Token(9)).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut budget = Budget::new(8192, 1 << 20);
        for _ in 0..3 {
            assert!(tx.send(req(ReqKind::Read, 4096, log.clone())).is_ok());
        }
        let mut out = Vec::new();
        src.take(&mut budget, &mut out);
        // Two reads fill the 8 KiB per-source budget; the third waits in the channel.
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| LocalSource::owns(r.id)));
        assert_eq!(budget.held_total_bytes(), 8192);
        let first = out.remove(0);
        src.complete(
            VmCompletion {
                id: first.id,
                volume: first.volume,
                kind: first.kind,
                result: Ok(()),
                data: None,
            },
            &mut budget,
        );
        assert_eq!(log.lock().unwrap().as_slice(), &[Ok(())]);
        assert_eq!(budget.held_total_bytes(), 4096);
        // The reply freed budget and woke the server: the third request is taken now.
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(std::time::Duration::ZERO))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == mio::Token(9)));
        src.take(&mut budget, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(src.in_flight(), 2);
    }

    #[test]
    fn a_pass_notifies_each_source_once_however_many_replies_it_got() {
        let poll = mio::Poll::new().unwrap();
        let (mut src, tx) = LocalSource::new(poll.registry(), mio::Token(9)).unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let c = calls.clone();
        let notify: NotifyFn = Arc::new(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..3 {
            let mut r = req(ReqKind::Flush, 0, log.clone());
            r.notify = Some(notify.clone());
            assert!(tx.send(r).is_ok());
        }
        let mut budget = Budget::new(8192, 1 << 20);
        let mut out = Vec::new();
        src.take(&mut budget, &mut out);
        for r in out {
            let c = VmCompletion {
                id: r.id,
                volume: r.volume,
                kind: r.kind,
                result: Ok(()),
                data: None,
            };
            src.complete(c, &mut budget);
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 0);
        src.end_pass();
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        src.end_pass();
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(log.lock().unwrap().len(), 3);
    }
}
