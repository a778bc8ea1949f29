//! A process's doorbell: a word in shared memory that says whether (and how) a thread of ours
//! sleeps, a futex word to wake a direct waiter on, and a datagram socket pair to wake the
//! progress thread's `epoll_wait` (see `engine` for who sleeps where).

use super::shm::Shm;
use crate::errno::{check, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// A process's doorbell words in shared memory (peers write them too, so any value may be
/// found; a wrong one only costs its writer's own wake-ups, as a peer that never rings would).
#[repr(C)]
pub struct BellWord {
    /// `SLEEP_EPOLL` while the progress thread sleeps, `SLEEP_DIRECT` while a [`Direct`](super::engine::Direct) waiter
    /// does (or is about to).
    pub waiting: AtomicU32,
    /// The futex word a [`Direct`](super::engine::Direct) waiter sleeps on; a ring that wakes it bumps it first.
    pub seq: AtomicU32,
}

/// `waiting`: the progress thread sleeps in `epoll_wait`: wake it with a datagram.
pub(super) const SLEEP_EPOLL: u32 = 1;
/// `waiting`: a [`Direct`](super::engine::Direct) waiter is inside its wait and runs the rings before it sleeps or
/// leaves, so a ring needs to wake nobody else: it sets `DIRECT_RUNG`, and wakes the waiter if
/// `DIRECT_ASLEEP` says it sleeps.
pub(super) const SLEEP_DIRECT: u32 = 2;
/// `waiting`: the [`Direct`](super::engine::Direct) waiter sleeps (or is about to) in `FUTEX_WAIT` on `seq`.
pub(super) const DIRECT_ASLEEP: u32 = 4;
/// `waiting`: a ring came since the [`Direct`](super::engine::Direct) waiter's last run.
pub(super) const DIRECT_RUNG: u32 = 8;

const BELL_SIZE: usize = 4096;

/// A doorbell: a shared word and a datagram socket pair.
///
/// The wake-up is a one-byte datagram sent with `MSG_DONTWAIT`, which never blocks whatever the
/// peer does to the file description it shares with us (it can clear `O_NONBLOCK` on an eventfd
/// and fill its counter; it cannot make a `MSG_DONTWAIT` send wait). A full queue means a wake-up
/// is already pending.
pub struct Bell {
    shm: Shm,
    /// The sending end: passed to peers (ours) or received from the peer (theirs).
    tx: OwnedFd,
    /// Our receiving end, watched by the engine; `None` for a peer's doorbell.
    rx: Option<OwnedFd>,
}

impl Bell {
    pub(super) fn create() -> Result<Bell> {
        let shm = Shm::create(BELL_SIZE)?;
        let mut sv = [0; 2];
        // SAFETY: socketpair(2) writes two descriptors into sv.
        check(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
                sv.as_mut_ptr(),
            )
        })?;
        // SAFETY: both descriptors were just created and are owned here.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        Ok(Bell { shm, tx, rx: Some(rx) })
    }

    /// A peer's doorbell received as (segment fd, wake-up socket).
    pub fn from_fds(shm: OwnedFd, tx: OwnedFd) -> Result<Bell> {
        super::shm::check_peer_wake_socket(&tx)?;
        let mut shm = Shm::map(shm, BELL_SIZE)?; // sealed: the peer cannot make it fault
        shm.close_fd(); // a peer's doorbell is only written to: keep the mapping, not the fd
        Ok(Bell { shm, tx, rx: None })
    }

    pub(super) fn word(&self) -> &BellWord {
        // SAFETY: the segment is BELL_SIZE bytes, live while self is, and BellWord is atomics.
        unsafe { &*self.shm.ptr().cast::<BellWord>() }
    }

    /// The descriptors to pass to a peer.
    pub fn fds(&self) -> Result<[RawFd; 2]> {
        Ok([self.shm.fd()?.as_raw_fd(), self.tx.as_raw_fd()])
    }

    /// Wakes the owner if, and only if, a thread of it sleeps: while a direct waiter is in its
    /// wait, only it (it runs the rings for the whole process, and is woken if it sleeps), else
    /// the progress thread. Exactly one ring takes each sleep's advertisement, so each sleep
    /// costs one wake-up.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        let w = self.word();
        let mut wake = 0;
        // A busy owner advertises nothing: one load, no store, no system call.
        let _ = w.waiting.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            let new = if v & SLEEP_DIRECT != 0 {
                wake = v & DIRECT_ASLEEP;
                (v | DIRECT_RUNG) & !DIRECT_ASLEEP
            } else {
                wake = v & SLEEP_EPOLL;
                v & !SLEEP_EPOLL
            };
            (new != v).then_some(new)
        });
        if wake == DIRECT_ASLEEP {
            w.seq.fetch_add(1, Ordering::SeqCst);
            super::fdqueue::futex_shared(&w.seq, libc::FUTEX_WAKE, 1);
        } else if wake == SLEEP_EPOLL {
            self.force_ring();
        }
    }

    pub(super) fn force_ring(&self) {
        // SAFETY: sending one byte from a valid buffer; MSG_DONTWAIT: never blocks (a full queue
        // already holds a wake-up), MSG_NOSIGNAL: a closed peer end gives EPIPE, not SIGPIPE.
        unsafe {
            libc::send(
                self.tx.as_raw_fd(),
                [1u8].as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
    }

    /// Our receiving end: takes the pending wake-ups (at most a queue's worth).
    pub(super) fn drain(&self) {
        let Some(rx) = &self.rx else { return };
        let mut b = [0u8; 16];
        for _ in 0..64 {
            // SAFETY: receiving into a valid buffer of its length, without waiting.
            let r = unsafe {
                libc::recv(rx.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT)
            };
            if r < 0 {
                break;
            }
        }
    }

    pub(super) fn rx_fd(&self) -> RawFd {
        self.rx.as_ref().map_or(-1, |r| r.as_raw_fd())
    }
}
