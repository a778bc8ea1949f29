//! A queue with a file descriptor that is readable exactly while items are pending, as the
//! kernel's event files are: an eventfd whose counter is 1 while the queue is non-empty and 0
//! otherwise (kept so under the queue's lock). Applications poll it, put it in epoll, or set
//! `O_NONBLOCK` on it (then an empty queue gives `EAGAIN`). A thread waiting for an item sleeps
//! in `poll()`, so removing items (a destroyed id's events) never leaves the fd readable with
//! nothing to fetch. Used by CM event channels, completion channels and async events.

use crate::errno::{check, Errno, Result};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};

pub struct FdQueue<T> {
    efd: OwnedFd,
    items: Mutex<VecDeque<T>>,
}

impl<T> FdQueue<T> {
    pub fn new() -> Result<FdQueue<T>> {
        // SAFETY: plain eventfd(2) call.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        // SAFETY: fd was just created and is owned here.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(FdQueue { efd, items: Mutex::new(VecDeque::new()) })
    }

    pub fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn items(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the fd readable (called when the queue turns non-empty, under the lock).
    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes the fd not readable (called when the queue turns empty, under the lock). The
    /// counter is 1 then, so the read returns at once.
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our eventfd.
        unsafe { libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn push(&self, item: T) {
        let mut q = self.items();
        q.push_back(item);
        if q.len() == 1 {
            self.signal();
        }
    }

    /// Takes the oldest item, waiting for one unless the application made the fd non-blocking
    /// (`EAGAIN`).
    pub fn pop_wait(&self) -> Result<T> {
        loop {
            {
                let mut q = self.items();
                if let Some(item) = q.pop_front() {
                    if q.is_empty() {
                        self.clear();
                    }
                    return Ok(item);
                }
            }
            // SAFETY: fcntl(F_GETFL) on our own descriptor.
            let fl = check(unsafe { libc::fcntl(self.efd.as_raw_fd(), libc::F_GETFL) })?;
            if fl & libc::O_NONBLOCK != 0 {
                return Err(Errno::EAGAIN);
            }
            let mut p = libc::pollfd { fd: self.efd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: p is a valid pollfd array of one.
            let r = unsafe { libc::poll(&mut p, 1, -1) };
            if r < 0 && Errno::last().0 != libc::EINTR {
                return Err(Errno::last());
            }
        }
    }

    /// Removes and returns the pending items that `pick` selects, keeping the others in order.
    pub fn take(&self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut q = self.items();
        let was_empty = q.is_empty();
        let (taken, kept): (Vec<T>, Vec<T>) = q.drain(..).partition(|i| pick(i));
        q.extend(kept);
        if !was_empty && q.is_empty() {
            self.clear();
        }
        taken
    }
}
