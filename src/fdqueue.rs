//! A queue with a file descriptor that is readable exactly while items are pending, as the
//! kernel's event files are: an eventfd whose counter is 1 while the queue is non-empty and 0
//! otherwise (kept so under the queue's lock). Applications poll it, put it in epoll, or set
//! `O_NONBLOCK` on it (then an empty queue gives `EAGAIN`). Used by CM event channels,
//! completion channels and async events.
//!
//! **Blocking and signals.** The kernel's originals block in `read()` on the event file: a
//! signal whose handler lacks `SA_RESTART` ends the call with `EINTR`, one with `SA_RESTART`
//! restarts it unseen. `poll()` cannot give both (it returns `EINTR` either way), so a waiter
//! sleeps in a blocking `read()` of a private eventfd in semaphore mode (created on first use):
//! each push while someone waits adds one token, which wakes one waiter, and the kernel applies
//! `SA_RESTART` to that read exactly as to the original's. A woken waiter rechecks the queue, so
//! a token left by an interrupted waiter, or an item taken by another thread first, only costs a
//! second look. Removing items (a destroyed id's events) never leaves the public fd readable
//! with nothing to fetch.

use crate::errno::{check, Errno, Result};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub struct FdQueue<T> {
    efd: OwnedFd,
    inner: Mutex<Inner<T>>,
    /// Blocked waiters sleep in `read()` on this one (semaphore mode, one token per wake-up).
    wake: OnceLock<OwnedFd>,
}

struct Inner<T> {
    items: VecDeque<T>,
    /// Threads in (or about to enter) the blocking read of `wake`.
    waiters: usize,
}

fn eventfd(flags: libc::c_int) -> Result<OwnedFd> {
    // SAFETY: plain eventfd(2) call.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) })?;
    // SAFETY: fd was just created and is owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn add(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64 to an eventfd of ours.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

impl<T> FdQueue<T> {
    pub fn new() -> Result<FdQueue<T>> {
        Ok(FdQueue {
            efd: eventfd(0)?,
            inner: Mutex::new(Inner { items: VecDeque::new(), waiters: 0 }),
            wake: OnceLock::new(),
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
            add(self.efd.as_raw_fd());
        }
        if g.waiters > 0 {
            if let Some(w) = self.wake.get() {
                add(w.as_raw_fd());
            }
        }
    }

    /// Takes the oldest item, waiting for one unless the application made the fd non-blocking
    /// (`EAGAIN`). A signal whose handler lacks `SA_RESTART` ends the wait with `EINTR` (the
    /// item that arrives later stays queued).
    pub fn pop_wait(&self) -> Result<T> {
        loop {
            let wake = {
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
                let wake = match self.wake.get() {
                    Some(w) => w,
                    None => {
                        // Created under the lock, so set() cannot race another creator.
                        let _ = self.wake.set(eventfd(libc::EFD_SEMAPHORE)?);
                        self.wake.get().ok_or(Errno::EIO)?
                    }
                };
                g.waiters += 1;
                wake.as_raw_fd()
            };
            let mut v: u64 = 0;
            // SAFETY: reading 8 bytes into a valid u64 from our eventfd, which lives as long as
            // self.
            let r = unsafe { libc::read(wake, (&mut v as *mut u64).cast(), 8) };
            let err = Errno::last();
            self.inner().waiters -= 1;
            if r < 0 {
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
