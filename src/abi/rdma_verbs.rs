//! The functions that rdma-core's `<rdma/rdma_verbs.h>` defines `static inline`, exported here as
//! real symbols with the same C signatures and semantics (see `docs/INLINE-API.md` for the few
//! deliberate deviations: invalid ids, missing QPs/CQs/channels and NULL MRs fail with `EINVAL`
//! instead of crashing or asserting).
//!
//! These are thin wrappers over our own exported verbs ([`crate::abi::verbs`]), exactly as the
//! inline versions are wrappers over libibverbs. They read the public fields of `rdma_cm_id`
//! (`qp`, `pd`, `srq`, CQs and channels) directly, as the inline code does, after
//! [`crate::cm::check_id`] has confirmed the id is live.
//!
//! Unlike the rest of `abi/`, the functions are written out by hand instead of with
//! [`crate::entry!`]: `include/rdma/rdma_verbs.h` is generated from this file by cbindgen
//! (`scripts/gen-header`), and cbindgen cannot see functions produced by a macro. Each body still
//! goes through [`crate::abi::call`], so panics and error conventions are handled the same way.
//!
//! `rdma_seterrno` is not exported: it stays `static inline` in the header. Its convention
//! (a non-zero verbs return becomes -1 with `errno` set to that value) is [`seterrno`] here.

use crate::abi::verbs::{
    ibv_ack_cq_events, ibv_dereg_mr, ibv_get_cq_event, ibv_poll_cq, ibv_post_recv, ibv_post_send,
    ibv_post_srq_recv, ibv_reg_mr, ibv_req_notify_cq,
};
use crate::abi::{inline_handle, MinusOne, NullOr, Value};
use crate::errno::{Errno, Result};
use crate::sys::{
    ibv_access_flags, ibv_ah, ibv_comp_channel, ibv_cq, ibv_mr, ibv_qp, ibv_recv_wr, ibv_send_wr,
    ibv_sge, ibv_wc, ibv_wr_opcode, rdma_cm_id, RDMA_UDP_QKEY,
};
use libc::{c_int, c_void};
use std::ptr;

/// rdma-core's `rdma_seterrno`: 0 stays success; any other value becomes -1 with `errno` set to
/// it. A negative value (as `ibv_poll_cq` returns) therefore leaves a *negative* `errno`, which
/// is rdma-core's behaviour and kept on purpose.
fn seterrno(ret: c_int) -> Result<()> {
    crate::errno::zero_or(ret)
}

/// The id's QP, `EINVAL` if the id is not live or has no QP.
///
/// # Safety
/// `id` is NULL or a pointer that [`crate::cm::check_id`] may inspect.
unsafe fn id_qp(id: *mut rdma_cm_id) -> Result<*mut ibv_qp> {
    live_id(id)?;
    // SAFETY: live_id confirmed `id` is a live rdma_cm_id (ours, or in passthrough the native
    // library's).
    let qp = unsafe { (*id).qp };
    if qp.is_null() {
        return Err(Errno::EINVAL);
    }
    Ok(qp)
}

/// `ibv_reg_mr(id->pd, addr, length, access)` for a live id.
///
/// # Safety
/// As [`ibv_reg_mr`].
unsafe fn reg(
    id: *mut rdma_cm_id,
    addr: *mut c_void,
    length: usize,
    access: ibv_access_flags,
) -> Result<*mut ibv_mr> {
    live_id(id)?;
    // SAFETY: live_id confirmed `id` is a live rdma_cm_id.
    let pd = unsafe { (*id).pd };
    // SAFETY: ibv_reg_mr checks `pd`; `addr`/`length` are the caller's, as in rdma-core.
    let mr = unsafe { ibv_reg_mr(pd, addr, length, access.0 as c_int) };
    if mr.is_null() {
        return Err(Errno::last());
    }
    Ok(mr)
}

/// Posts one receive work request, `wr_id` = `context`, on the id's SRQ if it has one, otherwise
/// on its QP (`EINVAL` if it has neither).
///
/// # Safety
/// `sgl` is valid for `nsge` entries (checked by the verbs call as far as it can).
unsafe fn post_recv_wr(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
) -> Result<()> {
    live_id(id)?;
    // SAFETY: live_id confirmed `id` is a live rdma_cm_id.
    let (srq, qp) = unsafe { ((*id).srq, (*id).qp) };
    let mut wr = ibv_recv_wr {
        wr_id: context as usize as u64,
        next: ptr::null_mut(),
        sg_list: sgl,
        num_sge: nsge,
    };
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    let ret = if !srq.is_null() {
        // SAFETY: `srq` is the id's SRQ (checked by ibv_post_srq_recv); `wr`/`bad` are ours.
        unsafe { ibv_post_srq_recv(srq, &mut wr, &mut bad) }
    } else if !qp.is_null() {
        // SAFETY: `qp` is the id's QP (checked by ibv_post_recv); `wr`/`bad` are ours.
        unsafe { ibv_post_recv(qp, &mut wr, &mut bad) }
    } else {
        return Err(Errno::EINVAL);
    };
    seterrno(ret)
}

/// Posts one send work request on the id's QP, `wr_id` = `context`.
///
/// # Safety
/// `sgl` is valid for `nsge` entries (checked by `ibv_post_send` as far as it can).
unsafe fn post_send_wr(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    opcode: ibv_wr_opcode::Type,
    flags: c_int,
    fill: impl FnOnce(&mut ibv_send_wr),
) -> Result<()> {
    // SAFETY: `id` is checked by id_qp before any field is read.
    let qp = unsafe { id_qp(id) }?;
    // SAFETY: ibv_send_wr is a C struct of integers, pointers and unions of those: all-zero is
    // a valid value (rdma-core leaves the fields it does not set uninitialised; we zero them).
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = context as usize as u64;
    wr.next = ptr::null_mut();
    wr.sg_list = sgl;
    wr.num_sge = nsge;
    wr.opcode = opcode;
    wr.send_flags = flags as u32;
    fill(&mut wr);
    let mut bad: *mut ibv_send_wr = ptr::null_mut();
    // SAFETY: `qp` is the id's QP (checked by ibv_post_send); `wr` and `bad` live on our stack.
    seterrno(unsafe { ibv_post_send(qp, &mut wr, &mut bad) })
}

/// Builds the single scatter/gather element the non-vector calls use (`length` truncated to 32
/// bits, as rdma-core does).
fn sge(addr: *mut c_void, length: usize, lkey: u32) -> ibv_sge {
    ibv_sge { addr: addr as usize as u64, length: length as u32, lkey }
}

/// What the inline bodies read of an MR: its lkey and the range it covers.
struct MrView {
    key: u32,
    addr: usize,
    len: usize,
}

/// A live MR of ours (in passthrough, the native library's, read as the inline reads it), or
/// `None` for NULL; `EINVAL` for a destroyed or foreign one (rdma-core would read its lkey
/// from freed memory).
fn live_mr(mr: *mut ibv_mr) -> Result<Option<MrView>> {
    if mr.is_null() {
        return Ok(None);
    }
    Ok(Some(match inline_handle(mr, |p| crate::verbs::objects().mrs.get(p))? {
        Some(m) => {
            let reg = m.reg();
            MrView { key: m.key, addr: reg.addr, len: reg.len }
        }
        None => {
            // SAFETY: in passthrough a non-NULL MR is the native library's, live per the API.
            let r = unsafe { &*mr };
            MrView { key: r.lkey, addr: r.addr as usize, len: r.length }
        }
    }))
}

/// An id the inline bodies may read: live and ours, or in passthrough the native library's.
fn live_id(id: *mut rdma_cm_id) -> Result<()> {
    inline_handle(id, crate::cm::check_id).map(|_| ())
}

/// Posts an RDMA READ or WRITE work request to `remote_addr`/`rkey`.
///
/// # Safety
/// As [`post_send_wr`].
unsafe fn post_rdma(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    op: u32,
    flags: c_int,
    remote_addr: u64,
    rkey: u32,
) -> Result<()> {
    // SAFETY: per the function's contract.
    unsafe {
        post_send_wr(id, context, sgl, nsge, op, flags, |wr| {
            wr.wr.rdma.remote_addr = remote_addr;
            wr.wr.rdma.rkey = rkey;
        })
    }
}

/// The lkey of an optional MR: `mr ? mr->lkey : 0`, `EINVAL` if `mr` is not live.
fn lkey_or_zero(mr: *mut ibv_mr) -> Result<u32> {
    Ok(live_mr(mr)?.map_or(0, |m| m.key))
}

/// Registers a buffer for sends and receives with the id's PD; NULL and errno on failure.
///
/// Access `IBV_ACCESS_LOCAL_WRITE`, as rdma-core. `EINVAL` for an id that is not live.
///
/// # Safety
/// `id` is NULL, a destroyed id or a live id (checked); the buffer follows `ibv_reg_mr`'s rules.
#[no_mangle]
pub unsafe extern "C" fn rdma_reg_msgs(
    id: *mut rdma_cm_id,
    addr: *mut c_void,
    length: usize,
) -> *mut ibv_mr {
    crate::entry_body!(rdma_reg_msgs(id, addr, length) -> NullOr<ibv_mr> {
        // SAFETY: reg checks `id`; the buffer is the caller's, as for ibv_reg_mr.
        unsafe { reg(id, addr, length, ibv_access_flags::IBV_ACCESS_LOCAL_WRITE) }
    })
}

/// Registers a buffer as the target of remote RDMA reads; NULL and errno on failure.
///
/// Access `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ`, with the id's PD.
///
/// # Safety
/// As [`rdma_reg_msgs`].
#[no_mangle]
pub unsafe extern "C" fn rdma_reg_read(
    id: *mut rdma_cm_id,
    addr: *mut c_void,
    length: usize,
) -> *mut ibv_mr {
    crate::entry_body!(rdma_reg_read(id, addr, length) -> NullOr<ibv_mr> {
        let access =
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        // SAFETY: reg checks `id`; the buffer is the caller's, as for ibv_reg_mr.
        unsafe { reg(id, addr, length, access) }
    })
}

/// Registers a buffer as the target of remote RDMA writes; NULL and errno on failure.
///
/// Access `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`, with the id's PD.
///
/// # Safety
/// As [`rdma_reg_msgs`].
#[no_mangle]
pub unsafe extern "C" fn rdma_reg_write(
    id: *mut rdma_cm_id,
    addr: *mut c_void,
    length: usize,
) -> *mut ibv_mr {
    crate::entry_body!(rdma_reg_write(id, addr, length) -> NullOr<ibv_mr> {
        let access =
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: reg checks `id`; the buffer is the caller's, as for ibv_reg_mr.
        unsafe { reg(id, addr, length, access) }
    })
}

/// Deregisters a memory region; 0, or -1 and errno.
///
/// `rdma_seterrno(ibv_dereg_mr(mr))`.
///
/// # Safety
/// `mr` is NULL, a destroyed MR or a live MR (checked by `ibv_dereg_mr`).
#[no_mangle]
pub unsafe extern "C" fn rdma_dereg_mr(mr: *mut ibv_mr) -> c_int {
    crate::entry_body!(rdma_dereg_mr(mr) -> MinusOne {
        // SAFETY: ibv_dereg_mr checks `mr` against its registry.
        seterrno(unsafe { ibv_dereg_mr(mr) })
    })
}

/// Posts a receive of a scatter/gather list (on the id's SRQ if set); 0, or -1 and errno.
///
/// `wr_id` is `context`. Without an SRQ the receive goes to the id's QP; `EINVAL` if it has
/// neither or is not live.
///
/// # Safety
/// `id` is checked; `sgl` is valid for `nsge` entries.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_recvv(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
) -> c_int {
    crate::entry_body!(rdma_post_recvv(id, context, sgl, nsge) -> MinusOne {
        // SAFETY: post_recv_wr checks `id`; `sgl` is the caller's.
        unsafe { post_recv_wr(id, context, sgl, nsge) }
    })
}

/// Posts a SEND of a scatter/gather list; 0, or -1 and errno.
///
/// `wr_id` is `context`, `send_flags` is `flags`. `EINVAL` for an id without a QP.
///
/// # Safety
/// `id` is checked; `sgl` is valid for `nsge` entries.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_sendv(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    flags: c_int,
) -> c_int {
    crate::entry_body!(rdma_post_sendv(id, context, sgl, nsge, flags) -> MinusOne {
        let op = ibv_wr_opcode::IBV_WR_SEND;
        // SAFETY: post_send_wr checks `id`; `sgl` is the caller's.
        unsafe { post_send_wr(id, context, sgl, nsge, op, flags, |_| {}) }
    })
}

/// Posts an RDMA READ into a scatter/gather list; 0, or -1 and errno.
///
/// Reads from `remote_addr` with `rkey`; `wr_id` is `context`.
///
/// # Safety
/// `id` is checked; `sgl` is valid for `nsge` entries.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_readv(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    flags: c_int,
    remote_addr: u64,
    rkey: u32,
) -> c_int {
    crate::entry_body!(rdma_post_readv(id, context, sgl, nsge, flags, remote_addr, rkey) -> MinusOne {
        // SAFETY: post_rdma checks `id`; `sgl` is the caller's.
        unsafe {
            post_rdma(
                id,
                context,
                sgl,
                nsge,
                ibv_wr_opcode::IBV_WR_RDMA_READ,
                flags,
                remote_addr,
                rkey,
            )
        }
    })
}

/// Posts an RDMA WRITE of a scatter/gather list; 0, or -1 and errno.
///
/// Writes to `remote_addr` with `rkey`; `wr_id` is `context`.
///
/// # Safety
/// `id` is checked; `sgl` is valid for `nsge` entries.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_writev(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    flags: c_int,
    remote_addr: u64,
    rkey: u32,
) -> c_int {
    crate::entry_body!(rdma_post_writev(id, context, sgl, nsge, flags, remote_addr, rkey) -> MinusOne {
        // SAFETY: post_rdma checks `id`; `sgl` is the caller's.
        unsafe {
            post_rdma(
                id,
                context,
                sgl,
                nsge,
                ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                flags,
                remote_addr,
                rkey,
            )
        }
    })
}

/// Posts a receive into a buffer inside `mr`; 0, or -1 and errno.
///
/// `EINVAL` for a NULL `mr` or a range outside it (rdma-core asserts). `wr_id` is `context`.
///
/// # Safety
/// `id` is checked; `mr` is NULL or valid for reads.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_recv(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    addr: *mut c_void,
    length: usize,
    mr: *mut ibv_mr,
) -> c_int {
    crate::entry_body!(rdma_post_recv(id, context, addr, length, mr) -> MinusOne {
        let mr = live_mr(mr)?.ok_or(Errno::EINVAL)?;
        let (start, end) = (addr as usize, (addr as usize).checked_add(length));
        let mr_start = mr.addr;
        let mr_end = mr_start.checked_add(mr.len);
        match (end, mr_end) {
            (Some(end), Some(mr_end)) if start >= mr_start && end <= mr_end => {}
            _ => return Err(Errno::EINVAL),
        }
        let mut sge = sge(addr, length, mr.key);
        // SAFETY: post_recv_wr checks `id`; `sge` is one element on our stack.
        unsafe { post_recv_wr(id, context, &mut sge, 1) }
    })
}

/// Posts a SEND of a buffer; 0, or -1 and errno.
///
/// `mr` may be NULL (lkey 0), e.g. with `IBV_SEND_INLINE`. `wr_id` is `context`.
///
/// # Safety
/// `id` is checked; `mr` is NULL or valid for reads.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_send(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    addr: *mut c_void,
    length: usize,
    mr: *mut ibv_mr,
    flags: c_int,
) -> c_int {
    crate::entry_body!(rdma_post_send(id, context, addr, length, mr, flags) -> MinusOne {
        let mut sge = sge(addr, length, lkey_or_zero(mr)?);
        let op = ibv_wr_opcode::IBV_WR_SEND;
        // SAFETY: post_send_wr checks `id`; `sge` is one element on our stack.
        unsafe { post_send_wr(id, context, &mut sge, 1, op, flags, |_| {}) }
    })
}

/// Posts an RDMA READ into a buffer inside `mr`; 0, or -1 and errno.
///
/// Reads from `remote_addr` with `rkey`. `EINVAL` for a NULL `mr` (rdma-core dereferences it).
///
/// # Safety
/// `id` is checked; `mr` is NULL or valid for reads.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_read(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    addr: *mut c_void,
    length: usize,
    mr: *mut ibv_mr,
    flags: c_int,
    remote_addr: u64,
    rkey: u32,
) -> c_int {
    crate::entry_body!(rdma_post_read(id, context, addr, length, mr, flags, remote_addr, rkey) -> MinusOne {
        let mr = live_mr(mr)?.ok_or(Errno::EINVAL)?;
        let mut sge = sge(addr, length, mr.key);
        // SAFETY: post_rdma checks `id`; `sge` is one element on our stack.
        unsafe {
            post_rdma(
                id,
                context,
                &mut sge,
                1,
                ibv_wr_opcode::IBV_WR_RDMA_READ,
                flags,
                remote_addr,
                rkey,
            )
        }
    })
}

/// Posts an RDMA WRITE of a buffer; 0, or -1 and errno.
///
/// Writes to `remote_addr` with `rkey`; `mr` may be NULL (lkey 0), e.g. with `IBV_SEND_INLINE`.
///
/// # Safety
/// `id` is checked; `mr` is NULL or valid for reads.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_write(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    addr: *mut c_void,
    length: usize,
    mr: *mut ibv_mr,
    flags: c_int,
    remote_addr: u64,
    rkey: u32,
) -> c_int {
    crate::entry_body!(rdma_post_write(id, context, addr, length, mr, flags, remote_addr, rkey) -> MinusOne {
        let mut sge = sge(addr, length, lkey_or_zero(mr)?);
        // SAFETY: post_rdma checks `id`; `sge` is one element on our stack.
        unsafe {
            post_rdma(
                id,
                context,
                &mut sge,
                1,
                ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                flags,
                remote_addr,
                rkey,
            )
        }
    })
}

/// Posts a UD SEND of a buffer to `ah`/`remote_qpn`; 0, or -1 and errno.
///
/// The remote qkey is `RDMA_UDP_QKEY`; `mr` may be NULL (lkey 0).
///
/// # Safety
/// `id` is checked; `mr` is NULL or valid for reads; `ah` is checked by the provider.
#[no_mangle]
pub unsafe extern "C" fn rdma_post_ud_send(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    addr: *mut c_void,
    length: usize,
    mr: *mut ibv_mr,
    flags: c_int,
    ah: *mut ibv_ah,
    remote_qpn: u32,
) -> c_int {
    crate::entry_body!(rdma_post_ud_send(id, context, addr, length, mr, flags, ah, remote_qpn) -> MinusOne {
        let mut sge = sge(addr, length, lkey_or_zero(mr)?);
        let op = ibv_wr_opcode::IBV_WR_SEND;
        // SAFETY: post_send_wr checks `id`; `sge` is one element on our stack.
        unsafe {
            post_send_wr(id, context, &mut sge, 1, op, flags, |wr| {
                wr.wr.ud.ah = ah;
                wr.wr.ud.remote_qpn = remote_qpn;
                wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
            })
        }
    })
}

/// rdma-core's completion loop: poll; if empty, arm the CQ and poll again; if still empty, wait
/// for a CQ event on the channel, acknowledge it and start over. Returns the number of
/// completions (1); a negative poll result becomes -1 with that (negative) value in errno.
/// `EINVAL` for a NULL CQ or `wc`, or a NULL channel when it has to wait.
///
/// # Safety
/// `wc` is NULL or valid for writes of one `ibv_wc`; `cq`/`channel` are the id's.
unsafe fn get_comp(
    cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    wc: *mut ibv_wc,
) -> Result<c_int> {
    if cq.is_null() || wc.is_null() {
        return Err(Errno::EINVAL);
    }
    let ret = loop {
        // SAFETY: `cq` is the id's CQ (checked by ibv_poll_cq); `wc` holds one entry.
        let ret = unsafe { ibv_poll_cq(cq, 1, wc) };
        if ret != 0 {
            break ret;
        }
        // SAFETY: `cq` is the id's CQ (checked by ibv_poll_cq).
        let ret = unsafe { ibv_req_notify_cq(cq, 0) };
        if ret != 0 {
            seterrno(ret)?;
        }
        // SAFETY: `cq` is the id's CQ (checked by ibv_poll_cq); `wc` holds one entry.
        let ret = unsafe { ibv_poll_cq(cq, 1, wc) };
        if ret != 0 {
            break ret;
        }
        // rdma-core would pass a NULL channel on and crash; only needed once we must wait, so a
        // completion that is already there is still returned.
        if channel.is_null() {
            return Err(Errno::EINVAL);
        }
        let mut ev_cq: *mut ibv_cq = ptr::null_mut();
        let mut ev_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: `channel` is the id's channel (checked by ibv_get_cq_event); the out-pointers
        // are our locals.
        if unsafe { ibv_get_cq_event(channel, &mut ev_cq, &mut ev_ctx) } != 0 {
            return Err(Errno::last());
        }
        // rdma-core acknowledges on the id's CQ (and asserts that the event was for it).
        // SAFETY: `cq` is the id's CQ (checked by ibv_ack_cq_events).
        unsafe { ibv_ack_cq_events(cq, 1) };
    };
    if ret < 0 {
        // rdma_seterrno of a negative value: -1 with a negative errno, as in rdma-core.
        Err(Errno(ret))
    } else {
        Ok(ret)
    }
}

/// Waits for one send completion of the id; the count (1), or -1 and errno.
///
/// Polls the id's send CQ, blocking on its completion channel (`EINVAL` if it must wait and has
/// none).
///
/// # Safety
/// `id` is checked; `wc` is NULL or valid for writes of one `ibv_wc`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_send_comp(id: *mut rdma_cm_id, wc: *mut ibv_wc) -> c_int {
    crate::entry_body!(rdma_get_send_comp(id, wc) -> Value<c_int> {
        live_id(id)?;
        // SAFETY: live_id confirmed `id` is a live rdma_cm_id.
        let (cq, channel) = unsafe { ((*id).send_cq, (*id).send_cq_channel) };
        // SAFETY: get_comp checks the CQ, `wc` and channel for NULL; `wc` is the caller's.
        unsafe { get_comp(cq, channel, wc) }
    })
}

/// Waits for one receive completion of the id; the count (1), or -1 and errno.
///
/// Polls the id's receive CQ, blocking on its completion channel (`EINVAL` if it must wait and
/// has none).
///
/// # Safety
/// `id` is checked; `wc` is NULL or valid for writes of one `ibv_wc`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_recv_comp(id: *mut rdma_cm_id, wc: *mut ibv_wc) -> c_int {
    crate::entry_body!(rdma_get_recv_comp(id, wc) -> Value<c_int> {
        live_id(id)?;
        // SAFETY: live_id confirmed `id` is a live rdma_cm_id.
        let (cq, channel) = unsafe { ((*id).recv_cq, (*id).recv_cq_channel) };
        // SAFETY: get_comp checks the CQ, `wc` and channel for NULL; `wc` is the caller's.
        unsafe { get_comp(cq, channel, wc) }
    })
}
