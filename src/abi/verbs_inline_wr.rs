//! The posting and polling inlines of verbs.h as exported functions: the `ibv_wr_*` builders
//! (through the `ibv_qp_ex`'s own functions), `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll`,
//! the `ibv_wc_read_*` accessors (through the `ibv_cq_ex`'s) and `ibv_cq_ex_to_cq`.
//!
//! Each one does what its inline body does: it calls the function the object carries, with the
//! same arguments, and returns what that function returned. Where the inline would crash we
//! answer instead: a NULL or dead handle gives `EINVAL` and a NULL slot (posting API not
//! enabled, a reader not asked for in `wc_flags`) `EOPNOTSUPP`, in the function's convention
//! (errno only for the `void` ones, 0 for a reader). See docs/INLINE-API.md.

use crate::abi::{inline_handle, Forward, Infallible, Nothing, NullOr, PositiveErrno};
use crate::entry;
use crate::errno::{Errno, Result};
use crate::sys::*;
use crate::verbs::objects;
use libc::{c_uint, c_void};

/// The posting function read by `slot` from `qp` (through [`qp_op!`]). Every QP of ours is
/// allocated as an `ibv_qp_ex`, so its slots exist once the registry knows the QP (which the
/// lookup keeps alive meanwhile); a slot is NULL until the posting API is enabled
/// (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` or `ibv_qp_to_qp_ex`). In passthrough `qp` is the native
/// library's `ibv_qp_ex` (from its `ibv_qp_to_qp_ex`), read as the inline reads it.
fn qp_op<F>(qp: *mut ibv_qp_ex, slot: impl FnOnce(*const ibv_qp_ex) -> Option<F>) -> Result<F> {
    let _live = inline_handle(qp, |p| objects().qps.get(p))?;
    slot(qp).ok_or(Errno::EOPNOTSUPP)
}

macro_rules! qp_op {
    ($qp:expr, $slot:ident) => {
        qp_op($qp, |x| {
            // Traced passthrough put traced trampolines in the slots: this call is traced
            // already, so it goes to the provider's function.
            crate::abi::native_trace_ex::qp_slot(x, |o| o.$slot).or_else(|| {
                // SAFETY: qp_op calls this with a live ibv_qp_ex (ours, or the native
                // library's); one field is read through the raw pointer (no reference to the
                // fields C writes, wr_id and wr_flags).
                unsafe { std::ptr::addr_of!((*x).$slot).read() }
            })
        })
    };
}

/// The polling function or reader read by `slot` from `cq` (through [`cq_op!`]); every CQ of
/// ours is an `ibv_cq_ex`, its slots set at creation (in passthrough: the native library's).
fn cq_op<F>(cq: *mut ibv_cq_ex, slot: impl FnOnce(*const ibv_cq_ex) -> Option<F>) -> Result<F> {
    let _live = inline_handle(cq, |p| objects().cqs.get(p))?;
    slot(cq).ok_or(Errno::EOPNOTSUPP)
}

macro_rules! cq_op {
    ($cq:expr, $slot:ident) => {
        cq_op($cq, |c| {
            // As for `qp_op!`: the provider's function if traced passthrough replaced it.
            crate::abi::native_trace_ex::cq_slot(c, |o| o.$slot).or_else(|| {
                // SAFETY: cq_op calls this with a live ibv_cq_ex (ours, or the native
                // library's); one field is read through the raw pointer (no reference to the
                // fields C writes, wr_id and status).
                unsafe { std::ptr::addr_of!((*c).$slot).read() }
            })
        })
    };
}

entry! {
    /// `qp->wr_start(qp)`.
    fn ibv_wr_start(qp: *mut ibv_qp_ex) -> Nothing {
        let f = qp_op!(qp, wr_start)?;
        // SAFETY: qp's own function, called with qp as the inline does.
        unsafe { f(qp) };
        Ok(())
    }

    /// `qp->wr_complete(qp)`: its result unchanged.
    fn ibv_wr_complete(qp: *mut ibv_qp_ex) -> Forward<PositiveErrno> {
        let f = qp_op!(qp, wr_complete)?;
        // SAFETY: qp's own function, called with qp as the inline does.
        Ok(unsafe { f(qp) })
    }

    /// `qp->wr_abort(qp)`.
    fn ibv_wr_abort(qp: *mut ibv_qp_ex) -> Nothing {
        let f = qp_op!(qp, wr_abort)?;
        // SAFETY: qp's own function, called with qp as the inline does.
        unsafe { f(qp) };
        Ok(())
    }

    /// `qp->wr_send(qp)`.
    fn ibv_wr_send(qp: *mut ibv_qp_ex) -> Nothing {
        let f = qp_op!(qp, wr_send)?;
        // SAFETY: qp's own function, called with qp as the inline does.
        unsafe { f(qp) };
        Ok(())
    }

    /// `qp->wr_send_imm(qp, imm_data)`.
    fn ibv_wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) -> Nothing {
        let f = qp_op!(qp, wr_send_imm)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, imm_data) };
        Ok(())
    }

    /// `qp->wr_send_inv(qp, invalidate_rkey)`.
    fn ibv_wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) -> Nothing {
        let f = qp_op!(qp, wr_send_inv)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, invalidate_rkey) };
        Ok(())
    }

    /// `qp->wr_send_tso(qp, hdr, hdr_sz, mss)`.
    fn ibv_wr_send_tso(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16) -> Nothing {
        let f = qp_op!(qp, wr_send_tso)?;
        // SAFETY: qp's own function, called with the caller's arguments (hdr per its contract).
        unsafe { f(qp, hdr, hdr_sz, mss) };
        Ok(())
    }

    /// `qp->wr_rdma_write(qp, rkey, remote_addr)`.
    fn ibv_wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> Nothing {
        let f = qp_op!(qp, wr_rdma_write)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, rkey, remote_addr) };
        Ok(())
    }

    /// `qp->wr_rdma_write_imm(qp, rkey, remote_addr, imm_data)`.
    fn ibv_wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: __be32) -> Nothing {
        let f = qp_op!(qp, wr_rdma_write_imm)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, rkey, remote_addr, imm_data) };
        Ok(())
    }

    /// `qp->wr_rdma_read(qp, rkey, remote_addr)`.
    fn ibv_wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> Nothing {
        let f = qp_op!(qp, wr_rdma_read)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, rkey, remote_addr) };
        Ok(())
    }

    /// `qp->wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap)`.
    fn ibv_wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> Nothing {
        let f = qp_op!(qp, wr_atomic_cmp_swp)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, rkey, remote_addr, compare, swap) };
        Ok(())
    }

    /// `qp->wr_atomic_fetch_add(qp, rkey, remote_addr, add)`.
    fn ibv_wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) -> Nothing {
        let f = qp_op!(qp, wr_atomic_fetch_add)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, rkey, remote_addr, add) };
        Ok(())
    }

    /// `qp->wr_atomic_write(qp, rkey, remote_addr, atomic_wr)`.
    fn ibv_wr_atomic_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) -> Nothing {
        let f = qp_op!(qp, wr_atomic_write)?;
        // SAFETY: qp's own function, called with the caller's arguments (atomic_wr per its contract).
        unsafe { f(qp, rkey, remote_addr, atomic_wr) };
        Ok(())
    }

    /// `qp->wr_bind_mw(qp, mw, rkey, bind_info)`.
    fn ibv_wr_bind_mw(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info) -> Nothing {
        let f = qp_op!(qp, wr_bind_mw)?;
        // SAFETY: qp's own function, called with the caller's arguments (checked by it).
        unsafe { f(qp, mw, rkey, bind_info) };
        Ok(())
    }

    /// `qp->wr_local_inv(qp, invalidate_rkey)`.
    fn ibv_wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) -> Nothing {
        let f = qp_op!(qp, wr_local_inv)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, invalidate_rkey) };
        Ok(())
    }

    /// `qp->wr_set_sge(qp, lkey, addr, length)`.
    fn ibv_wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) -> Nothing {
        let f = qp_op!(qp, wr_set_sge)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, lkey, addr, length) };
        Ok(())
    }

    /// `qp->wr_set_sge_list(qp, num_sge, sg_list)`.
    fn ibv_wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) -> Nothing {
        let f = qp_op!(qp, wr_set_sge_list)?;
        // SAFETY: qp's own function, called with the caller's arguments (the list per its contract).
        unsafe { f(qp, num_sge, sg_list) };
        Ok(())
    }

    /// `qp->wr_set_inline_data(qp, addr, length)`.
    fn ibv_wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) -> Nothing {
        let f = qp_op!(qp, wr_set_inline_data)?;
        // SAFETY: qp's own function, called with the caller's arguments (the buffer per its contract).
        unsafe { f(qp, addr, length) };
        Ok(())
    }

    /// `qp->wr_set_inline_data_list(qp, num_buf, buf_list)`.
    fn ibv_wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) -> Nothing {
        let f = qp_op!(qp, wr_set_inline_data_list)?;
        // SAFETY: qp's own function, called with the caller's arguments (the list per its contract).
        unsafe { f(qp, num_buf, buf_list) };
        Ok(())
    }

    /// `qp->wr_set_ud_addr(qp, ah, remote_qpn, remote_qkey)`.
    fn ibv_wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> Nothing {
        let f = qp_op!(qp, wr_set_ud_addr)?;
        // SAFETY: qp's own function, called with the caller's arguments (it checks the AH).
        unsafe { f(qp, ah, remote_qpn, remote_qkey) };
        Ok(())
    }

    /// `qp->wr_set_xrc_srqn(qp, remote_srqn)`.
    fn ibv_wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) -> Nothing {
        let f = qp_op!(qp, wr_set_xrc_srqn)?;
        // SAFETY: qp's own function, called with the caller's arguments.
        unsafe { f(qp, remote_srqn) };
        Ok(())
    }

    /// The `ibv_cq` at the start of an `ibv_cq_ex`: the same pointer, as in verbs.h (NULL stays
    /// NULL and no handle is checked, as the inline is a cast).
    fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> NullOr<ibv_cq> {
        Ok(cq.cast::<ibv_cq>())
    }

    /// `cq->start_poll(cq, attr)`: its result (0, `ENOENT` or an error) unchanged.
    fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> Forward<PositiveErrno> {
        let f = cq_op!(cq, start_poll)?;
        // SAFETY: cq's own function, called with the caller's arguments (attr checked by it).
        Ok(unsafe { f(cq, attr) })
    }

    /// `cq->next_poll(cq)`: its result unchanged.
    fn ibv_next_poll(cq: *mut ibv_cq_ex) -> Forward<PositiveErrno> {
        let f = cq_op!(cq, next_poll)?;
        // SAFETY: cq's own function, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->end_poll(cq)`.
    fn ibv_end_poll(cq: *mut ibv_cq_ex) -> Nothing {
        let f = cq_op!(cq, end_poll)?;
        // SAFETY: cq's own function, called with cq as the inline does.
        unsafe { f(cq) };
        Ok(())
    }

    /// `cq->read_opcode(cq)`.
    fn ibv_wc_read_opcode(cq: *mut ibv_cq_ex) -> Infallible<ibv_wc_opcode::Type> {
        let f = cq_op!(cq, read_opcode)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_vendor_err(cq)`.
    fn ibv_wc_read_vendor_err(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_vendor_err)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_byte_len(cq)`.
    fn ibv_wc_read_byte_len(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_byte_len)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_imm_data(cq)`.
    fn ibv_wc_read_imm_data(cq: *mut ibv_cq_ex) -> Infallible<__be32> {
        let f = cq_op!(cq, read_imm_data)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_imm_data(cq)` as well: the invalidated rkey shares the immediate's field.
    fn ibv_wc_read_invalidated_rkey(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_imm_data)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_qp_num(cq)`.
    fn ibv_wc_read_qp_num(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_qp_num)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_src_qp(cq)`.
    fn ibv_wc_read_src_qp(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_src_qp)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_wc_flags(cq)`.
    fn ibv_wc_read_wc_flags(cq: *mut ibv_cq_ex) -> Infallible<c_uint> {
        let f = cq_op!(cq, read_wc_flags)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_slid(cq)`.
    fn ibv_wc_read_slid(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_slid)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_sl(cq)`.
    fn ibv_wc_read_sl(cq: *mut ibv_cq_ex) -> Infallible<u8> {
        let f = cq_op!(cq, read_sl)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_dlid_path_bits(cq)`.
    fn ibv_wc_read_dlid_path_bits(cq: *mut ibv_cq_ex) -> Infallible<u8> {
        let f = cq_op!(cq, read_dlid_path_bits)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_completion_ts(cq)`.
    fn ibv_wc_read_completion_ts(cq: *mut ibv_cq_ex) -> Infallible<u64> {
        let f = cq_op!(cq, read_completion_ts)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_completion_wallclock_ns(cq)`.
    fn ibv_wc_read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> Infallible<u64> {
        let f = cq_op!(cq, read_completion_wallclock_ns)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_cvlan(cq)`.
    fn ibv_wc_read_cvlan(cq: *mut ibv_cq_ex) -> Infallible<u16> {
        let f = cq_op!(cq, read_cvlan)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_flow_tag(cq)`.
    fn ibv_wc_read_flow_tag(cq: *mut ibv_cq_ex) -> Infallible<u32> {
        let f = cq_op!(cq, read_flow_tag)?;
        // SAFETY: cq's own reader, called with cq as the inline does.
        Ok(unsafe { f(cq) })
    }

    /// `cq->read_tm_info(cq, tm_info)`.
    fn ibv_wc_read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) -> Nothing {
        let f = cq_op!(cq, read_tm_info)?;
        // SAFETY: cq's own reader, called with the caller's arguments (tm_info per its contract).
        unsafe { f(cq, tm_info) };
        Ok(())
    }
}
