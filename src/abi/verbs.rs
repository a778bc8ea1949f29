//! libibverbs entry points (`infiniband/verbs.h`), including the formerly inline data-path calls
//! `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and `ibv_req_notify_cq`,
//! which are also what we put in every context's ops table.

use crate::abi::native_trace;
use crate::abi::{
    arg, out, Infallible, MinusOne, NegativeErrno, Nothing, NullOr, PositiveErrno, ReregCode, Value,
};
use crate::entry;
use crate::errno::{zero_or, Errno, Result};
use crate::provider::RecvWqe;
use crate::runtime::lock;
use crate::sys::*;
use crate::verbs::ah::Ah;
use crate::verbs::cq::{CompChannel, Cq};
use crate::verbs::device::{self, Context};
use crate::verbs::import;
use crate::verbs::mr::Mr;
use crate::verbs::mw::Mw;
use crate::verbs::objects;
use crate::verbs::pd::Pd;
use crate::verbs::qp::Qp;
use crate::verbs::send_wr::{post_send_wr, read_sgl};
use crate::verbs::srq::Srq;
use crate::verbs::ud;
use libc::{c_char, c_int, c_uint, c_void};

/// The ops table of every context we hand out: the inlined calls in prebuilt programs jump here.
pub fn context_ops() -> ibv_context_ops {
    // SAFETY: all-zero (every slot None) is a valid ibv_context_ops.
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops.poll_cq = Some(ibv_poll_cq);
    ops.req_notify_cq = Some(ibv_req_notify_cq);
    ops.post_send = Some(ibv_post_send);
    ops.post_recv = Some(ibv_post_recv);
    ops.post_srq_recv = Some(ibv_post_srq_recv);
    ops.alloc_mw = Some(alloc_mw);
    ops.bind_mw = Some(bind_mw);
    ops.dealloc_mw = Some(dealloc_mw);
    ops
}

// Memory windows (verbs/mw.rs): the inline ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw of
// verbs.h call these through the ops table.
unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, kind: c_uint) -> *mut ibv_mw {
    crate::entry_body!("ibv_alloc_mw"(pd, kind) -> NullOr<ibv_mw> {
        Mw::alloc(objects().pds.get(pd)?, kind)
    })
}

unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    crate::entry_body!("ibv_bind_mw"(qp, mw, mw_bind) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        // SAFETY: mw_bind is NULL or a valid bind request (the API contract).
        let b = unsafe { arg(mw_bind) }?;
        crate::verbs::send_wr::bind_type1(&q, mw, b)
    })
}

unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    crate::entry_body!("ibv_dealloc_mw"(mw) -> PositiveErrno { Mw::dealloc(mw) })
}

/// In passthrough ([`crate::provider::native`]), the op `slot` of the native object's context
/// (`EOPNOTSUPP` if unset), which the formerly inline data-path calls go through as verbs.h's
/// inline bodies do; `None` otherwise (and for an object of ours with `both`). `EINVAL` for a
/// NULL object or context.
fn native_op<T: crate::abi::route::Owned, F>(
    p: *mut T,
    context: impl FnOnce(&T) -> *mut ibv_context,
    slot: impl FnOnce(&ibv_context_ops) -> Option<F>,
) -> Result<Option<F>> {
    if !crate::forwarded!(p) {
        return Ok(None); // ours (with `both`: an object of ours, or NULL)
    }
    // SAFETY: in passthrough p is NULL or the native library's live object (the API contract).
    let ctx = context(unsafe { p.as_ref() }.ok_or(Errno::EINVAL)?);
    // The provider's own op, not the traced trampoline that took its slot (one line per call).
    if let Some(ops) = crate::abi::native_trace::original(ctx) {
        return slot(&ops).ok_or(Errno::EOPNOTSUPP).map(Some);
    }
    crate::abi::verbs_inline::legacy_op(ctx, slot).map(Some)
}

fn ctx(p: *mut ibv_context) -> Result<std::sync::Arc<Context>> {
    objects().contexts.get(p)
}

fn check_port(port: u8) -> Result<()> {
    if port == device::PORT {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

entry! {
    fn ibv_get_device_list(num: *mut c_int) -> NullOr<*mut ibv_device> {
        let (list, n) = device::devices()?;
        // SAFETY: num is NULL or a valid out-pointer.
        if let Some(out) = unsafe { num.as_mut() } {
            *out = n as c_int;
        }
        Ok(list)
    }

    fn ibv_free_device_list(list: *mut *mut ibv_device) -> Nothing {
        device::free_devices(list);
        Ok(())
    }

    fn ibv_get_device_name(dev: *mut ibv_device) -> NullOr<c_char> {
        if !device::is_device(dev) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: dev is our static device.
        Ok(unsafe { (*dev).name.as_mut_ptr() })
    }

    fn ibv_get_device_guid(dev: *mut ibv_device) -> Infallible<u64> {
        if !device::is_device(dev) {
            return Err(Errno::EINVAL);
        }
        Ok(device::NODE_GUID.to_be())
    }

    fn ibv_get_device_index(dev: *mut ibv_device) -> Value<c_int> {
        if !device::is_device(dev) {
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }

    fn ibv_open_device(dev: *mut ibv_device) -> NullOr<ibv_context>, then native_trace::context_made {
        crate::abi::init();
        Context::open(dev)
    }

    fn ibv_close_device(context: *mut ibv_context) -> MinusOne {
        objects().contexts.remove(context).ok_or(Errno::EINVAL).map(|_| ())
    }

    fn ibv_import_device(cmd_fd: c_int) -> NullOr<ibv_context>, then native_trace::context_made {
        crate::abi::init();
        import::import_device(cmd_fd)
    }

    fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> NullOr<ibv_pd> {
        import::import_pd(ctx(context)?, handle)
    }

    fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> NullOr<ibv_mr> {
        import::import_mr(objects().pds.get(pd)?, handle)
    }

    fn ibv_import_dm(context: *mut ibv_context, handle: u32) -> NullOr<ibv_dm> {
        import::import_dm(ctx(context)?, handle, super::verbs_dm::fill_copy_ops)
    }

    fn ibv_unimport_pd(pd: *mut ibv_pd) -> Nothing {
        import::unimport_pd(pd);
        Ok(())
    }

    fn ibv_unimport_mr(mr: *mut ibv_mr) -> Nothing {
        import::unimport_mr(mr);
        Ok(())
    }

    fn ibv_unimport_dm(dm: *mut ibv_dm) -> Nothing {
        import::unimport_dm(dm);
        Ok(())
    }

    fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> PositiveErrno {
        ctx(context)?;
        // SAFETY: attr is NULL or valid for writes.
        device::device_attr(unsafe { out(attr) }?);
        Ok(())
    }

    fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut _compat_ibv_port_attr) -> PositiveErrno {
        ctx(context)?;
        check_port(port)?;
        if attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: all-zero is a valid ibv_port_attr.
        let mut full: ibv_port_attr = unsafe { std::mem::zeroed() };
        device::port_attr(&mut full);
        // The exported symbol fills only the legacy prefix (up to `flags`); the inline
        // ibv_query_port zeroed the rest.
        let n = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
        // SAFETY: attr points at a caller struct of at least the legacy size n.
        unsafe { std::ptr::copy_nonoverlapping((&full as *const ibv_port_attr).cast::<u8>(), attr.cast::<u8>(), n) };
        Ok(())
    }

    fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> MinusOne {
        ctx(context)?;
        check_port(port)?;
        // SAFETY: gid is NULL or valid for writes.
        let g = unsafe { out(gid) }?;
        if index < 0 || index as usize >= device::GID_TABLE_LEN {
            return Err(Errno::EINVAL);
        }
        g.raw = device::gid_lookup(|t| t.get(index as usize)).unwrap_or([0; 16]);
        Ok(())
    }

    fn _ibv_query_gid_ex(context: *mut ibv_context, port: u32, index: u32, entry: *mut ibv_gid_entry, flags: u32, size: usize) -> PositiveErrno {
        ctx(context)?;
        if flags != 0 || port > 255 {
            return Err(Errno::EINVAL);
        }
        check_port(port as u8)?;
        if size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(Errno::EINVAL);
        }
        let g = device::gid_entry(index)?;
        // SAFETY: entry is NULL or valid for writes.
        let e = unsafe { out(entry) }?;
        e.gid.raw = g;
        e.gid_index = index;
        e.port_num = port;
        e.gid_type = IBV_GID_TYPE_ROCE_V2;
        e.ndev_ifindex = device::gid_ifindex(&g);
        Ok(())
    }

    fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, size: usize) -> NegativeErrno {
        ctx(context)?;
        if flags != 0 || size < std::mem::size_of::<ibv_gid_entry>() || (entries.is_null() && max_entries > 0) {
            return Err(Errno::EINVAL);
        }
        let gids = device::gids();
        let table = gids.as_slice();
        if table.len() > max_entries {
            return Err(Errno::EINVAL);
        }
        for (i, g) in table.iter().enumerate() {
            // SAFETY: entries holds max_entries elements of `size` bytes.
            let e = unsafe { &mut *(entries.cast::<u8>().add(i * size) as *mut ibv_gid_entry) };
            e.gid.raw = *g;
            e.gid_index = i as u32;
            e.port_num = device::PORT as u32;
            e.gid_type = IBV_GID_TYPE_ROCE_V2;
            e.ndev_ifindex = device::gid_ifindex(g);
        }
        Ok(table.len() as isize)
    }

    fn ibv_query_gid_type(context: *mut ibv_context, port: u8, index: c_uint, gid_type: *mut c_int) -> MinusOne {
        ctx(context)?;
        check_port(port)?;
        if index as usize >= device::GID_TABLE_LEN {
            return Err(Errno::EINVAL);
        }
        // SAFETY: gid_type is NULL or valid for writes; 1 is IBV_GID_TYPE_SYSFS_ROCE_V2.
        *unsafe { out(gid_type) }? = 1;
        Ok(())
    }

    fn ibv_query_pkey(context: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> MinusOne {
        ctx(context)?;
        check_port(port)?;
        if index != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: pkey is NULL or valid for writes.
        *unsafe { out(pkey) }? = 0xffffu16.to_be();
        Ok(())
    }

    fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> Value<c_int> {
        ctx(context)?;
        check_port(port)?;
        if u16::from_be(pkey) & 0x7fff == 0x7fff {
            Ok(0)
        } else {
            Err(Errno::ENOENT)
        }
    }

    fn ibv_alloc_pd(context: *mut ibv_context) -> NullOr<ibv_pd> {
        Pd::alloc(ctx(context)?)
    }

    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> PositiveErrno {
        Pd::dealloc(pd)
    }

    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> NullOr<ibv_mr> {
        objects().pds.get(pd)?.reg_mr(|d| Mr::register(d, addr, length, addr as u64, access))
    }

    fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> NullOr<ibv_mr> {
        objects().pds.get(pd)?.reg_mr(|d| Mr::register(d, addr, length, iova, access))
    }

    fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> NullOr<ibv_mr> {
        objects().pds.get(pd)?.reg_mr(|d| Mr::register(d, addr, length, iova, access as c_int))
    }

    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> ReregCode {
        Mr::reregister(mr, flags, pd, addr, length, access)
    }

    fn ibv_dereg_mr(mr: *mut ibv_mr) -> PositiveErrno {
        Mr::deregister(mr)
    }

    fn ibv_create_comp_channel(context: *mut ibv_context) -> NullOr<ibv_comp_channel> {
        CompChannel::create(ctx(context)?)
    }

    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> PositiveErrno {
        CompChannel::destroy(channel)
    }

    fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> NullOr<ibv_cq>, then native_trace::cq_made {
        let c = ctx(context)?;
        let ch = if channel.is_null() { None } else { Some(objects().channels.get(channel)?) };
        Cq::create(c, cqe, cq_context, ch, comp_vector)
    }

    fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> PositiveErrno {
        objects().cqs.get(cq)?.resize(cqe)
    }

    fn ibv_destroy_cq(cq: *mut ibv_cq) -> PositiveErrno {
        Cq::destroy(cq)
    }

    fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> MinusOne {
        let ch = objects().channels.get(channel)?;
        if cq.is_null() || cq_context.is_null() {
            return Err(Errno::EINVAL);
        }
        let c = ch.get_event()?;
        // SAFETY: both out-pointers were checked non-NULL and are valid per the man page.
        unsafe {
            *cq = c.raw.as_ptr();
            *cq_context = c.raw.read().cq_context;
        }
        Ok(())
    }

    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) -> Nothing {
        objects().cqs.get(cq)?.ack_events(nevents);
        Ok(())
    }

    fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> Value<c_int> {
        if let Some(f) = native_op(cq, |c| c.context, |o| o.poll_cq)? {
            // SAFETY: the native CQ's own op, with the caller's arguments, as the inline calls it.
            return Ok(unsafe { f(cq, num_entries, wc) });
        }
        let c = objects().cqs.get(cq)?;
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return Err(Errno::EINVAL);
        }
        if num_entries == 0 {
            return Ok(0);
        }
        // SAFETY: wc is valid for num_entries entries per the man page.
        let out = unsafe { std::slice::from_raw_parts_mut(wc, num_entries as usize) };
        Ok(c.poll(out) as c_int)
    }

    fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> PositiveErrno {
        if let Some(f) = native_op(cq, |c| c.context, |o| o.req_notify_cq)? {
            // SAFETY: the native CQ's own op, with the caller's arguments, as the inline calls it.
            return zero_or(unsafe { f(cq, solicited_only) });
        }
        objects().cqs.get(cq)?.req_notify(solicited_only != 0)
    }

    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> NullOr<ibv_qp>, then native_trace::qp_made {
        let pd = objects().pds.get(pd)?;
        // SAFETY: attr is NULL or valid for reads and writes (caps are written back).
        Qp::create(pd, unsafe { out(attr) }?)
    }

    fn ibv_destroy_qp(qp: *mut ibv_qp) -> PositiveErrno {
        Qp::destroy(qp)
    }

    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        // SAFETY: attr is NULL or valid for reads.
        q.modify(unsafe { arg(attr) }?, mask as u32)
    }

    fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int, init_attr: *mut ibv_qp_init_attr) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        let _ = mask;
        // SAFETY: attr and init_attr are NULL or valid for writes.
        let (a, ia) = unsafe { (out(attr)?, out(init_attr)?) };
        *a = q.query();
        let raw = q.public();
        ia.qp_context = raw.qp_context;
        ia.send_cq = raw.send_cq;
        ia.recv_cq = raw.recv_cq;
        ia.srq = raw.srq;
        ia.cap = crate::handle::pod_copy(&q.cap);
        ia.qp_type = q.qp_type;
        ia.sq_sig_all = q.sq_sig_all as c_int;
        Ok(())
    }

    fn ibv_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> PositiveErrno {
        if let Some(f) = native_op(qp, |q| q.context, |o| o.post_send)? {
            // SAFETY: the native QP's own op, with the caller's arguments, as the inline calls it.
            return zero_or(unsafe { f(qp, wr, bad_wr) });
        }
        let q = objects().qps.get(qp)?;
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: cur walks the caller's NULL-terminated list of valid work requests.
            let w = unsafe { &*cur };
            // SAFETY: w's SGEs and inline buffers are valid per the verbs contract.
            let r = unsafe { post_send_wr(&q, w) };
            if let Err(e) = r {
                // SAFETY: bad_wr is NULL or a valid out-pointer.
                if let Some(b) = unsafe { bad_wr.as_mut() } {
                    *b = cur;
                }
                return Err(e);
            }
            cur = w.next;
        }
        Ok(())
    }

    fn ibv_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> PositiveErrno {
        if let Some(f) = native_op(qp, |q| q.context, |o| o.post_recv)? {
            // SAFETY: the native QP's own op, with the caller's arguments, as the inline calls it.
            return zero_or(unsafe { f(qp, wr, bad_wr) });
        }
        let q = objects().qps.get(qp)?;
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: cur walks the caller's NULL-terminated list of valid work requests.
            let w = unsafe { &*cur };
            // SAFETY: the SGE array holds num_sge entries.
            let r = unsafe { read_sgl(w.sg_list, w.num_sge) }
                .and_then(|sges| q.post_recv(RecvWqe { wr_id: w.wr_id, sges }));
            if let Err(e) = r {
                // SAFETY: bad_wr is NULL or a valid out-pointer.
                if let Some(b) = unsafe { bad_wr.as_mut() } {
                    *b = cur;
                }
                return Err(e);
            }
            cur = w.next;
        }
        Ok(())
    }

    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> NullOr<ibv_srq> {
        let pd = objects().pds.get(pd)?;
        // SAFETY: attr is NULL or valid for reads and writes.
        let a = unsafe { out(attr) }?;
        Srq::create(pd, a.srq_context, &mut a.attr)
    }

    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> PositiveErrno {
        let s = objects().srqs.get(srq)?;
        // SAFETY: attr is NULL or valid for reads.
        let a = unsafe { arg(attr) }?;
        if mask as u32 & ibv_srq_attr_mask::IBV_SRQ_MAX_WR.0 != 0 {
            // Resizing is not supported by this provider, as by several real ones.
            return Err(Errno::EINVAL);
        }
        if mask as u32 & ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 != 0 {
            if a.srq_limit > s.max_wr {
                return Err(Errno::EINVAL);
            }
            *lock(&s.limit) = a.srq_limit;
        }
        Ok(())
    }

    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> PositiveErrno {
        let s = objects().srqs.get(srq)?;
        // SAFETY: attr is NULL or valid for writes.
        let a = unsafe { out(attr) }?;
        a.max_wr = s.max_wr;
        a.max_sge = s.max_sge;
        a.srq_limit = *lock(&s.limit);
        Ok(())
    }

    fn ibv_destroy_srq(srq: *mut ibv_srq) -> PositiveErrno {
        Srq::destroy(srq)
    }

    fn ibv_post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> PositiveErrno {
        if let Some(f) = native_op(srq, |s| s.context, |o| o.post_srq_recv)? {
            // SAFETY: the native SRQ's own op, with the caller's arguments, as the inline calls it.
            return zero_or(unsafe { f(srq, wr, bad_wr) });
        }
        let s = objects().srqs.get(srq)?;
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: cur walks the caller's NULL-terminated list of valid work requests.
            let w = unsafe { &*cur };
            // SAFETY: the SGE array holds num_sge entries.
            let r = unsafe { read_sgl(w.sg_list, w.num_sge) }
                .and_then(|sges| s.post(vec![RecvWqe { wr_id: w.wr_id, sges }]).map_err(|(_, e)| e));
            if let Err(e) = r {
                // SAFETY: bad_wr is NULL or a valid out-pointer.
                if let Some(b) = unsafe { bad_wr.as_mut() } {
                    *b = cur;
                }
                return Err(e);
            }
            cur = w.next;
        }
        Ok(())
    }

    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> NullOr<ibv_ah> {
        let pd = objects().pds.get(pd)?;
        // SAFETY: attr is NULL or valid for reads.
        Ah::create(pd, unsafe { arg(attr) }?)
    }

    fn ibv_init_ah_from_wc(context: *mut ibv_context, port: u8, wc: *mut ibv_wc, grh: *mut ibv_grh, ah_attr: *mut ibv_ah_attr) -> MinusOne {
        ctx(context)?;
        check_port(port)?;
        // SAFETY: wc and ah_attr are NULL or valid; grh is NULL or points at the 40-byte GRH
        // at the start of the receive buffer.
        let (wc, out_attr) = unsafe { (arg(wc)?, out(ah_attr)?) };
        // SAFETY: grh is NULL or points at the 40-byte GRH at the start of the receive buffer
        // (the caller's contract, ibv_init_ah_from_wc(3)).
        let g = unsafe { grh.cast::<[u8; ud::GRH_LEN]>().as_ref() };
        ud::ah_attr_from_wc(port, wc, g, out_attr)
    }

    fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port: u8) -> NullOr<ibv_ah> {
        let pd = objects().pds.get(pd)?;
        check_port(port)?;
        // SAFETY: as in ibv_init_ah_from_wc.
        let wc = unsafe { arg(wc) }?;
        // SAFETY: as in ibv_init_ah_from_wc.
        let g = unsafe { grh.cast::<[u8; ud::GRH_LEN]>().as_ref() };
        // SAFETY: all-zero is a valid ibv_ah_attr.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        ud::ah_attr_from_wc(port, wc, g, &mut attr)?;
        Ah::create(pd, &attr)
    }

    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        let _ = lid;
        // SAFETY: gid is NULL or valid for reads; every view of the union is plain bytes.
        q.attach_mcast(unsafe { arg(gid)?.raw })
    }

    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> PositiveErrno {
        let q = objects().qps.get(qp)?;
        let _ = lid;
        // SAFETY: as in ibv_attach_mcast.
        q.detach_mcast(unsafe { arg(gid)?.raw })
    }

    fn ibv_destroy_ah(ah: *mut ibv_ah) -> PositiveErrno {
        objects().ahs.remove(ah).ok_or(Errno::EINVAL).map(|_| ())
    }

    fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> MinusOne {
        use crate::verbs::async_event::Element;
        let c = ctx(context)?;
        // SAFETY: event is NULL or valid for writes.
        let e = unsafe { out(event) }?;
        let (kind, el) = c.events.pop_wait()?;
        crate::verbs::async_event::handed_out(kind, el);
        e.event_type = kind;
        e.element = match el {
            Element::Qp(p) => ibv_async_event_element_t { qp: p as *mut ibv_qp },
            Element::Srq(p) => ibv_async_event_element_t { srq: p as *mut ibv_srq },
            Element::Cq(p) => ibv_async_event_element_t { cq: p as *mut ibv_cq },
            Element::Port(n) => ibv_async_event_element_t { port_num: n as c_int },
        };
        Ok(())
    }

    fn ibv_ack_async_event(event: *mut ibv_async_event) -> Nothing {
        if event.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: event is non-NULL and, per the man page, an event ibv_get_async_event filled.
        crate::verbs::async_event::ack(unsafe { &*event });
        Ok(())
    }

    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: c_uint, flags: u32) -> Infallible<c_int> {
        objects().qps.get(qp)?;
        let _ = (op, flags);
        Ok(0)
    }
}
