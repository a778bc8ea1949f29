//! A queue with a file descriptor that is readable while items are pending: an eventfd in
//! semaphore mode, one count per item. Applications poll it, put it in epoll, or set
//! `O_NONBLOCK` on it (then an empty queue gives `EAGAIN`), exactly as with the kernel's event
//! files. Used by CM event channels, completion channels and async events.

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
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) })?;
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

    pub fn push(&self, item: T) {
        self.items().push_back(item);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Waits for an item (or `EAGAIN` if the application made the fd non-blocking). A count
    /// whose item was removed by `retain`/`take` is skipped.
    pub fn pop_wait(&self) -> Result<T> {
        loop {
            let mut v: u64 = 0;
            // SAFETY: reading 8 bytes into a valid u64 from our eventfd.
            let r = unsafe { libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            if r < 0 {
                let e = Errno::last();
                if e.0 == libc::EINTR {
                    continue;
                }
                return Err(e);
            }
            if let Some(item) = self.items().pop_front() {
                return Ok(item);
            }
        }
    }

    /// Removes and returns the pending items that `pick` selects, keeping the others in order.
    pub fn take(&self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut q = self.items();
        let (taken, kept): (Vec<T>, Vec<T>) = q.drain(..).partition(|i| pick(i));
        q.extend(kept);
        taken
    }
}
