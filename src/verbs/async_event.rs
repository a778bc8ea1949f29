//! Asynchronous events of a context (`ibv_get_async_event`): a queue and an eventfd in
//! semaphore mode as `async_fd`, so `poll()` and `O_NONBLOCK` (`EAGAIN`) work as with the kernel.
//!
//! Generated: `IBV_EVENT_QP_FATAL` when a QP moves to the error state because of an error (not
//! through `ibv_modify_qp`), as rxe does; `IBV_EVENT_QP_ACCESS_ERR` / `IBV_EVENT_QP_REQ_ERR` when
//! a responder QP moves to ERR after refusing a request (`provider/soft/rc_recv.rs`, reported
//! through the QP's `EventSink`); `IBV_EVENT_SRQ_LIMIT_REACHED`
//! when an armed SRQ drops below its limit (the limit then disarms, as the verbs spec says).

use crate::runtime::fdqueue::FdQueue;
use crate::sys::*;

/// The object an event is about, by the address of its C struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Qp(usize),
    Srq(usize),
    Cq(usize),
    Port(u8),
}

/// The async events of a context; its descriptor is `async_fd`.
pub type AsyncQueue = FdQueue<(ibv_event_type, Element)>;
