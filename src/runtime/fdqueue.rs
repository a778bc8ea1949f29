//! A queue with a file descriptor that is readable exactly while items are pending, as the
//! kernel's event files are: an eventfd whose counter is 1 while the queue is non-empty and 0
//! otherwise (kept so under the queue's lock). Applications poll it, put it in epoll, or set
//! `O_NONBLOCK` on it (then an empty queue gives `EAGAIN`). Used by CM event channels,
//! completion channels and async events.
//!
//! **Blocking and signals.** The kernel's originals block in `read()` on the event file: a
//! signal whose handler lacks `SA_RESTART` ends the call with `EINTR`, one with `SA_RESTART`
//! restarts it unseen. `poll()` cannot give both (it returns `EINTR` either way), so a waiter
//! sleeps in `FUTEX_WAIT` on a push counter, which the kernel interrupts or restarts by the same
//! `SA_RESTART` rule (signal(7)), and costs no descriptor. A push while someone waits bumps the
//! counter and wakes the waiters; each rechecks the queue, so an item taken by another thread
//! first only costs a second look. Removing items (a destroyed id's events) never leaves the
//! public fd readable with nothing to fetch.
//!
//! A waiter may sleep on a shared word instead ([`SharedSleep`], the doorbell of
//! `engine::Direct`): peers' rings wake it there, and a push wakes it there too. Such a
//! waiter first spins for a while ([`super::spin`]), doing the rings' work itself; what it
//! pushes to the queue it waits on meanwhile does not touch the eventfd (nobody else could take
//! it before this thread does), so an event found spinning costs no system call.

use crate::errno::{check, Errno, Result};
use crate::runtime::lock;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

thread_local! {
    /// The queue this thread spins on in `pop_wait_via` (its address), 0 when none.
    static SPINNING_ON: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

pub struct FdQueue<T> {
    efd: OwnedFd,
    inner: Mutex<Inner<T>>,
    /// Bumped by a push while someone waits; blocked waiters sleep in `FUTEX_WAIT` on it.
    pushes: AtomicU32,
}

struct Inner<T> {
    items: VecDeque<T>,
    /// The eventfd's counter is 1 (the fd is readable).
    signalled: bool,
    /// Threads in (or about to enter) `FUTEX_WAIT` on `pushes`.
    waiters: usize,
    /// Shared words a waiter sleeps on instead (see [`SharedSleep`]), one entry per waiter.
    shared: Vec<&'static AtomicU32>,
}

/// `FUTEX_WAIT` (sleeps while `word` holds `val`) or `FUTEX_WAKE` (wakes up to `val` sleepers).
pub(crate) fn futex(word: &AtomicU32, op: libc::c_int, val: u32) -> libc::c_long {
    futex_op(word, op | libc::FUTEX_PRIVATE_FLAG, val)
}

/// [`futex`] on a word in memory shared with other processes (a doorbell segment): they wake
/// it, so the key must be the mapping's, not this process's.
pub(crate) fn futex_shared(word: &AtomicU32, op: libc::c_int, val: u32) -> libc::c_long {
    futex_op(word, op, val)
}

fn futex_op(word: &AtomicU32, op: libc::c_int, val: u32) -> libc::c_long {
    // SAFETY: FUTEX_WAIT/FUTEX_WAKE on a live, aligned u32 (ours, or in a mapping that lives as
    // long as the engine); no timeout, no second word.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op, val, std::ptr::null::<libc::timespec>())
    }
}

/// Another way for [`FdQueue::pop_wait_via`] to sleep: on a futex word shared with the
/// processes whose doorbell rings wake it (`engine::Direct`), so that the waiter itself is the
/// thread a peer wakes, and does the work the ring asks for.
pub trait SharedSleep {
    /// The shared futex word.
    fn word(&self) -> &'static AtomicU32;
    /// Advertises the sleeper to peers, then does the work a ring would ask for (which may push
    /// to this queue); returns the word's value to sleep on, read before advertising.
    fn prepare(&self) -> u32;
    /// Does the rings' work once without sleeping, with peers told that a thread of ours will
    /// look (so their rings need no system call); `false` if this sleeper cannot spin.
    fn spin(&self) -> bool {
        false
    }
}

impl<T> FdQueue<T> {
    pub fn new() -> Result<FdQueue<T>> {
        // SAFETY: plain eventfd(2) call.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        // SAFETY: fd was just created and is owned here.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(FdQueue {
            efd,
            inner: Mutex::new(Inner {
                items: VecDeque::new(),
                signalled: false,
                waiters: 0,
                shared: Vec::new(),
            }),
            pushes: AtomicU32::new(0),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn inner(&self) -> MutexGuard<'_, Inner<T>> {
        lock(&self.inner)
    }

    /// Makes the fd readable exactly while items are pending (under the lock). A read only
    /// happens with the counter at 1, so it returns at once.
    fn signal(&self, g: &mut Inner<T>) {
        let want = !g.items.is_empty();
        if want == g.signalled {
            return;
        }
        let mut v: u64 = 1;
        // SAFETY: writing or reading 8 bytes from a valid u64 to or from our eventfd.
        unsafe {
            if want {
                libc::write(self.efd.as_raw_fd(), (&v as *const u64).cast(), 8);
            } else {
                libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
            }
        }
        g.signalled = want;
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    pub fn push(&self, item: T) {
        let mut g = self.inner();
        g.items.push_back(item);
        // The thread spinning on this queue pushes what it takes right after: no eventfd trip.
        if SPINNING_ON.with(|c| c.get()) != self.addr() {
            self.signal(&mut g);
        }
        // The words change under the lock (a waiter reads them under it, so it cannot miss the
        // change); the wake-ups come after it is dropped, or each woken waiter would sleep again
        // at once on the lock we hold.
        let private = g.waiters > 0;
        if private {
            self.pushes.fetch_add(1, Ordering::Release);
        }
        for w in &g.shared {
            w.fetch_add(1, Ordering::SeqCst);
        }
        // Empty (no allocation) unless a thread sleeps on a doorbell for this queue.
        let shared = g.shared.clone();
        drop(g);
        if private {
            futex(&self.pushes, libc::FUTEX_WAKE, i32::MAX as u32);
        }
        for w in shared {
            futex_shared(w, libc::FUTEX_WAKE, i32::MAX as u32);
        }
    }

    /// Takes the oldest item, waiting for one unless the application made the fd non-blocking
    /// (`EAGAIN`). A signal whose handler lacks `SA_RESTART` ends the wait with `EINTR` (the
    /// item that arrives later stays queued).
    pub fn pop_wait(&self) -> Result<T> {
        self.pop_wait_via(None)
    }

    /// The oldest item, or `None` after checking (if `check`) that the application lets us
    /// wait (`EAGAIN` if the fd is non-blocking). Called with the lock held.
    fn take_or_check(&self, g: &mut Inner<T>, check_fl: bool) -> Result<Option<T>> {
        if let Some(item) = g.items.pop_front() {
            self.signal(g);
            return Ok(Some(item));
        }
        if !check_fl {
            return Ok(None);
        }
        // SAFETY: fcntl(F_GETFL) on our own descriptor.
        let fl = check(unsafe { libc::fcntl(self.efd.as_raw_fd(), libc::F_GETFL) })?;
        if fl & libc::O_NONBLOCK != 0 {
            return Err(Errno::EAGAIN);
        }
        Ok(None)
    }

    /// [`FdQueue::pop_wait`], sleeping on `via`'s shared word when given (a push wakes it
    /// there too), after letting it prepare with no lock held. The `EINTR`/`SA_RESTART` rule is
    /// the same: both are `FUTEX_WAIT`.
    pub fn pop_wait_via(&self, via: Option<&dyn SharedSleep>) -> Result<T> {
        if let Some(v) = via {
            if let Some(item) = self.spin_for(v)? {
                return Ok(item);
            }
        }
        loop {
            let prepared = match via {
                Some(v) => {
                    if let Some(item) = self.take_or_check(&mut self.inner(), true)? {
                        return Ok(item);
                    }
                    Some((v.word(), v.prepare()))
                }
                None => None,
            };
            let (word, seen) = {
                let mut g = self.inner();
                // Checked just before `prepare`: one fcntl per wait.
                if let Some(item) = self.take_or_check(&mut g, prepared.is_none())? {
                    return Ok(item);
                }
                match prepared {
                    // Read before `prepare` did its work: a push or ring since then changed it.
                    Some((w, seen)) => {
                        g.shared.push(w);
                        (w, seen)
                    }
                    None => {
                        g.waiters += 1;
                        // Read under the lock: a later push changes it, so the wait below returns
                        // at once (EAGAIN) if the push comes before the thread sleeps.
                        (&self.pushes, self.pushes.load(Ordering::Acquire))
                    }
                }
            };
            let r = if prepared.is_some() {
                futex_shared(word, libc::FUTEX_WAIT, seen)
            } else {
                futex(word, libc::FUTEX_WAIT, seen)
            };
            let err = Errno::last();
            {
                let mut g = self.inner();
                if prepared.is_some() {
                    if let Some(i) = g.shared.iter().position(|&w| std::ptr::eq(w, word)) {
                        g.shared.swap_remove(i);
                    }
                } else {
                    g.waiters -= 1;
                }
            }
            if r < 0 && err.0 != libc::EAGAIN {
                return Err(err);
            }
        }
    }

    /// The spinning phase of [`FdQueue::pop_wait_via`]: polls through `via` for the process's
    /// window (an item at once, `EAGAIN` on a non-blocking fd, or `None` to go to sleep).
    fn spin_for(&self, via: &dyn SharedSleep) -> Result<Option<T>> {
        if let Some(item) = self.take_or_check(&mut self.inner(), true)? {
            return Ok(Some(item));
        }
        let spin = super::spin::process();
        let window = spin.window();
        if window.is_zero() {
            return Ok(None);
        }
        let end = std::time::Instant::now() + window;
        let was = SPINNING_ON.with(|c| c.replace(self.addr()));
        let found = loop {
            let polled = via.spin();
            if let Some(item) = self.take_or_check(&mut self.inner(), false)? {
                break Some(item);
            }
            if !polled || std::time::Instant::now() >= end {
                break None;
            }
            std::hint::spin_loop();
        };
        SPINNING_ON.with(|c| c.set(was));
        spin.record(found.is_some());
        Ok(found)
    }

    /// Removes and returns the pending items that `pick` selects, keeping the others in order.
    pub fn take(&self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut g = self.inner();
        let was_empty = g.items.is_empty();
        let (taken, kept): (Vec<T>, Vec<T>) = g.items.drain(..).partition(|i| pick(i));
        g.items.extend(kept);
        if !was_empty {
            self.signal(&mut g);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A sleeper on a word of its own, whose `prepare` may find the item itself.
    struct Word {
        word: &'static AtomicU32,
        prepared: AtomicU32,
        push_in_prepare: Option<Arc<FdQueue<u32>>>,
    }

    impl SharedSleep for Word {
        fn word(&self) -> &'static AtomicU32 {
            self.word
        }
        fn prepare(&self) -> u32 {
            let seen = self.word.load(Ordering::SeqCst);
            self.prepared.fetch_add(1, Ordering::SeqCst);
            if let Some(q) = &self.push_in_prepare {
                q.push(5);
            }
            seen
        }
    }

    /// What `prepare` pushes is taken without sleeping.
    #[test]
    fn an_item_found_by_prepare_is_returned() {
        let q = Arc::new(FdQueue::new().expect("queue"));
        let w = Word {
            word: Box::leak(Box::new(AtomicU32::new(0))),
            prepared: AtomicU32::new(0),
            push_in_prepare: Some(q.clone()),
        };
        assert_eq!(q.pop_wait_via(Some(&w)), Ok(5));
        assert_eq!(w.prepared.load(Ordering::SeqCst), 1);
    }

    /// A push from another thread wakes a waiter asleep on a shared word.
    #[test]
    fn a_push_wakes_a_shared_sleeper() {
        let q = Arc::new(FdQueue::new().expect("queue"));
        let w = Word {
            word: Box::leak(Box::new(AtomicU32::new(0))),
            prepared: AtomicU32::new(0),
            push_in_prepare: None,
        };
        let done = Arc::new(AtomicBool::new(false));
        let (q2, d2) = (q.clone(), done.clone());
        let t = std::thread::spawn(move || {
            // Until the waiter is registered (or has already returned): no lost push either way.
            while q2.inner().shared.is_empty() && !d2.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            q2.push(9);
        });
        assert_eq!(q.pop_wait_via(Some(&w)), Ok(9));
        done.store(true, Ordering::SeqCst);
        t.join().expect("pusher");
        assert!(q.inner().shared.is_empty(), "the sleeper is unregistered");
    }
}
