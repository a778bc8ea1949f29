//! Tracing the extended data path in passthrough (`RDMASHIM_PROVIDER=native` with
//! `RDMASHIM_TRACE`): the `ibv_wr_*` builders and `ibv_start_poll`/`ibv_next_poll`/
//! `ibv_end_poll`, which a program's inlined calls reach through per-object tables (the
//! `ibv_qp_ex` and the `ibv_cq_ex`), not through the context's ops ([`super::native_trace`]).
//!
//! While tracing is on:
//! * each native `ibv_qp_ex` the program gets (`ibv_qp_to_qp_ex`, an exported call we forward)
//!   has its builder slots replaced by traced trampolines that call the provider's own;
//! * each wrapped native context's `create_cq_ex` (the op the inline `ibv_create_cq_ex`
//!   calls) is replaced the same way, and the trampoline wraps the new CQ's `start_poll`,
//!   `next_poll` and `end_poll`.
//!
//! The `ibv_wc_read_*` readers stay untraced, as they are on the soft provider (they only load
//! values). Our exported formerly inline functions take the provider's function from the saved
//! copy ([`qp_slot`], [`cq_slot`], [`original_create_cq_ex`]), so each call gives one line
//! whichever way the program made it.

use crate::abi::{Forward, Nothing, NullOr, PositiveErrno};
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use crate::sys::*;
use std::ffi::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::{Mutex, MutexGuard};

/// A bitwise copy of a native object, kept for the function pointers in it.
struct Snapshot<T>(T);

// SAFETY: only the copy's function pointers (plain code addresses) are ever read back; the data
// pointers in it are never dereferenced, so no thread can reach the object's data through it.
unsafe impl<T> Send for Snapshot<T> {}

/// A saved copy of an object's table, by the object's address (an object freed and another made
/// at its address is wrapped again: its slots are the provider's once more).
struct Saved<T>(Mutex<Vec<(usize, Snapshot<T>)>>);

impl<T> Saved<T> {
    const fn new() -> Self {
        Saved(Mutex::new(Vec::new()))
    }
    fn lock(&self) -> MutexGuard<'_, Vec<(usize, Snapshot<T>)>> {
        lock(&self.0)
    }
    /// `read` of the copy saved for `obj`, if tracing is on and `obj` was wrapped.
    fn get<R>(&self, obj: usize, read: impl FnOnce(&T) -> R) -> Option<R> {
        if !crate::trace::on() {
            return None;
        }
        self.lock().iter().find(|(o, _)| *o == obj).map(|(_, t)| read(&t.0))
    }
    fn put(&self, obj: usize, t: T) {
        let mut s = self.lock();
        s.retain(|(o, _)| *o != obj);
        s.push((obj, Snapshot(t)));
    }
}

static QPS: Saved<ibv_qp_ex> = Saved::new();
static CQS: Saved<ibv_cq_ex> = Saved::new();
static CREATE_CQ_EX: Saved<CreateCqEx> = Saved::new();

type CreateCqEx =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;

/// The provider's slot of native `ibv_qp_ex` `qp` if its slots were replaced (tracing on).
pub fn qp_slot<F>(qp: *const ibv_qp_ex, slot: impl FnOnce(&ibv_qp_ex) -> Option<F>) -> Option<F> {
    QPS.get(qp as usize, slot).flatten()
}

/// The provider's slot of native `ibv_cq_ex` `cq` if its slots were replaced (tracing on).
pub fn cq_slot<F>(cq: *const ibv_cq_ex, slot: impl FnOnce(&ibv_cq_ex) -> Option<F>) -> Option<F> {
    CQS.get(cq as usize, slot).flatten()
}

/// The provider's `create_cq_ex` of native context `ctx` if it was replaced (tracing on).
pub fn original_create_cq_ex(ctx: *mut ibv_context) -> Option<CreateCqEx> {
    CREATE_CQ_EX.get(ctx as usize, |f| *f)
}

fn saved_qp<F>(qp: *mut ibv_qp_ex, slot: impl FnOnce(&ibv_qp_ex) -> Option<F>) -> Result<F> {
    qp_slot(qp, slot).ok_or(Errno::EOPNOTSUPP)
}

fn saved_cq<F>(cq: *mut ibv_cq_ex, slot: impl FnOnce(&ibv_cq_ex) -> Option<F>) -> Result<F> {
    cq_slot(cq, slot).ok_or(Errno::EOPNOTSUPP)
}

/// The builders that return nothing: a traced trampoline per slot, named as the program calls
/// it, and the function that puts them in a native `ibv_qp_ex`.
macro_rules! builders {
    ($($slot:ident $label:literal ($($arg:ident: $ty:ty),*);)*) => {
        $(
            unsafe extern "C" fn $slot(qp: *mut ibv_qp_ex $(, $arg: $ty)*) {
                crate::entry_body!($label(qp $(, $arg)*) -> Nothing {
                    let f = saved_qp(qp, |x| x.$slot)?;
                    // SAFETY: the provider's own builder with the program's arguments, as the
                    // inline calls it.
                    unsafe { f(qp $(, $arg)*) };
                    Ok(())
                })
            }
        )*

        /// Puts the trampolines in `x`'s set slots (a NULL slot stays NULL).
        ///
        /// # Safety
        /// `x` is a live native `ibv_qp_ex`, not yet used for posting by another thread.
        unsafe fn install_builders(x: *mut ibv_qp_ex) {
            $(
                // SAFETY: per the contract; one slot read and written through the raw pointer.
                unsafe {
                    let p = addr_of_mut!((*x).$slot);
                    if p.read().is_some() {
                        p.write(Some($slot));
                    }
                }
            )*
        }
    };
}

builders! {
    wr_start "ibv_wr_start" ();
    wr_abort "ibv_wr_abort" ();
    wr_send "ibv_wr_send" ();
    wr_send_imm "ibv_wr_send_imm" (imm_data: __be32);
    wr_send_inv "ibv_wr_send_inv" (invalidate_rkey: u32);
    wr_send_tso "ibv_wr_send_tso" (hdr: *mut c_void, hdr_sz: u16, mss: u16);
    wr_rdma_write "ibv_wr_rdma_write" (rkey: u32, remote_addr: u64);
    wr_rdma_write_imm "ibv_wr_rdma_write_imm" (rkey: u32, remote_addr: u64, imm_data: __be32);
    wr_rdma_read "ibv_wr_rdma_read" (rkey: u32, remote_addr: u64);
    wr_atomic_cmp_swp "ibv_wr_atomic_cmp_swp" (rkey: u32, remote_addr: u64, compare: u64, swap: u64);
    wr_atomic_fetch_add "ibv_wr_atomic_fetch_add" (rkey: u32, remote_addr: u64, add: u64);
    wr_atomic_write "ibv_wr_atomic_write" (rkey: u32, remote_addr: u64, atomic_wr: *const c_void);
    wr_bind_mw "ibv_wr_bind_mw" (mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info);
    wr_local_inv "ibv_wr_local_inv" (invalidate_rkey: u32);
    wr_set_sge "ibv_wr_set_sge" (lkey: u32, addr: u64, length: u32);
    wr_set_sge_list "ibv_wr_set_sge_list" (num_sge: usize, sg_list: *const ibv_sge);
    wr_set_inline_data "ibv_wr_set_inline_data" (addr: *mut c_void, length: usize);
    wr_set_inline_data_list "ibv_wr_set_inline_data_list" (num_buf: usize, buf_list: *const ibv_data_buf);
    wr_set_ud_addr "ibv_wr_set_ud_addr" (ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32);
    wr_set_xrc_srqn "ibv_wr_set_xrc_srqn" (remote_srqn: u32);
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    crate::entry_body!("ibv_wr_complete"(qp) -> Forward<PositiveErrno> {
        let f = saved_qp(qp, |x| x.wr_complete)?;
        // SAFETY: the provider's own function with the program's argument.
        Ok(unsafe { f(qp) })
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    crate::entry_body!("ibv_start_poll"(cq, attr) -> Forward<PositiveErrno> {
        let f = saved_cq(cq, |c| c.start_poll)?;
        // SAFETY: the provider's own function with the program's arguments.
        Ok(unsafe { f(cq, attr) })
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    crate::entry_body!("ibv_next_poll"(cq) -> Forward<PositiveErrno> {
        let f = saved_cq(cq, |c| c.next_poll)?;
        // SAFETY: the provider's own function with the program's argument.
        Ok(unsafe { f(cq) })
    })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    crate::entry_body!("ibv_end_poll"(cq) -> Nothing {
        let f = saved_cq(cq, |c| c.end_poll)?;
        // SAFETY: the provider's own function with the program's argument.
        unsafe { f(cq) };
        Ok(())
    })
}

unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    crate::entry_body!("ibv_create_cq_ex"(context, cq_attr) -> Forward<NullOr<ibv_cq_ex>> {
        let f = original_create_cq_ex(context).ok_or(Errno::EOPNOTSUPP)?;
        // SAFETY: the provider's own op with the program's arguments.
        let cq = unsafe { f(context, cq_attr) };
        // SAFETY: NULL or the provider's new live CQ, not yet handed to the program.
        unsafe { wrap_cq(cq) };
        Ok(cq)
    })
}

/// Replaces the polling slots of native `ibv_cq_ex` `cq` with traced trampolines, once.
///
/// # Safety
/// `cq` is NULL or a live native `ibv_cq_ex` the program has not polled yet.
pub unsafe fn wrap_cq(cq: *mut ibv_cq_ex) {
    if cq.is_null() || !crate::trace::on() {
        return;
    }
    // SAFETY: per the contract; the table is copied bitwise (only its slots are read back).
    let saved = unsafe { cq.read() };
    if saved.start_poll.is_some_and(|f| f as usize == start_poll as *const () as usize) {
        return;
    }
    CQS.put(cq as usize, saved);
    // SAFETY: per the contract; set slots only, through the raw pointer.
    unsafe {
        if saved.start_poll.is_some() {
            addr_of_mut!((*cq).start_poll).write(Some(start_poll));
        }
        if saved.next_poll.is_some() {
            addr_of_mut!((*cq).next_poll).write(Some(next_poll));
        }
        if saved.end_poll.is_some() {
            addr_of_mut!((*cq).end_poll).write(Some(end_poll));
        }
    }
}

/// `ibv_qp_to_qp_ex` (a hook after the forwarded call): the native `ibv_qp_ex` it returned gets
/// traced builders, once.
///
/// # Safety
/// `qp` is NULL or the native library's live `ibv_qp_ex`, just returned to the program.
pub unsafe fn qp_ex_made<A>(qp: *mut ibv_qp_ex, _args: A) {
    if qp.is_null() || !crate::trace::on() {
        return;
    }
    // SAFETY: per the contract; one slot read through the raw pointer.
    let start = unsafe { addr_of!((*qp).wr_start).read() };
    if start.is_some_and(|f| f as usize == wr_start as *const () as usize) {
        return; // ours already (the program asked again)
    }
    // SAFETY: per the contract; the table is copied bitwise (only its slots are read back).
    QPS.put(qp as usize, unsafe { qp.read() });
    // SAFETY: per the contract.
    unsafe {
        install_builders(qp);
        let p = addr_of_mut!((*qp).wr_complete);
        if p.read().is_some() {
            p.write(Some(wr_complete));
        }
    }
}

/// Replaces the `create_cq_ex` op of native context `ctx` (called by `native_trace::wrap`
/// under its lock, once per context).
///
/// # Safety
/// `ctx` is a live context of the native library, not yet handed to the program.
pub unsafe fn wrap_context(ctx: *mut ibv_context) {
    let Ok((_, v)) = super::verbs_inline::extended(ctx) else { return };
    let off = std::mem::offset_of!(verbs_context, create_cq_ex);
    // SAFETY: v is NULL or the verbs_context around the live ctx; sz is a plain field.
    if v.is_null() || unsafe { (*v).sz } < std::mem::size_of::<verbs_context>() - off {
        return;
    }
    // SAFETY: the slot lies within the verbs_context (checked against its size above).
    let p = unsafe { addr_of_mut!((*v).create_cq_ex) };
    // SAFETY: p is the create_cq_ex slot inside the verbs_context (size checked above).
    let Some(f) = (unsafe { p.read() }) else { return };
    if f as usize == create_cq_ex as *const () as usize {
        return;
    }
    CREATE_CQ_EX.put(ctx as usize, f);
    // SAFETY: p is the create_cq_ex slot inside the verbs_context (size checked above), in the
    // native library's writable allocation.
    unsafe { p.write(Some(create_cq_ex)) };
}
