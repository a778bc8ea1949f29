//! The other `static inline` functions of verbs.h as exported functions (the posting and
//! polling ones are in [`crate::abi::verbs_inline_wr`]), so that FFI callers, which cannot
//! compile the header, reach the whole API.
//!
//! Each one does what its inline body does, in the same order:
//! * the extended calls look their op up in the context's `struct verbs_context` as
//!   `verbs_get_ctx_op` does (`abi_compat` marks an extended context, `sz` must reach the slot,
//!   the slot must be set) and call it; a missing op gives what the inline gives (`EOPNOTSUPP`
//!   as NULL + errno or as the returned code), and the inline's fallbacks to a legacy call
//!   (`ibv_create_qp_ex`, `ibv_create_srq_ex`, `ibv_query_device_ex`, `___ibv_query_port`) are
//!   kept;
//! * the memory-window calls go through `context->ops`, device memory through the `ibv_dm`'s
//!   own functions, `ibv_post_wq_recv` through the `ibv_wq`'s;
//! * the wrappers of exported calls (`ibv_query_gid_ex`, `__ibv_reg_mr`, ...) call our export.
//!
//! Where the inline would dereference a NULL or dead handle, or jump through a NULL op, the
//! forwarder answers `EINVAL` (the handle) or `EOPNOTSUPP` (the op) in the function's
//! convention instead. The computation of the three pure helpers (`ibv_inc_rkey`,
//! `ibv_is_qpt_supported`, `ibv_flow_label_to_udp_sport`) lives in `verbs`. docs/INLINE-API.md
//! has the list.

use crate::abi::verbs as exported;
use crate::abi::{arg, inline_handle, Forward, Infallible, NegativeErrno, NullOr, PositiveErrno};
use crate::entry;
use crate::errno::{Errno, Result};
use crate::sys::*;
use crate::verbs::device::Context;
use crate::verbs::objects;
use libc::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::sync::Arc;

/// verbs.h's `__VERBS_ABI_IS_EXTENDED` (a macro, so not in rdma-sys): `abi_compat` of a context
/// that has a `struct verbs_context` in front of it.
const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `verbs_get_ctx(ctx)` on a live context of ours (or, in passthrough, the native library's):
/// the `verbs_context` around it, or NULL if `abi_compat` does not mark it extended. The `Arc`
/// keeps a context of ours alive meanwhile.
pub(super) fn extended(
    ctx: *mut ibv_context,
) -> Result<(Option<Arc<Context>>, *mut verbs_context)> {
    let live = inline_handle(ctx, |p| objects().contexts.get(p))?;
    // SAFETY: ctx is a live context (held by `live` if ours); abi_compat is a plain field.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return Ok((live, std::ptr::null_mut()));
    }
    let off = offset_of!(verbs_context, context);
    // SAFETY: an extended context is the `context` member (the last one) of a verbs_context
    // allocation (ours: `Context::open`; rdma-core's: verbs.h's `verbs_get_ctx` rule), so
    // stepping back by its offset stays inside that allocation.
    Ok((live, unsafe { ctx.cast::<u8>().sub(off) }.cast::<verbs_context>()))
}

/// `verbs_get_ctx_op(ctx, op)`: the extension op at `offset` in `verbs_context`, read by
/// `slot`, if the context is extended, its `sz` reaches the slot and the slot is set
/// (`EOPNOTSUPP` otherwise). Called through [`ctx_op!`].
fn ctx_op<F>(
    ctx: *mut ibv_context,
    offset: usize,
    slot: impl FnOnce(*const verbs_context) -> Option<F>,
) -> Result<F> {
    let (_live, v) = extended(ctx)?;
    if v.is_null() {
        return Err(Errno::EOPNOTSUPP);
    }
    // SAFETY: v is the verbs_context of the live context (see `extended`); sz is a plain field.
    if unsafe { (*v).sz } < size_of::<verbs_context>() - offset {
        return Err(Errno::EOPNOTSUPP);
    }
    slot(v).ok_or(Errno::EOPNOTSUPP)
}

macro_rules! ctx_op {
    ($ctx:expr, $op:ident) => {
        ctx_op($ctx, offset_of!(verbs_context, $op), |v| {
            // SAFETY: ctx_op calls this with the verbs_context of a live context of ours, whose
            // op slots are set when it opens; one field is read through the raw pointer.
            unsafe { std::ptr::addr_of!((*v).$op).read() }
        })
    };
}

/// The legacy op `slot` of `ctx->ops` (the memory-window calls), `EOPNOTSUPP` if NULL.
pub(super) fn legacy_op<F>(
    ctx: *mut ibv_context,
    slot: impl FnOnce(&ibv_context_ops) -> Option<F>,
) -> Result<F> {
    let _live = inline_handle(ctx, |p| objects().contexts.get(p))?;
    // SAFETY: ctx is a live context (held by `_live` if ours; in passthrough, the native
    // library's); its ops, set at open, are copied through the raw pointer.
    let ops = unsafe { std::ptr::addr_of!((*ctx).ops).read() };
    slot(&ops).ok_or(Errno::EOPNOTSUPP)
}

/// The `context` field of an object this provider never creates (flows, flow actions,
/// counters, WQs, indirection tables): NULL is `EINVAL`; anything else is read as the inline
/// reads it, and the context is then checked by [`ctx_op`].
///
/// # Safety
/// `p` is NULL or points at a readable `T`.
unsafe fn context_of<T>(
    p: *const T,
    context: impl FnOnce(&T) -> *mut ibv_context,
) -> Result<*mut ibv_context> {
    // SAFETY: per the function's contract.
    Ok(context(unsafe { arg(p) }?))
}

entry! {
    /// `verbs_get_ctx(ctx)`: the `verbs_context` in front of an extended context, NULL (errno
    /// untouched) for one that is not; NULL + `EINVAL` for a context that is not ours.
    fn verbs_get_ctx(ctx: *mut ibv_context) -> NullOr<verbs_context> {
        extended(ctx).map(|(_, v)| v)
    }

    /// `ibv_get_device_list` as `RDMA_STATIC_PROVIDERS` builds spell it: our providers are
    /// built in, so there is nothing to register first.
    fn __ibv_get_device_list(num_devices: *mut c_int) -> NullOr<*mut ibv_device> {
        // SAFETY: our export, with the caller's argument.
        Ok(unsafe { exported::ibv_get_device_list(num_devices) })
    }

    /// What the `ibv_query_port` macro calls: the `query_port` op with the full struct, or else
    /// the zeroed struct filled by the exported (legacy) `ibv_query_port`.
    fn ___ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> Forward<PositiveErrno> {
        match ctx_op!(context, query_port) {
            // SAFETY: the context's op, with the caller's arguments and the struct's size.
            Ok(f) => Ok(unsafe { f(context, port_num, port_attr, size_of::<ibv_port_attr>()) }),
            Err(Errno::EOPNOTSUPP) => {
                if port_attr.is_null() {
                    return Err(Errno::EINVAL);
                }
                // SAFETY: port_attr is valid for writes of an ibv_port_attr (the API contract);
                // all-zero is a valid one.
                unsafe { port_attr.write_bytes(0, 1) };
                // SAFETY: our export; the full struct starts with the legacy one.
                Ok(unsafe { exported::ibv_query_port(context, port_num, port_attr.cast()) })
            }
            Err(e) => Err(e),
        }
    }

    /// `_ibv_query_gid_ex` with `sizeof(struct ibv_gid_entry)`.
    fn ibv_query_gid_ex(context: *mut ibv_context, port_num: u32, gid_index: u32, entry: *mut ibv_gid_entry, flags: u32) -> Forward<PositiveErrno> {
        let size = size_of::<ibv_gid_entry>();
        // SAFETY: our export, with the caller's arguments.
        Ok(unsafe { exported::_ibv_query_gid_ex(context, port_num, gid_index, entry, flags, size) })
    }

    /// `_ibv_query_gid_table` with `sizeof(struct ibv_gid_entry)`.
    fn ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32) -> Forward<NegativeErrno> {
        let size = size_of::<ibv_gid_entry>();
        // SAFETY: our export, with the caller's arguments.
        Ok(unsafe { exported::_ibv_query_gid_table(context, entries, max_entries, flags, size) })
    }

    /// What the `ibv_reg_mr` macro calls: `ibv_reg_mr` when the access flags are a compile-time
    /// constant without optional flags, `ibv_reg_mr_iova2` at iova = addr otherwise.
    fn __ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_uint, is_access_const: c_int) -> NullOr<ibv_mr> {
        let optional = ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0;
        if is_access_const != 0 && access & optional == 0 {
            // SAFETY: our export, with the caller's arguments.
            Ok(unsafe { exported::ibv_reg_mr(pd, addr, length, access as c_int) })
        } else {
            // SAFETY: our export, with the caller's arguments.
            Ok(unsafe { exported::ibv_reg_mr_iova2(pd, addr, length, addr as u64, access) })
        }
    }

    /// What the `ibv_reg_mr_iova` macro calls: `ibv_reg_mr_iova` or `ibv_reg_mr_iova2`, chosen
    /// as in `__ibv_reg_mr`.
    fn __ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint, is_access_const: c_int) -> NullOr<ibv_mr> {
        let optional = ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0;
        if is_access_const != 0 && access & optional == 0 {
            // SAFETY: our export, with the caller's arguments.
            Ok(unsafe { exported::ibv_reg_mr_iova(pd, addr, length, iova, access as c_int) })
        } else {
            // SAFETY: our export, with the caller's arguments.
            Ok(unsafe { exported::ibv_reg_mr_iova2(pd, addr, length, iova, access) })
        }
    }

    /// The low 8 bits (the key's tag) of `rkey` plus one.
    fn ibv_inc_rkey(rkey: u32) -> Infallible<u32> {
        Ok(crate::verbs::mw::inc_rkey(rkey))
    }

    /// 1 if bit `qpt` of `caps` is set, else 0.
    fn ibv_is_qpt_supported(caps: u32, qpt: ibv_qp_type::Type) -> Infallible<c_int> {
        Ok(crate::verbs::device_ex::qpt_supported(caps, qpt) as c_int)
    }

    /// The RoCEv2 UDP source port of a GRH flow label.
    fn ibv_flow_label_to_udp_sport(fl: u32) -> Infallible<u16> {
        Ok(crate::verbs::ud::flow_label_to_udp_sport(fl))
    }

    // --- memory regions and windows ------------------------------------------------------

    /// `pd->context->ops.alloc_mw(pd, type)`; NULL + `EOPNOTSUPP` without the op.
    fn ibv_alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type::Type) -> NullOr<ibv_mw> {
        let _live = inline_handle(pd, |p| objects().pds.get(p))?;
        // SAFETY: pd is a live PD (held by `_live` if ours; in passthrough, the native library's).
        let f = legacy_op(unsafe { (*pd).context }, |o| o.alloc_mw)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(pd, type_) })
    }

    /// `mw->context->ops.dealloc_mw(mw)`.
    fn ibv_dealloc_mw(mw: *mut ibv_mw) -> Forward<PositiveErrno> {
        let ctx = match inline_handle(mw, |p| objects().mws.get(p))? {
            Some(w) => w.raw.read().context,
            // SAFETY: a non-NULL window of the native library; its context, as the inline reads.
            None => unsafe { (*mw).context },
        };
        let f = legacy_op(ctx, |o| o.dealloc_mw)?;
        // SAFETY: the context's op, with the caller's window.
        Ok(unsafe { f(mw) })
    }

    /// The inline's checks (type 1 window, range only with an MR: `EINVAL`; the MR in the
    /// window's PD: `EPERM`), then `mw->context->ops.bind_mw(qp, mw, mw_bind)`.
    fn ibv_bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> Forward<PositiveErrno> {
        // SAFETY: mw_bind is NULL or valid for reads (the API contract).
        let info = &unsafe { arg(mw_bind) }?.bind_info;
        let ctx = match inline_handle(mw, |p| objects().mws.get(p))? {
            Some(w) => {
                w.bind_call_checks(info)?;
                w.raw.read().context
            }
            None => {
                // SAFETY: a non-NULL window and MR of the native library, read as the inline
                // reads them.
                let (t, pd, ctx) = unsafe { ((*mw).type_, (*mw).pd, (*mw).context) };
                // SAFETY: mr is the native library's live MR bound by the caller, whose PD the
                // inline reads.
                crate::verbs::mw::bind_call_rule(t, pd, info, |mr| Ok(unsafe { (*mr).pd }))?;
                ctx
            }
        };
        let f = legacy_op(ctx, |o| o.bind_mw)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(qp, mw, mw_bind) })
    }

    /// The context's `advise_mr`, else `EOPNOTSUPP`.
    fn ibv_advise_mr(pd: *mut ibv_pd, advice: ib_uverbs_advise_mr_advice::Type, flags: u32, sg_list: *mut ibv_sge, num_sge: u32) -> Forward<PositiveErrno> {
        let _live = inline_handle(pd, |p| objects().pds.get(p))?;
        // SAFETY: pd is a live PD (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*pd).context }, advise_mr)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(pd, advice, flags, sg_list, num_sge) })
    }

    /// The context's `alloc_null_mr`, else NULL + `EOPNOTSUPP`.
    fn ibv_alloc_null_mr(pd: *mut ibv_pd) -> NullOr<ibv_mr> {
        let _live = inline_handle(pd, |p| objects().pds.get(p))?;
        // SAFETY: pd is a live PD (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*pd).context }, alloc_null_mr)?;
        // SAFETY: the context's op, with the caller's PD.
        Ok(unsafe { f(pd) })
    }

    // --- device memory -------------------------------------------------------------------

    /// The context's `alloc_dm`, else NULL + `EOPNOTSUPP`.
    fn ibv_alloc_dm(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> NullOr<ibv_dm> {
        let f = ctx_op!(context, alloc_dm)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, attr) })
    }

    /// The context's `free_dm`, else `EOPNOTSUPP`.
    fn ibv_free_dm(dm: *mut ibv_dm) -> Forward<PositiveErrno> {
        let ctx = match inline_handle(dm, |p| objects().dms.get(p))? {
            Some(d) => d.raw.read().context,
            // SAFETY: a non-NULL DM of the native library; its context, as the inline reads.
            None => unsafe { (*dm).context },
        };
        let f = ctx_op!(ctx, free_dm)?;
        // SAFETY: the context's op, with the caller's DM.
        Ok(unsafe { f(dm) })
    }

    /// `dm->memcpy_to_dm(dm, dm_offset, host_addr, length)`.
    fn ibv_memcpy_to_dm(dm: *mut ibv_dm, dm_offset: u64, host_addr: *const c_void, length: usize) -> Forward<PositiveErrno> {
        let f = match inline_handle(dm, |p| objects().dms.get(p))? {
            Some(d) => d.raw.read().memcpy_to_dm,
            // SAFETY: a non-NULL DM of the native library; its own function, as the inline reads.
            None => unsafe { (*dm).memcpy_to_dm },
        }
        .ok_or(Errno::EOPNOTSUPP)?;
        // SAFETY: the DM's own function, with the caller's arguments.
        Ok(unsafe { f(dm, dm_offset, host_addr, length) })
    }

    /// `dm->memcpy_from_dm(host_addr, dm, dm_offset, length)`.
    fn ibv_memcpy_from_dm(host_addr: *mut c_void, dm: *mut ibv_dm, dm_offset: u64, length: usize) -> Forward<PositiveErrno> {
        let f = match inline_handle(dm, |p| objects().dms.get(p))? {
            Some(d) => d.raw.read().memcpy_from_dm,
            // SAFETY: a non-NULL DM of the native library; its own function, as the inline reads.
            None => unsafe { (*dm).memcpy_from_dm },
        }
        .ok_or(Errno::EOPNOTSUPP)?;
        // SAFETY: the DM's own function, with the caller's arguments.
        Ok(unsafe { f(host_addr, dm, dm_offset, length) })
    }

    /// The PD's context's `reg_dm_mr`, else NULL + `EOPNOTSUPP`.
    fn ibv_reg_dm_mr(pd: *mut ibv_pd, dm: *mut ibv_dm, dm_offset: u64, length: usize, access: c_uint) -> NullOr<ibv_mr> {
        let _live = inline_handle(pd, |p| objects().pds.get(p))?;
        // SAFETY: pd is a live PD (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*pd).context }, reg_dm_mr)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(pd, dm, dm_offset, length, access) })
    }

    // --- CQs, SRQs, QPs, domains ---------------------------------------------------------

    /// The context's `create_cq_ex`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_cq_ex(context: *mut ibv_context, cq_attr: *mut ibv_cq_init_attr_ex) -> NullOr<ibv_cq_ex> {
        // Traced passthrough replaced the op with a traced trampoline: this call is traced
        // already, so it goes to the provider's op, and gives the CQ traced polling functions
        // as the trampoline would.
        if let Some(f) = crate::abi::native_trace_ex::original_create_cq_ex(context) {
            // SAFETY: the provider's op, with the caller's arguments.
            let cq = unsafe { f(context, cq_attr) };
            // SAFETY: NULL or the provider's new live CQ, not yet returned to the program.
            unsafe { crate::abi::native_trace_ex::wrap_cq(cq) };
            return Ok(cq);
        }
        let f = ctx_op!(context, create_cq_ex)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, cq_attr) })
    }

    /// The CQ's context's `modify_cq`, else `EOPNOTSUPP`.
    fn ibv_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> Forward<PositiveErrno> {
        let _live = inline_handle(cq, |p| objects().cqs.get(p))?;
        // SAFETY: cq is a live CQ (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*cq).context }, modify_cq)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(cq, attr) })
    }

    /// A basic SRQ (comp_mask PD, and TYPE only for `IBV_SRQT_BASIC`) through `ibv_create_srq`;
    /// anything else through the context's `create_srq_ex`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_srq_ex(context: *mut ibv_context, srq_init_attr_ex: *mut ibv_srq_init_attr_ex) -> NullOr<ibv_srq> {
        use ibv_srq_init_attr_mask as m;
        // SAFETY: srq_init_attr_ex is NULL or valid for reads (the API contract).
        let a = unsafe { arg(srq_init_attr_ex) }?;
        let (pd_bit, type_bit) = (m::IBV_SRQ_INIT_ATTR_PD.0, m::IBV_SRQ_INIT_ATTR_TYPE.0);
        let mask = a.comp_mask;
        if mask & !(pd_bit | type_bit) == 0
            && mask & pd_bit != 0
            && (mask & type_bit == 0 || a.srq_type == ibv_srq_type::IBV_SRQT_BASIC)
        {
            // SAFETY: our export; the extended attributes start with the basic ones.
            return Ok(unsafe { exported::ibv_create_srq(a.pd, srq_init_attr_ex.cast()) });
        }
        let f = ctx_op!(context, create_srq_ex)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, srq_init_attr_ex) })
    }

    /// The SRQ's context's `get_srq_num`, else `EOPNOTSUPP`.
    fn ibv_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> Forward<PositiveErrno> {
        let _live = inline_handle(srq, |p| objects().srqs.get(p))?;
        // SAFETY: srq is a live SRQ (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*srq).context }, get_srq_num)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(srq, srq_num) })
    }

    /// The SRQ's context's `post_srq_ops`; without it `*bad_op = op` and `EOPNOTSUPP`.
    fn ibv_post_srq_ops(srq: *mut ibv_srq, op: *mut ibv_ops_wr, bad_op: *mut *mut ibv_ops_wr) -> Forward<PositiveErrno> {
        let _live = inline_handle(srq, |p| objects().srqs.get(p))?;
        // SAFETY: srq is a live SRQ (held by `_live` if ours; in passthrough, the native library's).
        match ctx_op!(unsafe { (*srq).context }, post_srq_ops) {
            // SAFETY: the context's op, with the caller's arguments.
            Ok(f) => Ok(unsafe { f(srq, op, bad_op) }),
            Err(e) => {
                // SAFETY: bad_op is NULL or valid for writes (the API contract).
                if let Some(b) = unsafe { bad_op.as_mut() } {
                    *b = op;
                }
                Err(e)
            }
        }
    }

    /// comp_mask PD alone through `ibv_create_qp`; anything else through the context's
    /// `create_qp_ex`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_qp_ex(context: *mut ibv_context, qp_init_attr_ex: *mut ibv_qp_init_attr_ex) -> NullOr<ibv_qp> {
        // SAFETY: qp_init_attr_ex is NULL or valid for reads (the API contract).
        let a = unsafe { arg(qp_init_attr_ex) }?;
        if a.comp_mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
            // SAFETY: our export; the extended attributes start with the basic ones.
            return Ok(unsafe { exported::ibv_create_qp(a.pd, qp_init_attr_ex.cast()) });
        }
        let f = ctx_op!(context, create_qp_ex)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, qp_init_attr_ex) })
    }

    /// The context's `open_qp`, else NULL + `EOPNOTSUPP`.
    fn ibv_open_qp(context: *mut ibv_context, qp_open_attr: *mut ibv_qp_open_attr) -> NullOr<ibv_qp> {
        let f = ctx_op!(context, open_qp)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, qp_open_attr) })
    }

    /// The QP's context's `modify_qp_rate_limit`, else `EOPNOTSUPP`.
    fn ibv_modify_qp_rate_limit(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> Forward<PositiveErrno> {
        let _live = inline_handle(qp, |p| objects().qps.get(p))?;
        // SAFETY: qp is a live QP (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*qp).context }, modify_qp_rate_limit)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(qp, attr) })
    }

    /// The context's `open_xrcd`, else NULL + `EOPNOTSUPP`.
    fn ibv_open_xrcd(context: *mut ibv_context, xrcd_init_attr: *mut ibv_xrcd_init_attr) -> NullOr<ibv_xrcd> {
        let f = ctx_op!(context, open_xrcd)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, xrcd_init_attr) })
    }

    /// The domain's context's `close_xrcd` (the inline does not check it; we answer
    /// `EOPNOTSUPP` rather than jump through NULL).
    fn ibv_close_xrcd(xrcd: *mut ibv_xrcd) -> Forward<PositiveErrno> {
        let _live = inline_handle(xrcd, |p| objects().xrcds.get(p))?;
        // SAFETY: xrcd is a live domain (held by `_live` if ours; in passthrough, the native
        // library's).
        let f = ctx_op!(unsafe { (*xrcd).context }, close_xrcd)?;
        drop(_live);
        // SAFETY: the context's op, with the caller's domain.
        Ok(unsafe { f(xrcd) })
    }

    /// The context's `alloc_td`, else NULL + `EOPNOTSUPP`.
    fn ibv_alloc_td(context: *mut ibv_context, init_attr: *mut ibv_td_init_attr) -> NullOr<ibv_td> {
        let f = ctx_op!(context, alloc_td)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, init_attr) })
    }

    /// The domain's context's `dealloc_td`, else `EOPNOTSUPP`.
    fn ibv_dealloc_td(td: *mut ibv_td) -> Forward<PositiveErrno> {
        let _live = inline_handle(td, |p| objects().tds.get(p))?;
        // SAFETY: td is a live thread domain (held by `_live` if ours; in passthrough, the native
        // library's).
        let f = ctx_op!(unsafe { (*td).context }, dealloc_td)?;
        drop(_live);
        // SAFETY: the context's op, with the caller's domain.
        Ok(unsafe { f(td) })
    }

    /// The context's `alloc_parent_domain`, else NULL + `EOPNOTSUPP`.
    fn ibv_alloc_parent_domain(context: *mut ibv_context, attr: *mut ibv_parent_domain_init_attr) -> NullOr<ibv_pd> {
        let f = ctx_op!(context, alloc_parent_domain)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, attr) })
    }

    /// The context's `query_rt_values`, else `EOPNOTSUPP`.
    fn ibv_query_rt_values_ex(context: *mut ibv_context, values: *mut ibv_values_ex) -> Forward<PositiveErrno> {
        let f = ctx_op!(context, query_rt_values)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, values) })
    }

    /// `EINVAL` for a non-zero `input->comp_mask`; the context's `query_device_ex`; without it,
    /// or when it answers `EOPNOTSUPP`/`ENOSYS`, the zeroed struct with the legacy
    /// `ibv_query_device` in its `orig_attr`.
    fn ibv_query_device_ex(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex) -> Forward<PositiveErrno> {
        // SAFETY: input is NULL or valid for reads (the API contract).
        if unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0) {
            return Err(Errno::EINVAL);
        }
        match ctx_op!(context, query_device_ex) {
            Ok(f) => {
                // SAFETY: the context's op, with the caller's arguments and the struct's size.
                let r = unsafe { f(context, input, attr, size_of::<ibv_device_attr_ex>()) };
                if r != libc::EOPNOTSUPP && r != libc::ENOSYS {
                    return Ok(r);
                }
            }
            Err(Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(e),
        }
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: attr is valid for writes of an ibv_device_attr_ex (the API contract); all-zero
        // is a valid one.
        unsafe { attr.write_bytes(0, 1) };
        // SAFETY: our export, on the legacy part of the caller's struct.
        Ok(unsafe { exported::ibv_query_device(context, std::ptr::addr_of_mut!((*attr).orig_attr)) })
    }
}

// Steering, counters and receive work queues: objects this provider never creates (their ops
// stay NULL), so these answer `EOPNOTSUPP` as the inlines do, through the same lookups.
entry! {
    /// The QP's context's `ibv_create_flow`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_flow(qp: *mut ibv_qp, flow: *mut ibv_flow_attr) -> NullOr<ibv_flow> {
        let _live = inline_handle(qp, |p| objects().qps.get(p))?;
        // SAFETY: qp is a live QP (held by `_live` if ours; in passthrough, the native library's).
        let f = ctx_op!(unsafe { (*qp).context }, ibv_create_flow)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(qp, flow) })
    }

    /// The flow's context's `ibv_destroy_flow`, else `EOPNOTSUPP`.
    fn ibv_destroy_flow(flow_id: *mut ibv_flow) -> Forward<PositiveErrno> {
        // SAFETY: flow_id is NULL or a flow (the API contract).
        let f = ctx_op!(unsafe { context_of(flow_id, |x| x.context) }?, ibv_destroy_flow)?;
        // SAFETY: the context's op, with the caller's flow.
        Ok(unsafe { f(flow_id) })
    }

    /// The context's `create_flow_action_esp`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_flow_action_esp(ctx: *mut ibv_context, esp: *mut ibv_flow_action_esp_attr) -> NullOr<ibv_flow_action> {
        let f = ctx_op!(ctx, create_flow_action_esp)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(ctx, esp) })
    }

    /// The action's context's `modify_flow_action_esp`, else `EOPNOTSUPP`.
    fn ibv_modify_flow_action_esp(action: *mut ibv_flow_action, esp: *mut ibv_flow_action_esp_attr) -> Forward<PositiveErrno> {
        // SAFETY: action is NULL or a flow action (the API contract).
        let f = ctx_op!(unsafe { context_of(action, |x| x.context) }?, modify_flow_action_esp)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(action, esp) })
    }

    /// The action's context's `destroy_flow_action`, else `EOPNOTSUPP`.
    fn ibv_destroy_flow_action(action: *mut ibv_flow_action) -> Forward<PositiveErrno> {
        // SAFETY: action is NULL or a flow action (the API contract).
        let f = ctx_op!(unsafe { context_of(action, |x| x.context) }?, destroy_flow_action)?;
        // SAFETY: the context's op, with the caller's action.
        Ok(unsafe { f(action) })
    }

    /// The context's `create_counters`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_counters(context: *mut ibv_context, init_attr: *mut ibv_counters_init_attr) -> NullOr<ibv_counters> {
        let f = ctx_op!(context, create_counters)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, init_attr) })
    }

    /// The counters' context's `destroy_counters`, else `EOPNOTSUPP`.
    fn ibv_destroy_counters(counters: *mut ibv_counters) -> Forward<PositiveErrno> {
        // SAFETY: counters is NULL or a counters object (the API contract).
        let f = ctx_op!(unsafe { context_of(counters, |x| x.context) }?, destroy_counters)?;
        // SAFETY: the context's op, with the caller's object.
        Ok(unsafe { f(counters) })
    }

    /// The counters' context's `attach_counters_point_flow`, else `EOPNOTSUPP`.
    fn ibv_attach_counters_point_flow(counters: *mut ibv_counters, attr: *mut ibv_counter_attach_attr, flow: *mut ibv_flow) -> Forward<PositiveErrno> {
        // SAFETY: counters is NULL or a counters object (the API contract).
        let f = ctx_op!(unsafe { context_of(counters, |x| x.context) }?, attach_counters_point_flow)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(counters, attr, flow) })
    }

    /// The counters' context's `read_counters`, else `EOPNOTSUPP`.
    fn ibv_read_counters(counters: *mut ibv_counters, counters_value: *mut u64, ncounters: u32, flags: u32) -> Forward<PositiveErrno> {
        // SAFETY: counters is NULL or a counters object (the API contract).
        let f = ctx_op!(unsafe { context_of(counters, |x| x.context) }?, read_counters)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(counters, counters_value, ncounters, flags) })
    }

    /// The context's `create_wq`, else NULL + `EOPNOTSUPP`; a new WQ gets the caller's
    /// `wq_context`, no completed events and a fresh mutex and condition variable, as the
    /// inline sets them up.
    fn ibv_create_wq(context: *mut ibv_context, wq_init_attr: *mut ibv_wq_init_attr) -> NullOr<ibv_wq> {
        let f = ctx_op!(context, create_wq)?;
        // SAFETY: the context's op, with the caller's arguments.
        let wq = unsafe { f(context, wq_init_attr) };
        // SAFETY: a non-NULL result is the provider's new WQ, not yet shared; wq_init_attr was
        // valid for the op, so it is for this read.
        if let (Some(w), Some(a)) = unsafe { (wq.as_mut(), wq_init_attr.as_ref()) } {
            w.wq_context = a.wq_context;
            w.events_completed = 0;
            // SAFETY: the fields are the WQ's own, initialised here before anyone uses them.
            unsafe {
                libc::pthread_mutex_init(std::ptr::addr_of_mut!(w.mutex).cast(), std::ptr::null());
                libc::pthread_cond_init(std::ptr::addr_of_mut!(w.cond).cast(), std::ptr::null());
            }
        }
        Ok(wq)
    }

    /// The WQ's context's `modify_wq`, else `EOPNOTSUPP`.
    fn ibv_modify_wq(wq: *mut ibv_wq, wq_attr: *mut ibv_wq_attr) -> Forward<PositiveErrno> {
        // SAFETY: wq is NULL or a WQ (the API contract).
        let f = ctx_op!(unsafe { context_of(wq, |x| x.context) }?, modify_wq)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(wq, wq_attr) })
    }

    /// The WQ's context's `destroy_wq`, else `EOPNOTSUPP`.
    fn ibv_destroy_wq(wq: *mut ibv_wq) -> Forward<PositiveErrno> {
        // SAFETY: wq is NULL or a WQ (the API contract).
        let f = ctx_op!(unsafe { context_of(wq, |x| x.context) }?, destroy_wq)?;
        // SAFETY: the context's op, with the caller's WQ.
        Ok(unsafe { f(wq) })
    }

    /// `wq->post_recv(wq, recv_wr, bad_recv_wr)` (`EOPNOTSUPP` if the WQ has none).
    fn ibv_post_wq_recv(wq: *mut ibv_wq, recv_wr: *mut ibv_recv_wr, bad_recv_wr: *mut *mut ibv_recv_wr) -> Forward<PositiveErrno> {
        // SAFETY: wq is NULL or a WQ (the API contract).
        let f = unsafe { arg(wq) }?.post_recv.ok_or(Errno::EOPNOTSUPP)?;
        // SAFETY: the WQ's own function, with the caller's arguments.
        Ok(unsafe { f(wq, recv_wr, bad_recv_wr) })
    }

    /// The context's `create_rwq_ind_table`, else NULL + `EOPNOTSUPP`.
    fn ibv_create_rwq_ind_table(context: *mut ibv_context, init_attr: *mut ibv_rwq_ind_table_init_attr) -> NullOr<ibv_rwq_ind_table> {
        let f = ctx_op!(context, create_rwq_ind_table)?;
        // SAFETY: the context's op, with the caller's arguments.
        Ok(unsafe { f(context, init_attr) })
    }

    /// The table's context's `destroy_rwq_ind_table`, else `EOPNOTSUPP`.
    fn ibv_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table) -> Forward<PositiveErrno> {
        // SAFETY: rwq_ind_table is NULL or an indirection table (the API contract).
        let f = ctx_op!(unsafe { context_of(rwq_ind_table, |x| x.context) }?, destroy_rwq_ind_table)?;
        // SAFETY: the context's op, with the caller's table.
        Ok(unsafe { f(rwq_ind_table) })
    }
}

#[cfg(test)]
#[path = "verbs_inline_tests.rs"]
mod tests;
