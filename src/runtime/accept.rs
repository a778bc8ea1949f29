//! Accepting connections on a listening socket (a QP's or a CM listener's) without the progress
//! thread ever waiting for a peer:
//! * connections are accepted non-blocking, and those from users we do not accept (`access`)
//!   are closed at once;
//! * a connection's first message is usually there when it is accepted (our peers send it right
//!   after `connect`); otherwise the connection waits, registered with the engine, until it
//!   arrives. One that sends nothing within `FIRST_MESSAGE_WITHIN` is closed; at most
//!   `MAX_PENDING` wait per listener (a newcomer evicts the oldest) and `MAX_PENDING_TOTAL` in
//!   the process (beyond that a silent newcomer is closed at once);
//! * when `accept4` fails for lack of descriptors or memory, the listener is not watched for a
//!   while (100 ms, doubling up to 1 s), so a level-triggered epoll does not spin on it.

use super::engine::engine;
use super::lock;
use super::{access, unix};
use crate::errno::Result;
use crate::runtime::{read_lock, write_lock};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

/// Called with a connection and its first message (bytes and descriptors). It owns the
/// connection from then on, and drops it to refuse the peer.
pub type OnFirst = Box<dyn Fn(OwnedFd, &[u8], Vec<OwnedFd>) + Send + Sync>;

pub const FIRST_MESSAGE_WITHIN: Duration = Duration::from_secs(3);
pub const MAX_PENDING: usize = 64;
pub const MAX_PENDING_TOTAL: usize = 256;
/// Connections of this process waiting for their first message, over all listeners.
static PENDING_TOTAL: AtomicUsize = AtomicUsize::new(0);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Connections accepted per readiness event, so a flood does not starve other sockets.
const BATCH: usize = 64;
/// Larger than every first message of our protocols (a CM message, a QP hello).
const FIRST_MAX: usize = 1024;

struct Pending {
    raw: RawFd,
    conn: Mutex<Option<OwnedFd>>,
    deadline: Instant,
}

struct Inner {
    /// Taken out when the acceptor is dropped, so the listener is closed (and an abstract name
    /// free again) before the drop returns, even while the progress thread still holds `Inner`
    /// (a callback that was preempted). Read-locked only around a system call on it.
    listener: RwLock<Option<Arc<OwnedFd>>>,
    pending: Mutex<VecDeque<Arc<Pending>>>,
    retry: Mutex<Duration>,
    sweep_armed: AtomicBool,
    closed: AtomicBool,
    on_first: OnFirst,
}

/// Accepts on a listener for as long as it lives.
pub struct Acceptor(Arc<Inner>);

impl Acceptor {
    pub fn start(listener: Arc<OwnedFd>, on_first: OnFirst) -> Result<Acceptor> {
        let inner = Arc::new(Inner {
            listener: RwLock::new(Some(listener)),
            pending: Mutex::new(VecDeque::new()),
            retry: Mutex::new(RETRY_MIN),
            sweep_armed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            on_first,
        });
        inner.watch_listener()?;
        Ok(Acceptor(inner))
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        let listener = write_lock(&self.0.listener).take();
        if let (Some(l), Ok(e)) = (&listener, engine()) {
            e.unwatch(l.as_raw_fd());
        }
        drop(listener);
        let all: Vec<_> = lock(&self.0.pending).drain(..).collect();
        for p in all {
            p.close();
        }
    }
}

impl Pending {
    fn new(conn: OwnedFd) -> Option<Arc<Pending>> {
        let n = PENDING_TOTAL.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_PENDING_TOTAL {
            PENDING_TOTAL.fetch_sub(1, Ordering::SeqCst);
            return None; // dropping `conn` closes it
        }
        Some(Arc::new(Pending {
            raw: conn.as_raw_fd(),
            conn: Mutex::new(Some(conn)),
            deadline: Instant::now() + FIRST_MESSAGE_WITHIN,
        }))
    }

    /// Takes the connection out (once): it no longer counts as waiting.
    fn take(&self) -> Option<OwnedFd> {
        let c = lock(&self.conn).take();
        if c.is_some() {
            PENDING_TOTAL.fetch_sub(1, Ordering::SeqCst);
        }
        c
    }

    /// Stops watching and closes the connection (unless it was handed on already).
    fn close(&self) {
        if let Some(conn) = self.take() {
            if let Ok(e) = engine() {
                e.unwatch(self.raw);
            }
            drop(conn);
        }
    }
}

impl Inner {
    /// Runs `f` on the listener's descriptor unless the acceptor was dropped (`None`). The
    /// read lock keeps the descriptor open, and its number ours, for the call.
    fn with_listener<R>(&self, f: impl FnOnce(RawFd) -> R) -> Option<R> {
        let g = read_lock(&self.listener);
        g.as_ref().map(|l| f(l.as_raw_fd()))
    }

    fn watch_listener(self: &Arc<Self>) -> Result<()> {
        let w = Arc::downgrade(self);
        let e = engine()?;
        // Under the read lock, so a concurrent drop unwatches after this watch, never before.
        self.with_listener(|fd| {
            if self.closed.load(Ordering::SeqCst) {
                return Ok(());
            }
            e.watch(
                fd,
                Arc::new(move |_| {
                    if let Some(i) = w.upgrade() {
                        i.on_listener_readable();
                    }
                }),
            )
        })
        .unwrap_or(Ok(()))
    }

    fn on_listener_readable(self: &Arc<Self>) {
        for _ in 0..BATCH {
            let Some(accepted) = self.with_listener(unix::accept) else { return };
            match accepted {
                Ok(Some(conn)) => {
                    *lock(&self.retry) = RETRY_MIN;
                    self.admit(conn);
                }
                Ok(None) => return,
                Err(e) if matches!(e.0, libc::ECONNABORTED | libc::EINTR | libc::EPROTO) => {}
                // EMFILE, ENFILE, ENOMEM, ENOBUFS, or anything unexpected: back off.
                Err(_) => return self.pause(),
            }
        }
    }

    /// Stops watching the listener and watches it again after a growing delay.
    fn pause(self: &Arc<Self>) {
        let Ok(e) = engine() else { return };
        self.with_listener(|fd| e.unwatch(fd));
        let delay = {
            let mut r = lock(&self.retry);
            let d = *r;
            *r = (d * 2).min(RETRY_MAX);
            d
        };
        let w = Arc::downgrade(self);
        e.after(
            delay,
            Box::new(move || {
                if let Some(i) = w.upgrade() {
                    if !i.closed.load(Ordering::SeqCst) && i.watch_listener().is_err() {
                        i.pause();
                    }
                }
            }),
        );
    }

    fn admit(self: &Arc<Self>, conn: OwnedFd) {
        if !unix::peer_uid(conn.as_raw_fd()).is_ok_and(access::allowed) {
            return; // another user: closed
        }
        let mut buf = [0u8; FIRST_MAX];
        match unix::recv(conn.as_raw_fd(), &mut buf) {
            Err(e) if e == crate::Errno::EAGAIN => {}
            Ok(Some((n, fds))) => return (self.on_first)(conn, &buf[..n.min(FIRST_MAX)], fds),
            _ => return, // closed at once, or an error: dropped
        }
        let Ok(e) = engine() else { return };
        let Some(p) = Pending::new(conn) else { return };
        let evicted = {
            let mut q = lock(&self.pending);
            let old = if q.len() >= MAX_PENDING { q.pop_front() } else { None };
            q.push_back(p.clone());
            old
        };
        if let Some(old) = evicted {
            old.close();
        }
        let w = Arc::downgrade(self);
        let p2 = p.clone();
        let watched = e.watch(
            p.raw,
            Arc::new(move |_| match w.upgrade() {
                Some(i) => i.on_first_readable(&p2),
                // The acceptor is gone: a level-triggered watch must not stay behind.
                None => p2.close(),
            }),
        );
        if watched.is_err() {
            self.forget(&p);
            p.take();
            return;
        }
        if self.closed.load(Ordering::SeqCst) {
            // Dropped while we were accepting: do not leave this one behind.
            self.forget(&p);
            p.close();
            return;
        }
        self.arm_sweep(FIRST_MESSAGE_WITHIN);
    }

    fn forget(&self, p: &Arc<Pending>) {
        lock(&self.pending).retain(|q| !Arc::ptr_eq(q, p));
    }

    fn on_first_readable(&self, p: &Arc<Pending>) {
        let mut buf = [0u8; FIRST_MAX];
        let slot = lock(&p.conn);
        let Some(fd) = slot.as_ref() else { return };
        let r = unix::recv(fd.as_raw_fd(), &mut buf);
        drop(slot);
        if matches!(r, Err(e) if e == crate::Errno::EAGAIN) {
            return;
        }
        let conn = p.take();
        if let Ok(e) = engine() {
            e.unwatch(p.raw);
        }
        self.forget(p);
        if let (Ok(Some((n, fds))), Some(conn)) = (r, conn) {
            (self.on_first)(conn, &buf[..n.min(FIRST_MAX)], fds);
        }
    }

    /// Closes the connections whose first message is overdue, once per period.
    fn arm_sweep(self: &Arc<Self>, after: Duration) {
        if self.sweep_armed.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(e) = engine() else { return };
        let w: Weak<Inner> = Arc::downgrade(self);
        e.after(
            after,
            Box::new(move || {
                let Some(i) = w.upgrade() else { return };
                i.sweep_armed.store(false, Ordering::SeqCst);
                let now = Instant::now();
                let (late, next) = {
                    let mut q = lock(&i.pending);
                    let late: Vec<_> = q.iter().filter(|p| p.deadline <= now).cloned().collect();
                    q.retain(|p| p.deadline > now);
                    (late, q.iter().map(|p| p.deadline).min())
                };
                for p in late {
                    p.close();
                }
                if let Some(at) = next {
                    i.arm_sweep(at.saturating_duration_since(now) + Duration::from_millis(1));
                }
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener's name is free once its acceptor is dropped, even while the progress thread
    /// still holds the acceptor's state (a callback preempted mid-way): librspreload's fork
    /// mode has child after child listen on one port, each right after the last one closed.
    #[test]
    fn dropping_an_acceptor_frees_its_name_at_once() {
        let name = format!("rdmashim-test-accept-{}", std::process::id());
        let fd = Arc::new(unix::listen(&name).expect("listen"));
        let acceptor = Acceptor::start(fd.clone(), Box::new(|_, _, _| {})).expect("start");
        drop(fd);
        let held = acceptor.0.clone(); // what an in-flight callback holds
        drop(acceptor);
        assert!(held.with_listener(|_| ()).is_none(), "the descriptor outlived the acceptor");
        unix::listen(&name).expect("the name is still taken after the acceptor was dropped");
    }
}
