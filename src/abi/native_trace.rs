//! Tracing the data path in passthrough (`RDMASHIM_PROVIDER=native` with `RDMASHIM_TRACE`).
//!
//! A program's inlined `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`
//! and `ibv_req_notify_cq` jump through the context's ops, straight into the native provider:
//! nothing of ours runs, so nothing would be traced. While tracing is on, each native context
//! the program gets (opened, imported, or under a CQ or QP it creates, which covers the
//! contexts librdmacm opens for itself) has those five slots replaced by traced trampolines
//! that call the provider's own functions. That is one hop per call, taken only when tracing
//! was asked for; with tracing off the ops are left alone. The extended API (`ibv_wr_*`,
//! `ibv_start_poll`, ...) jumps through per-object tables: see [`super::native_trace_ex`].
//!
//! Our exported formerly inline functions (relink mode) call the provider's function from the
//! saved table ([`original`]), so each call gives one line whichever way the program made it.

use crate::abi::{Forward, PositiveErrno, Value};
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use crate::sys::*;
use std::ffi::c_int;
use std::sync::Mutex;

/// The provider's own ops of each context whose slots were replaced, by context address. A
/// context closed and another opened at its address is wrapped again (see [`wrap`]).
static SAVED: Mutex<Vec<(usize, ibv_context_ops)>> = Mutex::new(Vec::new());

fn saved() -> std::sync::MutexGuard<'static, Vec<(usize, ibv_context_ops)>> {
    lock(&SAVED)
}

/// Replaces the data-path slots of native context `ctx` with traced trampolines, once.
///
/// # Safety
/// `ctx` is NULL or a live context of the native library.
pub unsafe fn wrap(ctx: *mut ibv_context) {
    if ctx.is_null() || !crate::trace::on() {
        return;
    }
    let mut s = saved();
    // SAFETY: ctx is live (the contract); ops is read through the raw pointer.
    let ops = unsafe { std::ptr::addr_of!((*ctx).ops).read() };
    // Ours already: the slot holds the trampoline this function wrote (the same address, taken
    // in this one place).
    if ops.post_send.is_some_and(|f| f as usize == TRAMPOLINE as usize) {
        return;
    }
    s.retain(|(c, _)| *c != ctx as usize);
    s.push((ctx as usize, ops));
    let mut traced = ops;
    traced.post_send = ops.post_send.map(|_| TRAMPOLINE);
    traced.post_recv = ops.post_recv.map(|_| post_recv as PostRecv);
    traced.post_srq_recv = ops.post_srq_recv.map(|_| post_srq_recv as PostSrqRecv);
    traced.poll_cq = ops.poll_cq.map(|_| poll_cq as PollCq);
    traced.req_notify_cq = ops.req_notify_cq.map(|_| req_notify_cq as ReqNotifyCq);
    // SAFETY: the context is the native library's writable allocation (rdma-core keeps the
    // ops in the context itself); written under SAVED's lock, before the program (which got
    // the object from the call that led here) can make a data-path call on it.
    unsafe { std::ptr::addr_of_mut!((*ctx).ops).write(traced) };
    // SAFETY: ctx is live and not yet the program's (the contract above).
    unsafe { super::native_trace_ex::wrap_context(ctx) };
}

/// The provider's own ops of `ctx` if [`wrap`] replaced them. One load when tracing is off.
pub fn original(ctx: *mut ibv_context) -> Option<ibv_context_ops> {
    if !crate::trace::on() {
        return None;
    }
    saved().iter().find(|(c, _)| *c == ctx as usize).map(|(_, o)| *o)
}

const TRAMPOLINE: PostSend = post_send;

type PostSend = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
type PostSrqRecv =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
type ReqNotifyCq = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;

/// The provider's op `slot` for an object whose context is `ctx`.
fn op<F>(ctx: *mut ibv_context, slot: impl FnOnce(&ibv_context_ops) -> Option<F>) -> Result<F> {
    original(ctx).as_ref().and_then(slot).ok_or(Errno::EOPNOTSUPP)
}

/// The `context` of a live object the program passed (the trampolines are reached only
/// through a wrapped context's ops, from the object's own `context`).
///
/// # Safety
/// `p` is NULL or points at a readable `T`.
unsafe fn context_of<T>(
    p: *mut T,
    context: impl FnOnce(&T) -> *mut ibv_context,
) -> Result<*mut ibv_context> {
    // SAFETY: per the contract.
    Ok(context(unsafe { p.as_ref() }.ok_or(Errno::EINVAL)?))
}

/// A traced trampoline: `name(args) -> Conv` as the program calls it, on the object `obj`
/// (whose `context` names the saved ops), calling the provider's op `slot`.
macro_rules! trampoline {
    ($f:ident, $label:literal, $obj:ident, $slot:ident, $conv:ty, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $f($($arg: $ty),*) -> c_int {
            crate::entry_body!($label($($arg),*) -> Forward<$conv> {
                // SAFETY: the program's object, as its inlined call passed it.
                let f = op(unsafe { context_of($obj, |o| o.context) }?, |o| o.$slot)?;
                // SAFETY: the provider's own op with the program's arguments, as the inline
                // calls it.
                Ok(unsafe { f($($arg),*) })
            })
        }
    };
}

trampoline!(post_send, "ibv_post_send", qp, post_send, PositiveErrno,
    (qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr));
trampoline!(post_recv, "ibv_post_recv", qp, post_recv, PositiveErrno,
    (qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr));
trampoline!(post_srq_recv, "ibv_post_srq_recv", srq, post_srq_recv, PositiveErrno,
    (srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr));
trampoline!(poll_cq, "ibv_poll_cq", cq, poll_cq, Value<c_int>,
    (cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc));
trampoline!(req_notify_cq, "ibv_req_notify_cq", cq, req_notify_cq, PositiveErrno,
    (cq: *mut ibv_cq, solicited_only: c_int));

// Hooks run after a forwarded call (`entry!`'s `then`): the call's C result, then its
// arguments. Each is `unsafe`: the result is the native library's (NULL, an error, or a live
// object) and the arguments are the caller's, valid per the man page.

/// `ibv_open_device`, `ibv_import_device`: the new context.
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn context_made<A>(ctx: *mut ibv_context, _args: A) {
    // SAFETY: NULL or the native library's new live context.
    unsafe { wrap(ctx) }
}

/// `ibv_create_cq`: the CQ's context.
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn cq_made<A>(cq: *mut ibv_cq, _args: A) {
    // SAFETY: NULL or the native library's new live CQ, whose context is live.
    if let Some(c) = unsafe { cq.as_ref() } {
        // SAFETY: c.context is the live context of the native library's new CQ.
        unsafe { wrap(c.context) }
    }
}

/// `ibv_create_qp`: the QP's context.
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn qp_made<A>(qp: *mut ibv_qp, _args: A) {
    // SAFETY: NULL or the native library's new live QP, whose context is live.
    if let Some(q) = unsafe { qp.as_ref() } {
        // SAFETY: q.context is the live context of the native library's new QP.
        unsafe { wrap(q.context) }
    }
}

/// `rdma_create_qp(id, ..)`: the id's device context, on success.
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn id_qp_made<P, A>(r: c_int, (id, ..): (*mut rdma_cm_id, P, A)) {
    // SAFETY: on success id is the native library's live id with a device context.
    if let (0, Some(id)) = (r, unsafe { id.as_ref() }) {
        // SAFETY: id.verbs is the live device context of the native library's id.
        unsafe { wrap(id.verbs) }
    }
}

/// `rdma_create_ep(&id, ..)`: the new id's device context, on success.
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn ep_made<R, P, A>(r: c_int, (id, ..): (*mut *mut rdma_cm_id, R, P, A)) {
    // SAFETY: per the hooks' contract.
    unsafe { new_id(r, id) }
}

/// `rdma_get_request(listen, &id)`: the new id's device context, on success (librdmacm made its
/// QP when the listening endpoint had QP attributes).
///
/// # Safety
/// See the hooks' comment above.
pub unsafe fn request_taken<L>(r: c_int, (_listen, id): (L, *mut *mut rdma_cm_id)) {
    // SAFETY: per the hooks' contract.
    unsafe { new_id(r, id) }
}

/// The device context of the id a call that returned `r` stored in `*id`, on success.
///
/// # Safety
/// On success (`r` 0) `*id` is the native library's new live id (its `verbs` may be NULL).
unsafe fn new_id(r: c_int, id: *mut *mut rdma_cm_id) {
    // SAFETY: per the contract; `id` is the caller's out-pointer, checked for NULL.
    if let (0, Some(id)) = (r, unsafe { id.as_ref().and_then(|p| p.as_ref()) }) {
        // SAFETY: a live id's device context, NULL or live.
        unsafe { wrap(id.verbs) }
    }
}
