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

use crate::errno::{check, Errno, Result};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

pub struct FdQueue<T> {
    efd: OwnedFd,
    inner: Mutex<Inner<T>>,
    /// Bumped by a push while someone waits; blocked waiters sleep in `FUTEX_WAIT` on it.
    pushes: AtomicU32,
}

struct Inner<T> {
    items: VecDeque<T>,
    /// Threads in (or about to enter) `FUTEX_WAIT` on `pushes`.
    waiters: usize,
}

/// `FUTEX_WAIT` (sleeps while `word` holds `val`) or `FUTEX_WAKE` (wakes up to `val` sleepers).
pub(crate) fn futex(word: &AtomicU32, op: libc::c_int, val: u32) -> libc::c_long {
    // SAFETY: FUTEX_WAIT/FUTEX_WAKE on a live, aligned u32 of ours; no timeout, no second word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            std::ptr::null::<libc::timespec>(),
        )
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
            inner: Mutex::new(Inner { items: VecDeque::new(), waiters: 0 }),
            pushes: AtomicU32::new(0),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn inner(&self) -> MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the fd not readable (called when the queue turns empty, under the lock). The
    /// counter is 1 then, so the read returns at once.
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our eventfd.
        unsafe { libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn push(&self, item: T) {
        let mut g = self.inner();
        g.items.push_back(item);
        if g.items.len() == 1 {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        if g.waiters > 0 {
            self.pushes.fetch_add(1, Ordering::Release);
            futex(&self.pushes, libc::FUTEX_WAKE, i32::MAX as u32);
        }
    }

    /// Takes the oldest item, waiting for one unless the application made the fd non-blocking
    /// (`EAGAIN`). A signal whose handler lacks `SA_RESTART` ends the wait with `EINTR` (the
    /// item that arrives later stays queued).
    pub fn pop_wait(&self) -> Result<T> {
        loop {
            let seen = {
                let mut g = self.inner();
                if let Some(item) = g.items.pop_front() {
                    if g.items.is_empty() {
                        self.clear();
                    }
                    return Ok(item);
                }
                // SAFETY: fcntl(F_GETFL) on our own descriptor.
                let fl = check(unsafe { libc::fcntl(self.efd.as_raw_fd(), libc::F_GETFL) })?;
                if fl & libc::O_NONBLOCK != 0 {
                    return Err(Errno::EAGAIN);
                }
                g.waiters += 1;
                // Read under the lock: a later push changes it, so the wait below returns at once
                // (EAGAIN) if the push comes before the thread sleeps.
                self.pushes.load(Ordering::Acquire)
            };
            let r = futex(&self.pushes, libc::FUTEX_WAIT, seen);
            let err = Errno::last();
            self.inner().waiters -= 1;
            if r < 0 && err.0 != libc::EAGAIN {
                return Err(err);
            }
        }
    }

    /// Removes and returns the pending items that `pick` selects, keeping the others in order.
    pub fn take(&self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut g = self.inner();
        let was_empty = g.items.is_empty();
        let (taken, kept): (Vec<T>, Vec<T>) = g.items.drain(..).partition(|i| pick(i));
        g.items.extend(kept);
        if !was_empty && g.items.is_empty() {
            self.clear();
        }
        taken
    }
}
