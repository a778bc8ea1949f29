//! SO_KEEPALIVE on stream rsockets, as librdmacm's keepalive service thread does it: every
//! `TCP_KEEPIDLE` seconds a connected socket with the option on sends a zero-byte RDMA WRITE
//! with immediate `CTRL | KEEPALIVE` (the peer only reposts its receive). A dead peer (killed,
//! no disconnect) then fails that write once the RC retries run out; the error completion ends
//! the connection and wakes whoever waits in `rrecv`, `rsend` or `rpoll` with `ECONNRESET`.
//!
//! One thread per process (per fork generation: a child starts with no thread and no list)
//! sleeps until the earliest deadline; `update` wakes it when a socket's interval changes.

use super::stream::{Phase, Stream};
use super::wire;
use crate::runtime::fork;
use crate::runtime::lock;
use once_cell::sync::Lazy;
use std::sync::{Arc, Mutex, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

struct Svc {
    /// The fork generation the list and thread belong to.
    generation: u64,
    thread: Option<Thread>,
    /// Each socket with its next keepalive and its interval (copied here: no socket lock is
    /// taken under this one).
    socks: Vec<(Weak<Stream>, Instant, Duration)>,
}

/// Used under `fork::shared()`, never across a call out, so a child finds it unlocked.
static SVC: Lazy<Mutex<Svc>> =
    Lazy::new(|| Mutex::new(Svc { generation: fork::generation(), thread: None, socks: vec![] }));

/// This generation's service, emptied if it was inherited from the parent.
fn svc_of(g: &mut Svc) -> &mut Svc {
    if g.generation != fork::generation() {
        // The parent's thread did not come along and its sockets are not ours.
        g.socks.clear();
        g.thread = None;
        g.generation = fork::generation();
    }
    g
}

/// librdmacm's default interval when SO_KEEPALIVE is set before TCP_KEEPIDLE: the kernel's.
pub fn default_time() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(7200)
}

/// Starts, restarts (new interval) or stops the keepalive of `s` after its options changed.
pub fn update(s: &Arc<Stream>) {
    let (on, secs) = {
        let st = lock(&s.st);
        (st.opts.keepalive, st.opts.keepalive_time.max(1))
    };
    let _f = fork::shared();
    let mut g = lock(&SVC);
    let svc = svc_of(&mut g);
    svc.socks.retain(|(w, ..)| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(s)));
    if !on {
        return;
    }
    let every = Duration::from_secs(secs as u64);
    svc.socks.push((Arc::downgrade(s), Instant::now() + every, every));
    match &svc.thread {
        Some(t) => t.unpark(),
        None => {
            let h = std::thread::Builder::new().name("rsocket-keepalive".into()).spawn(run);
            svc.thread = h.ok().map(|h| h.thread().clone());
        }
    }
}

/// Stops the keepalive of `s` (close, shutdown).
pub fn remove(s: &Stream) {
    let _f = fork::shared();
    let mut g = lock(&SVC);
    svc_of(&mut g).socks.retain(|(w, ..)| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), s));
}

fn run() {
    let generation = fork::generation();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        let next = {
            let _f = fork::shared();
            let mut g = lock(&SVC);
            if g.generation != generation {
                return;
            }
            g.socks.retain(|(w, ..)| w.strong_count() > 0);
            for (w, at, every) in g.socks.iter_mut() {
                if *at <= now {
                    if let Some(s) = w.upgrade() {
                        *at = now + *every;
                        due.push(s);
                    }
                }
            }
            g.socks.iter().map(|x| x.1).min()
        };
        for s in due {
            send_keepalive(&s);
        }
        match next {
            Some(at) => std::thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => std::thread::park(),
        }
    }
}

/// Posts one keepalive message if the socket is connected and a control slot is free (as
/// librdmacm: otherwise control traffic is in flight and does the same job).
fn send_keepalive(s: &Stream) {
    let mut st = lock(&s.st);
    // Take completions first: a control slot may have come free.
    s.progress(&mut st);
    if st.phase != Phase::Connected {
        return;
    }
    if let Some(ep) = st.ep.as_mut() {
        if ep.ctrl_seqno != ep.ctrl_max_seqno {
            ep.ctrl_seqno += 1;
            let m = wire::msg(wire::OP_CTRL, wire::CTRL_KEEPALIVE);
            if ep.post_write_msg(&mut [], m, false, 0, 0).is_err() {
                st.err = Some(crate::errno::Errno::ECONNRESET);
            }
        }
    }
    drop(st);
    s.kick();
    s.cv.notify_all();
}
