//! Asynchronous events of a context (`ibv_get_async_event`): a queue and an eventfd in
//! semaphore mode as `async_fd`, so `poll()` and `O_NONBLOCK` (`EAGAIN`) work as with the kernel.
//!
//! Generated: `IBV_EVENT_QP_FATAL` when a QP moves to the error state because of an error (not
//! through `ibv_modify_qp`), as rxe does; `IBV_EVENT_QP_ACCESS_ERR` / `IBV_EVENT_QP_REQ_ERR` when
//! a responder QP moves to ERR after refusing a request (`provider/soft/rc_recv.rs`, reported
//! through the QP's `EventSink`); `IBV_EVENT_SRQ_LIMIT_REACHED`
//! when an armed SRQ drops below its limit (the limit then disarms, as the verbs spec says).

use crate::runtime::fdqueue::FdQueue;
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, wait_on};
use crate::sys::*;
use std::sync::{Condvar, Mutex};

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

/// Events `ibv_get_async_event` handed out and `ibv_ack_async_event` has not acknowledged yet,
/// per object (the address of its C struct). Destroying a QP, SRQ or CQ waits until its count
/// is 0, so that no event for it is read after it is gone (ibv_get_async_event(3), NOTES;
/// conformance: ibv_get_async_event NOTE-DESTROY-WAITS).
static UNACKED: PerProcess<Mutex<Vec<(usize, u32)>>> = PerProcess::new(|| Mutex::new(Vec::new()));
static ACKED: Condvar = Condvar::new();

fn unacked() -> std::sync::MutexGuard<'static, Vec<(usize, u32)>> {
    lock(UNACKED.get())
}

/// The object an event of this type is affiliated with, if any (rdma-core's rule: the
/// event type says which member of the element union is valid).
fn affiliated(kind: ibv_event_type, el: Element) -> Option<usize> {
    use ibv_event_type::*;
    match (kind, el) {
        (IBV_EVENT_CQ_ERR, Element::Cq(p)) => Some(p),
        (
            IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED,
            Element::Qp(p),
        ) => Some(p),
        (IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED, Element::Srq(p)) => Some(p),
        _ => None,
    }
}

/// `ibv_get_async_event` hands `(kind, el)` out: an affiliated event counts until acked.
pub fn handed_out(kind: ibv_event_type, el: Element) {
    if let Some(obj) = affiliated(kind, el) {
        delivered(obj);
    }
}

/// `ibv_ack_async_event(e)`: the event's object, named by the union member its type makes
/// valid, has one unacknowledged event less.
pub fn ack(e: &ibv_async_event) {
    if let Some(obj) = object_of(e) {
        acked(obj);
    }
}

/// The address of the QP, SRQ or CQ event `e` is affiliated with, if its type names one.
pub fn object_of(e: &ibv_async_event) -> Option<usize> {
    // SAFETY: every member of the element union is a plain pointer or int; reading the pointer
    // members is sound for any bits (they are only compared, never dereferenced).
    let (qp, srq, cq) =
        unsafe { (e.element.qp as usize, e.element.srq as usize, e.element.cq as usize) };
    [Element::Qp(qp), Element::Srq(srq), Element::Cq(cq)]
        .into_iter()
        .find_map(|el| affiliated(e.event_type, el))
}

/// An event for `obj` was handed to the application.
fn delivered(obj: usize) {
    let mut v = unacked();
    match v.iter_mut().find(|(o, _)| *o == obj) {
        Some((_, n)) => *n += 1,
        None => v.push((obj, 1)),
    }
}

/// The application acknowledged an event for `obj` (an ack without a delivery is ignored).
fn acked(obj: usize) {
    let mut v = unacked();
    if let Some(i) = v.iter().position(|(o, _)| *o == obj) {
        v[i].1 -= 1;
        if v[i].1 == 0 {
            v.swap_remove(i);
        }
        ACKED.notify_all();
    }
}

/// Waits until every event handed out for `obj` has been acknowledged.
pub fn wait_acked(obj: usize) {
    let mut v = unacked();
    while v.iter().any(|(o, _)| *o == obj) {
        v = wait_on(&ACKED, v);
    }
}
