//! librdmacm entry points (`rdma/rdma_cma.h`).

use crate::abi::{arg, out, Infallible, MinusOne, Nothing, NullOr, Value};
use crate::cm::addrinfo::{self, GaiError};
use crate::cm::channel::{self, EventChannel, CHANNELS};
use crate::cm::ep::Endpoint;
use crate::cm::id::{self, cm_context, read_sockaddr, CmId};
use crate::entry;
use crate::errno::{Errno, Result};
use crate::sys::*;
use libc::{c_char, c_int, c_void, sockaddr};
use std::ffi::CStr;
use std::sync::Arc;

fn live(p: *mut rdma_cm_id) -> Result<Arc<CmId>> {
    id::lookup(p)
}

/// The default QP type of a port space (rdma_create_id(3)).
fn qp_type_of(ps: u32) -> Result<u32> {
    use rdma_port_space::*;
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => Ok(ibv_qp_type::IBV_QPT_RC),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Ok(ibv_qp_type::IBV_QPT_UD),
        _ => Err(Errno::EINVAL),
    }
}

entry! {
    fn rdma_create_event_channel() -> NullOr<rdma_event_channel> {
        EventChannel::create()
    }

    fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) -> Nothing {
        CHANNELS.remove(ch).ok_or(Errno::EINVAL).map(|_| ())
    }

    fn rdma_create_id(ch: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: u32) -> MinusOne {
        crate::abi::init();
        // SAFETY: id is NULL or a valid out-pointer.
        let out_id = unsafe { out(id) }?;
        let channel = if ch.is_null() { None } else { Some(id::channel(ch)?) };
        let new = CmId::create(channel, context, ps, qp_type_of(ps)?)?;
        *out_id = new.ptr();
        Ok(())
    }

    fn rdma_destroy_id(id: *mut rdma_cm_id) -> MinusOne {
        live(id)?.destroy()
    }

    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> MinusOne {
        let i = live(id)?;
        // SAFETY: addr is NULL or a socket address of its family's size.
        i.bind(unsafe { read_sockaddr(addr) }?)
    }

    fn rdma_resolve_addr(id: *mut rdma_cm_id, src: *mut sockaddr, dst: *mut sockaddr, timeout_ms: c_int) -> MinusOne {
        let i = live(id)?;
        let _ = timeout_ms;
        // SAFETY: src and dst are NULL or socket addresses of their family's size.
        let dst = unsafe { read_sockaddr(dst) }?;
        let src = if src.is_null() {
            None
        } else {
            // SAFETY: src is non-NULL here, a socket address of its family's size (caller's
            // contract, rdma_resolve_addr(3)).
            Some(unsafe { read_sockaddr(src) }?)
        };
        i.resolve_addr(src, dst)
    }

    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> MinusOne {
        let _ = timeout_ms;
        live(id)?.resolve_route()
    }

    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> MinusOne {
        live(id)?.listen(backlog)
    }

    fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> MinusOne {
        let i = live(id)?;
        // SAFETY: param is NULL or valid for reads.
        i.connect(unsafe { param.as_ref() })
    }

    fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> MinusOne {
        let i = live(id)?;
        // SAFETY: param is NULL or valid for reads.
        i.accept(unsafe { param.as_ref() })
    }

    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> MinusOne {
        let i = live(id)?;
        let pd: &[u8] = if private_data.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: private_data holds len bytes per the man page.
            unsafe { std::slice::from_raw_parts(private_data.cast(), len as usize) }
        };
        i.reject(pd, crate::cm::proto::REJ_CONSUMER)
    }

    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> MinusOne {
        let i = live(id)?;
        let pd: &[u8] = if private_data.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: private_data holds len bytes per the man page.
            unsafe { std::slice::from_raw_parts(private_data.cast(), len as usize) }
        };
        // IB CM reject reason 35: vendor option not supported (the ECE reject).
        i.reject(pd, 35)
    }

    fn rdma_establish(id: *mut rdma_cm_id) -> MinusOne {
        live(id)?.establish()
    }

    fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> MinusOne {
        let _ = event;
        // Connection establishment is driven by the CM itself here: nothing to pass on, but an
        // id without a device is refused, as the kernel does.
        if live(id)?.raw.read().verbs.is_null() {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    fn rdma_disconnect(id: *mut rdma_cm_id) -> MinusOne {
        live(id)?.disconnect()
    }

    fn rdma_get_cm_event(ch: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> MinusOne {
        let c = id::channel(ch)?;
        // SAFETY: event is NULL or a valid out-pointer.
        let o = unsafe { out(event) }?;
        *o = c.get()?;
        Ok(())
    }

    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> MinusOne {
        channel::ack(event)
    }

    fn rdma_get_src_port(id: *mut rdma_cm_id) -> Infallible<u16> {
        Ok(live(id)?.src_port().to_be())
    }

    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> Infallible<u16> {
        Ok(live(id)?.dst_port().to_be())
    }

    fn rdma_get_devices(num: *mut c_int) -> NullOr<*mut ibv_context> {
        crate::abi::init();
        let ctx = match crate::verbs::device::device_list() {
            Some(_) => Some(cm_context()?),
            None => None, // RDMASHIM_PROVIDER selects no provider: an empty list
        };
        let list = crate::verbs::ptr_list::alloc(ctx)?;
        // SAFETY: num is NULL or a valid out-pointer.
        if let Some(n) = unsafe { num.as_mut() } {
            *n = ctx.is_some() as c_int;
        }
        Ok(list)
    }

    fn rdma_free_devices(list: *mut *mut ibv_context) -> Nothing {
        let _ = crate::verbs::ptr_list::free(list);
        Ok(())
    }

    fn rdma_event_str(event: c_int) -> Infallible<*const c_char> {
        const NAMES: [&CStr; 16] = [
            c"RDMA_CM_EVENT_ADDR_RESOLVED",
            c"RDMA_CM_EVENT_ADDR_ERROR",
            c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            c"RDMA_CM_EVENT_ROUTE_ERROR",
            c"RDMA_CM_EVENT_CONNECT_REQUEST",
            c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            c"RDMA_CM_EVENT_CONNECT_ERROR",
            c"RDMA_CM_EVENT_UNREACHABLE",
            c"RDMA_CM_EVENT_REJECTED",
            c"RDMA_CM_EVENT_ESTABLISHED",
            c"RDMA_CM_EVENT_DISCONNECTED",
            c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            c"RDMA_CM_EVENT_MULTICAST_JOIN",
            c"RDMA_CM_EVENT_MULTICAST_ERROR",
            c"RDMA_CM_EVENT_ADDR_CHANGE",
            c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        ];
        Ok(usize::try_from(event).ok().and_then(|i| NAMES.get(i)).map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr()))
    }

    fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> MinusOne {
        let i = live(id)?;
        if optval.is_null() {
            return Err(Errno::EINVAL);
        }
        // Levels and options of rdma_cma.h: RDMA_OPTION_ID (0): TOS 0 (u8), REUSEADDR 1 (int),
        // AFONLY 2 (int), ACK_TIMEOUT 3 (u8); RDMA_OPTION_IB (1): IB_PATH 1.
        match (level, optname) {
            (0, 0) | (0, 3) if optlen == 1 => Ok(()),
            (0, 1) if optlen == std::mem::size_of::<c_int>() => {
                // SAFETY: optval holds an int (optlen checked).
                i.set_reuseaddr(unsafe { *(optval as *const c_int) } != 0);
                Ok(())
            }
            (0, 2) if optlen == std::mem::size_of::<c_int>() => {
                // SAFETY: optval holds an int (optlen checked).
                i.set_afonly(unsafe { *(optval as *const c_int) } != 0);
                Ok(())
            }
            (1, 1) => Ok(()),
            (0, 0..=3) => Err(Errno::EINVAL),
            _ => Err(Errno::ENOSYS),
        }
    }

    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> MinusOne, then crate::abi::native_trace::id_qp_made {
        let i = live(id)?;
        // SAFETY: attr is NULL or valid for reads and writes.
        i.create_qp(pd, unsafe { out(attr) }?)
    }

    fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> MinusOne {
        let i = live(id)?;
        // SAFETY: attr is NULL or valid for reads and writes.
        let a = unsafe { out(attr) }?;
        // Only the basic attributes (PD, optionally no create flags) map onto this provider.
        let pd_bit = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        let xrcd_bit = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0;
        let flags_bit = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_CREATE_FLAGS.0;
        let ops_bit = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
        let block_self = ibv_qp_create_flags::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.0;
        let flags = if a.comp_mask & flags_bit != 0 { a.create_flags } else { 0 };
        let ops = if a.comp_mask & ops_bit != 0 { a.send_ops_flags } else { 0 };
        if a.comp_mask & !(pd_bit | xrcd_bit | flags_bit | ops_bit) != 0
            || flags & !block_self != 0
            || ops & !crate::verbs::qp_ex::SUPPORTED_SEND_OPS != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut basic = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: crate::handle::pod_copy(&a.cap),
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let pd = if a.comp_mask & pd_bit != 0 { a.pd } else { std::ptr::null_mut() };
        let xrcd = if a.comp_mask & xrcd_bit != 0 { a.xrcd } else { std::ptr::null_mut() };
        i.create_qp_in(pd, &mut basic, xrcd)?;
        if flags & block_self != 0 {
            if let Ok(q) = crate::verbs::qp::lookup(i.raw.read().qp) {
                q.set_block_self_mcast(true);
            }
        }
        a.cap = basic.cap;
        a.send_cq = basic.send_cq;
        a.recv_cq = basic.recv_cq;
        Ok(())
    }

    fn rdma_destroy_qp(id: *mut rdma_cm_id) -> Nothing {
        live(id)?.destroy_qp();
        Ok(())
    }

    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> MinusOne {
        let i = live(id)?;
        // SAFETY: attr is NULL or valid for reads and writes.
        i.create_srq(pd, unsafe { out(attr) }?)
    }

    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> MinusOne {
        let i = live(id)?;
        // SAFETY: attr is NULL or valid for reads and writes.
        i.create_srq_ex(unsafe { out(attr) }?)
    }

    fn rdma_destroy_srq(id: *mut rdma_cm_id) -> Nothing {
        live(id)?.destroy_srq();
        Ok(())
    }

    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> Value<c_int> {
        // SAFETY: res is NULL or a valid out-pointer.
        let o = unsafe { out(res) }?;
        // SAFETY: node and service are NULL or NUL-terminated strings; hints is NULL or valid.
        let (node, service, hints) = unsafe {
            (
                (!node.is_null()).then(|| CStr::from_ptr(node)),
                (!service.is_null()).then(|| CStr::from_ptr(service)),
                hints.as_ref(),
            )
        };
        // SAFETY: hints' address fields are NULL or valid for their lengths (the man page).
        match unsafe { addrinfo::getaddrinfo(node, service, hints) } {
            Ok(p) => {
                *o = p;
                Ok(0)
            }
            // EAI codes are returned as they are, errno untouched (rdma-core's behaviour).
            Err(GaiError::Eai(code)) => Ok(code),
            Err(GaiError::Errno(e)) => Err(e),
        }
    }

    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) -> Nothing {
        // SAFETY: res came from rdma_getaddrinfo or is NULL.
        unsafe { addrinfo::freeaddrinfo(res) };
        Ok(())
    }

    fn rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> MinusOne, then crate::abi::native_trace::ep_made {
        crate::abi::init();
        // SAFETY: id is NULL or a valid out-pointer; res is NULL or valid.
        let (out_id, ai) = unsafe { (out(id)?, arg(res)?) };
        let addr = |p: *mut sockaddr| -> Result<Option<std::net::SocketAddr>> {
            // SAFETY: rdma_addrinfo's address fields are NULL or valid socket addresses.
            if p.is_null() { Ok(None) } else { unsafe { read_sockaddr(p) }.map(Some) }
        };
        let connect_data: &[u8] = if ai.ai_connect.is_null() {
            &[]
        } else {
            // SAFETY: ai_connect holds ai_connect_len bytes.
            unsafe { std::slice::from_raw_parts(ai.ai_connect.cast(), ai.ai_connect_len) }
        };
        let ep = Endpoint {
            passive: ai.ai_flags & addrinfo::RAI_PASSIVE != 0,
            port_space: ai.ai_port_space as u32,
            qp_type: ai.ai_qp_type as u32,
            src: addr(ai.ai_src_addr)?,
            dst: addr(ai.ai_dst_addr)?,
            connect_data,
        };
        // SAFETY: qp_init_attr is NULL or valid for reads and writes.
        *out_id = CmId::create_ep(&ep, pd, unsafe { qp_init_attr.as_mut() })?.ptr();
        Ok(())
    }

    fn rdma_destroy_ep(id: *mut rdma_cm_id) -> Nothing {
        live(id)?.destroy_ep()
    }

    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> MinusOne, then crate::abi::native_trace::request_taken {
        let l = live(listen)?;
        // SAFETY: id is NULL or a valid out-pointer.
        let o = unsafe { out(id) }?;
        *o = l.get_request_ep()?.ptr();
        Ok(())
    }

    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> MinusOne {
        let i = live(id)?;
        // SAFETY: addr is NULL or a socket address of its family's size.
        i.join(unsafe { read_sockaddr(addr) }?, false, context)
    }

    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> MinusOne {
        let i = live(id)?;
        // SAFETY: attr is NULL or valid for reads.
        let a = unsafe { arg(attr) }?;
        const ADDRESS: u32 = 1;
        const JOIN_FLAGS: u32 = 2;
        const RESERVED: u32 = 4;
        if a.comp_mask >= RESERVED {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & ADDRESS == 0 || a.comp_mask & JOIN_FLAGS == 0 || a.join_flags >= 2 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: addr is NULL or a socket address of its family's size.
        let addr = unsafe { read_sockaddr(a.addr) }?;
        // join_flags: 0 = full member, 1 = send-only full member (not attached).
        i.join(addr, a.join_flags == 1, context)
    }

    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> MinusOne {
        let i = live(id)?;
        // SAFETY: addr is NULL or a socket address of its family's size.
        i.leave(unsafe { read_sockaddr(addr) }?)
    }

    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> MinusOne {
        let i = live(id)?;
        let to = if channel.is_null() { None } else { Some(id::channel(channel)?) };
        i.migrate(to)
    }

    fn rdma_init_qp_attr(id: *mut rdma_cm_id, attr: *mut ibv_qp_attr, mask: *mut c_int) -> MinusOne {
        let i = live(id)?;
        // SAFETY: attr and mask are NULL or valid for reads and writes.
        let (a, m) = unsafe { (out(attr)?, out(mask)?) };
        let (computed, computed_mask) = i.init_qp_attr(a.qp_state)?;
        *a = computed;
        *m = computed_mask as c_int;
        Ok(())
    }

    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> MinusOne {
        let i = live(id)?;
        if !i.raw.read().qp.is_null() {
            return Err(Errno::EINVAL); // ECE is for QPs the application connects itself
        }
        // SAFETY: ece is NULL or valid for writes.
        let e = unsafe { out(ece) }?;
        (e.vendor_id, e.options) = i.remote_ece();
        e.comp_mask = 0;
        Ok(())
    }

    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> MinusOne {
        let i = live(id)?;
        // SAFETY: ece is NULL or valid for reads.
        let e = unsafe { arg(ece) }?;
        if !i.raw.read().qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(Errno::EINVAL);
        }
        i.set_local_ece(e.vendor_id, e.options);
        Ok(())
    }
}
