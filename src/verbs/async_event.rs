//! Asynchronous events of a context (`ibv_get_async_event`): a queue and an eventfd in
//! semaphore mode as `async_fd`, so `poll()` and `O_NONBLOCK` (`EAGAIN`) work as with the kernel.
//!
//! Generated: `IBV_EVENT_QP_FATAL` when a QP moves to the error state because of an error (not
//! through `ibv_modify_qp`), as rxe does; `IBV_EVENT_SRQ_LIMIT_REACHED` when an armed SRQ drops
//! below its limit (the limit then disarms, as the verbs spec says).

use crate::errno::{check, Errno, Result};
use crate::sys::*;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The object an event is about, by the address of its C struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Qp(usize),
    Srq(usize),
    Cq(usize),
    Port(u8),
}

pub struct AsyncQueue {
    efd: OwnedFd,
    queue: Mutex<VecDeque<(ibv_event_type, Element)>>,
}

impl AsyncQueue {
    pub fn new() -> Result<AsyncQueue> {
        // SAFETY: plain eventfd(2) call.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) })?;
        // SAFETY: fd was just created and is owned here.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(AsyncQueue { efd, queue: Mutex::new(VecDeque::new()) })
    }

    pub fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    pub fn post(&self, kind: ibv_event_type, el: Element) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back((kind, el));
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Blocks (unless the fd was made non-blocking) until an event is pending.
    pub fn get(&self) -> Result<(ibv_event_type, Element)> {
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
            if let Some(ev) = self.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
                return Ok(ev);
            }
        }
    }
}
