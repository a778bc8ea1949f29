//! Extended verbs at the C boundary.
//!
//! * The `verbs_context` ops that the inline wrappers of verbs.h call ([`fill_context_ops`]):
//!   `query_port` (the full `ibv_port_attr`), `query_device_ex`, `query_rt_values`,
//!   `create_cq_ex`, `modify_cq`, `create_qp_ex`, `alloc_td`/`dealloc_td`,
//!   `alloc_parent_domain` and `alloc_null_mr`, and the device-memory ops of
//!   [`crate::abi::verbs_dm`]. Every other op stays NULL, so its inline wrapper answers
//!   `EOPNOTSUPP`.
//! * The `ibv_cq_ex` functions behind `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and
//!   `ibv_wc_read_*`.
//! * The `ibv_qp_ex` functions behind `ibv_wr_*`, and the exported `ibv_qp_to_qp_ex`.
//! * The exported ECE calls, `ibv_query_ece` and `ibv_set_ece`.
//!
//! None of these callbacks is an exported symbol (libibverbs does not export them either); the
//! ones with logic run their body through [`crate::entry_body!`] like every `entry!` (named as
//! the program calls them, e.g. `ibv_start_poll`, for `RDMASHIM_TRACE`), so a panic never crosses
//! into C. The readers only load values and cannot fail (and are not traced).

use crate::abi::{arg, out, Nothing, NullOr, PositiveErrno};
use crate::entry;
use crate::errno::Errno;
use crate::sys::*;
use crate::verbs::cq::{Cq, ExOpts};
use crate::verbs::cq_ex::{self, CqAlloc, Cursor};
use crate::verbs::device_ex;
use crate::verbs::mr::Mr;
use crate::verbs::objects;
use crate::verbs::pd::{Pd, Td};
use crate::verbs::qp::{Owner, Qp};
use crate::verbs::qp_ex::{self, Op, QpEx};
use crate::verbs::srq::Srq;
use crate::verbs::xrcd::Xrcd;
use libc::{c_int, c_uint};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use ibv_wr_opcode::*;

/// Installs the extended ops in a new context (called by `Context::open`).
pub fn fill_context_ops(v: &mut verbs_context) {
    v.query_port = Some(query_port);
    v.query_device_ex = Some(query_device_ex);
    v.create_cq_ex = Some(create_cq_ex);
    v.create_qp_ex = Some(create_qp_ex);
    v.query_rt_values = Some(query_rt_values);
    v.modify_cq = Some(modify_cq);
    v.alloc_td = Some(alloc_td);
    v.dealloc_td = Some(dealloc_td);
    v.alloc_parent_domain = Some(alloc_parent_domain);
    v.alloc_null_mr = Some(alloc_null_mr);
    v.advise_mr = Some(advise_mr);
    v.open_xrcd = Some(open_xrcd);
    v.close_xrcd = Some(close_xrcd);
    v.create_srq_ex = Some(create_srq_ex);
    v.get_srq_num = Some(get_srq_num);
    v.open_qp = Some(open_qp);
    crate::abi::verbs_dm::fill_dm_ops(v);
}

unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    crate::entry_body!("ibv_advise_mr"(pd, advice, flags, sg_list, num_sge) -> PositiveErrno {
        let pd = objects().pds.get(pd)?;
        let n = i32::try_from(num_sge).map_err(|_| Errno::EINVAL)?;
        // SAFETY: sg_list holds num_sge entries, per the man page.
        let sgl = unsafe { crate::verbs::send_wr::read_sgl(sg_list, n) }?;
        crate::verbs::pages::advise(&pd, advice, flags, sgl.as_slice())
    })
}

unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    crate::entry_body!("ibv_open_xrcd"(context, attr) -> NullOr<ibv_xrcd> {
        let c = objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads.
        Xrcd::open(c, unsafe { arg(attr) }?)
    })
}

unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    crate::entry_body!("ibv_close_xrcd"(xrcd) -> PositiveErrno { Xrcd::close(xrcd) })
}

unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    crate::entry_body!("ibv_create_srq_ex"(context, attr) -> NullOr<ibv_srq> {
        objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads and writes (the actual sizes are written back).
        Srq::create_ex(unsafe { out(attr) }?)
    })
}

unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    crate::entry_body!("ibv_get_srq_num"(srq, srq_num) -> PositiveErrno {
        let n = objects().srqs.get(srq)?.number()?;
        // SAFETY: srq_num is NULL or valid for writes.
        *unsafe { out(srq_num) }? = n;
        Ok(())
    })
}

unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    crate::entry_body!("ibv_open_qp"(context, attr) -> NullOr<ibv_qp> {
        objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads.
        let a = unsafe { arg(attr) }?;
        let x = objects().xrcds.get(a.xrcd)?;
        Qp::open(x, a)
    })
}

unsafe extern "C" fn alloc_null_mr(pd: *mut ibv_pd) -> *mut ibv_mr {
    crate::entry_body!("ibv_alloc_null_mr"(pd) -> NullOr<ibv_mr> {
        objects().pds.get(pd)?.reg_mr(Mr::alloc_null)
    })
}

// ---------------------------------------------------------------------------------------------
// Context ops

unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    crate::entry_body!("ibv_query_port"(context, port, attr, len) -> PositiveErrno {
        objects().contexts.get(context)?;
        let a = device_ex::port_attr_full(port)?;
        // The legacy prefix (up to `flags`) is the least a caller can have compiled.
        let min = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
        // SAFETY: attr is valid for len bytes (the caller's sizeof).
        unsafe { device_ex::copy_sized(&a, attr.cast(), len, min) }
    })
}

unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    len: usize,
) -> c_int {
    crate::entry_body!("ibv_query_device_ex"(context, input, attr, len) -> PositiveErrno {
        objects().contexts.get(context)?;
        // SAFETY: input is NULL or valid for reads.
        if unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0) {
            return Err(Errno::EINVAL);
        }
        let a = device_ex::device_attr_ex();
        let min = std::mem::size_of::<ibv_device_attr>();
        // SAFETY: attr is valid for len bytes (the caller's sizeof).
        unsafe { device_ex::copy_sized(&a, attr.cast(), len, min) }
    })
}

unsafe extern "C" fn query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    crate::entry_body!("ibv_query_rt_values_ex"(context, values) -> PositiveErrno {
        objects().contexts.get(context)?;
        // SAFETY: values is NULL or valid for reads and writes.
        device_ex::rt_values(unsafe { out(values) }?)
    })
}

unsafe extern "C" fn modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int {
    crate::entry_body!("ibv_modify_cq"(cq, attr) -> PositiveErrno {
        let c = objects().cqs.get(cq)?;
        // SAFETY: attr is NULL or valid for reads.
        c.modify(unsafe { arg(attr) }?)
    })
}

unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    crate::entry_body!("ibv_alloc_td"(context, init_attr) -> NullOr<ibv_td> {
        let c = objects().contexts.get(context)?;
        // SAFETY: init_attr is NULL or valid for reads.
        Td::alloc(c, unsafe { arg(init_attr) }?)
    })
}

unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    crate::entry_body!("ibv_dealloc_td"(td) -> PositiveErrno { Td::dealloc(td) })
}

unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    crate::entry_body!("ibv_alloc_parent_domain"(context, attr) -> NullOr<ibv_pd> {
        let c = objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads.
        Pd::alloc_parent(c, unsafe { arg(attr) }?)
    })
}

unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    crate::entry_body!("ibv_create_cq_ex"(context, attr) -> NullOr<ibv_cq_ex> {
        let c = objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads.
        let a = unsafe { arg(attr) }?;
        cq_ex::check_init_attr(a)?;
        let parent = cq_ex::parent_domain(&c, a)?;
        let ch = if a.channel.is_null() { None } else { Some(objects().channels.get(a.channel)?) };
        let wc_flags = a.wc_flags;
        let vector = i32::try_from(a.comp_vector).map_err(|_| Errno::EINVAL)?;
        Cq::create_ex(
            c,
            a.cqe as i32,
            a.cq_context,
            ch,
            vector,
            ExOpts { stamp: cq_ex::wants_stamp(wc_flags), parent },
            |ex| fill_cq_ops(ex, wc_flags),
        )
    })
}

unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    crate::entry_body!("ibv_create_qp_ex"(context, attr) -> NullOr<ibv_qp> {
        objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads and writes (caps are written back).
        let a = unsafe { out(attr) }?;
        let ex = qp_ex::check_create_attr(a)?;
        let owner = if a.qp_type == ibv_qp_type::IBV_QPT_XRC_RECV {
            let x = objects().xrcds.get(a.xrcd)?;
            if x.ctx.ptr() != context {
                return Err(Errno::EINVAL);
            }
            Owner::Xrcd(x)
        } else {
            let pd = objects().pds.get(a.pd)?;
            if pd.ctx.ptr() != context {
                return Err(Errno::EINVAL);
            }
            Owner::Pd(pd)
        };
        let mut basic = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: crate::handle::pod_copy(&a.cap),
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let p = Qp::create_in(owner, &mut basic)?;
        a.cap = basic.cap;
        let q = objects().qps.get(p)?;
        if ex.block_self_mcast {
            q.set_block_self_mcast(true);
        }
        enable(&q);
        Ok(p)
    })
}

// ---------------------------------------------------------------------------------------------
// ibv_cq_ex

fn fill_cq_ops(ex: &mut ibv_cq_ex, wc_flags: u64) {
    let has = |f: u64| wc_flags & f != 0;
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    // Always present, as with real providers; the others only when asked for in wc_flags.
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_byte_len = has(cq_ex::WITH_BYTE_LEN).then_some(read_byte_len);
    ex.read_imm_data = has(cq_ex::WITH_IMM).then_some(read_imm_data);
    ex.read_qp_num = has(cq_ex::WITH_QP_NUM).then_some(read_qp_num);
    ex.read_src_qp = has(cq_ex::WITH_SRC_QP).then_some(read_src_qp);
    ex.read_slid = has(cq_ex::WITH_SLID).then_some(read_slid);
    ex.read_sl = has(cq_ex::WITH_SL).then_some(read_sl);
    ex.read_dlid_path_bits = has(cq_ex::WITH_DLID_PATH_BITS).then_some(read_dlid_path_bits);
    ex.read_completion_ts = has(cq_ex::WITH_TS).then_some(read_completion_ts);
    ex.read_completion_wallclock_ns =
        has(cq_ex::WITH_TS_WALLCLOCK).then_some(read_completion_wallclock_ns);
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    crate::entry_body!("ibv_start_poll"(cq, attr) -> PositiveErrno {
        // SAFETY: attr is NULL or valid for reads.
        if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            return Err(Errno::EINVAL);
        }
        objects().cqs.get(cq)?.ex_poll(true)
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    crate::entry_body!("ibv_next_poll"(cq) -> PositiveErrno { objects().cqs.get(cq)?.ex_poll(false) })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    crate::entry_body!("ibv_end_poll"(cq) -> Nothing {
        objects().cqs.get(cq)?.end_poll();
        Ok(())
    })
}

/// The cursor of a CQ we allocated.
///
/// # Safety
/// `cq` is NULL or the `ibv_cq_ex` of a live `CqAlloc`: these readers are installed only in
/// ours, and C calls them with the struct it read them from.
unsafe fn cursor<'a>(cq: *mut ibv_cq_ex) -> Option<&'a Cursor> {
    let a = cq.cast::<CqAlloc>();
    if a.is_null() {
        return None;
    }
    // SAFETY: per the function's contract; only the cursor (atomics) is borrowed.
    Some(unsafe { &*std::ptr::addr_of!((*a).cursor) })
}

macro_rules! readers {
    ($($name:ident -> $t:ty = |$c:ident| $e:expr;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            // SAFETY: see cursor(); these functions are only installed in our CQs.
            match unsafe { cursor(cq) } {
                Some($c) => $e,
                None => Default::default(),
            }
        }
    )*};
}

readers! {
    read_opcode -> ibv_wc_opcode::Type = |c| c.opcode.load(Relaxed);
    read_byte_len -> u32 = |c| c.byte_len.load(Relaxed);
    read_imm_data -> __be32 = |c| c.imm.load(Relaxed);
    read_qp_num -> u32 = |c| c.qp_num.load(Relaxed);
    read_src_qp -> u32 = |c| c.src_qp.load(Relaxed);
    read_wc_flags -> c_uint = |c| c.wc_flags.load(Relaxed);
    read_completion_ts -> u64 = |c| c.ts.load(Relaxed);
    read_completion_wallclock_ns -> u64 = |c| cq_ex::wallclock_ns(c.ts.load(Relaxed));
    // The soft provider is RoCE-like: no vendor error, LIDs, SL or path bits.
    read_vendor_err -> u32 = |_c| 0;
    read_slid -> u32 = |_c| 0;
    read_sl -> u8 = |_c| 0;
    read_dlid_path_bits -> u8 = |_c| 0;
}

// ---------------------------------------------------------------------------------------------
// ibv_qp_ex

/// Enables a QP for the posting API (idempotent) and returns its `ibv_qp_ex`.
fn enable(q: &Arc<Qp>) -> *mut ibv_qp_ex {
    qp_ex::enable(q, fill_qp_ops);
    q.raw.as_ptr()
}

fn fill_qp_ops(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    // Not supported by this provider: present so that a caller gets an error from
    // wr_complete instead of a jump through NULL.
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_atomic_write = Some(wr_atomic_write);
}

/// Runs a builder on the posting state of `qp`; builders return nothing, so a foreign pointer
/// only sets errno.
fn with_qp(name: &'static str, qp: *mut ibv_qp_ex, f: impl FnOnce(&QpEx)) {
    crate::entry_body!(@ name, (qp) -> Nothing {
        let x = qp_ex::lookup(qp)?;
        f(&x);
        Ok(())
    })
}

/// An `ibv_wr_<op>` call: the caller has set `wr_id` and `wr_flags` in the `ibv_qp_ex`.
fn with_op(name: &'static str, qp: *mut ibv_qp_ex, op: Op) {
    crate::entry_body!(@ name, (qp) -> Nothing {
        let x = qp_ex::lookup(qp)?;
        // SAFETY: qp is one of our live ibv_qp_ex (the lookup succeeded); C owns these two
        // fields and set them on this thread before the call.
        let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
        x.add(wr_id, flags, op);
        Ok(())
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_qp("ibv_wr_start", qp, |x| x.start());
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    crate::entry_body!("ibv_wr_complete"(qp) -> PositiveErrno { qp_ex::lookup(qp)?.complete() })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_qp("ibv_wr_abort", qp, |x| x.abort());
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    with_op("ibv_wr_send", qp, Op::new(IBV_WR_SEND));
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) {
    with_op("ibv_wr_send_imm", qp, Op { imm: Some(imm_data), ..Op::new(IBV_WR_SEND_WITH_IMM) });
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    with_op("ibv_wr_rdma_write", qp, Op { rkey, remote_addr, ..Op::new(IBV_WR_RDMA_WRITE) });
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: __be32,
) {
    with_op(
        "ibv_wr_rdma_write_imm",
        qp,
        Op { rkey, remote_addr, imm: Some(imm_data), ..Op::new(IBV_WR_RDMA_WRITE_WITH_IMM) },
    );
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    with_op("ibv_wr_rdma_read", qp, Op { rkey, remote_addr, ..Op::new(IBV_WR_RDMA_READ) });
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op =
        Op { rkey, remote_addr, compare_add: compare, swap, ..Op::new(IBV_WR_ATOMIC_CMP_AND_SWP) };
    with_op("ibv_wr_atomic_cmp_swp", qp, op);
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    with_op(
        "ibv_wr_atomic_fetch_add",
        qp,
        Op { rkey, remote_addr, compare_add: add, ..Op::new(IBV_WR_ATOMIC_FETCH_AND_ADD) },
    );
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: the verbs contract makes an inline request's buffer readable at this call.
    with_qp("ibv_wr_set_sge", qp, |x| unsafe { x.set_sges(std::slice::from_ref(&sge)) });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    with_qp("ibv_wr_set_sge_list", qp, |x| {
        if num_sge > 0 && sg_list.is_null() {
            return x.fail(Errno::EINVAL);
        }
        let sges = if num_sge == 0 {
            &[][..]
        } else {
            // SAFETY: sg_list holds num_sge entries (the API contract).
            unsafe { std::slice::from_raw_parts(sg_list, num_sge) }
        };
        // SAFETY: as in wr_set_sge.
        unsafe { x.set_sges(sges) }
    });
}

unsafe extern "C" fn wr_set_inline_data(
    qp: *mut ibv_qp_ex,
    addr: *mut libc::c_void,
    length: usize,
) {
    // SAFETY: the buffer is readable for length bytes (the API contract).
    with_qp("ibv_wr_set_inline_data", qp, |x| unsafe {
        x.set_inline(&[(addr as *const u8, length)])
    });
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    with_qp("ibv_wr_set_inline_data_list", qp, |x| {
        if num_buf > 0 && buf_list.is_null() {
            return x.fail(Errno::EINVAL);
        }
        let bufs: Vec<(*const u8, usize)> = if num_buf == 0 {
            Vec::new()
        } else {
            // SAFETY: buf_list holds num_buf entries (the API contract).
            unsafe { std::slice::from_raw_parts(buf_list, num_buf) }
                .iter()
                .map(|b| (b.addr as *const u8, b.length))
                .collect()
        };
        // SAFETY: every buffer is readable for its length (the API contract).
        unsafe { x.set_inline(&bufs) }
    });
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    with_qp("ibv_wr_set_ud_addr", qp, |x| x.set_ud_addr(ah, remote_qpn, remote_qkey));
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: info is NULL or a valid bind description (the API contract).
    match unsafe { info.as_ref() } {
        Some(i) => {
            let bind = Some(crate::verbs::send_wr::BindArgs::new(mw, Some(rkey), i));
            with_op("ibv_wr_bind_mw", qp, Op { bind, ..Op::new(IBV_WR_BIND_MW) });
        }
        None => with_qp("ibv_wr_bind_mw", qp, |x| x.fail(Errno::EINVAL)),
    }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    with_op("ibv_wr_local_inv", qp, Op { rkey: invalidate_rkey, ..Op::new(IBV_WR_LOCAL_INV) });
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    with_op("ibv_wr_send_inv", qp, Op { rkey: invalidate_rkey, ..Op::new(IBV_WR_SEND_WITH_INV) });
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut libc::c_void, _sz: u16, _mss: u16) {
    with_qp("ibv_wr_send_tso", qp, |x| x.fail(Errno::EOPNOTSUPP));
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, srqn: u32) {
    with_qp("ibv_wr_set_xrc_srqn", qp, |x| x.set_xrc_srqn(srqn));
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    _rkey: u32,
    _remote_addr: u64,
    _data: *const libc::c_void,
) {
    with_qp("ibv_wr_atomic_write", qp, |x| x.fail(Errno::EOPNOTSUPP));
}

entry! {
    /// The QP's ECE options (`verbs::ece`).
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        // SAFETY: ece is NULL or valid for writes.
        *unsafe { out(ece) }? = q.query_ece();
        Ok(())
    }

    /// Sets the QP's ECE options; the ones taken come back in `ece`.
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        // SAFETY: ece is NULL or valid for reads and writes (the accepted options come back).
        q.set_ece(unsafe { out(ece) }?)
    }

    /// The `ibv_qp_ex` of one of our QPs (every QP is allocated as one), with its posting
    /// functions filled; NULL + `EINVAL` for anything else.
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> NullOr<ibv_qp_ex>, then crate::abi::native_trace_ex::qp_ex_made {
        let q = objects().qps.get(qp)?;
        Ok(enable(&q))
    }
}

#[cfg(test)]
#[path = "verbs_ex_tests.rs"]
mod tests;
