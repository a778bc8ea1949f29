//! Address and route resolution of an id: a destination in our network namespace resolves at
//! once (the unix carrier reaches it); any other through the kernel's routing
//! ([`super::net::route`]), which also gives the path MTU the path record and the QP use.

use super::id::{
    cm_context, cm_pd, gid_of_addr, is_local, lock, set_dst, set_src, CmId, EventParams, State,
};
use crate::errno::{Errno, Result};
use crate::sys::*;
use crate::verbs::device;
use rdma_cm_event_type::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

impl CmId {
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        // A multicast group is "resolved" on this host: members are found when sending.
        let here = (is_local(dst.ip()) && !dst.ip().is_unspecified()) || dst.ip().is_multicast();
        // Elsewhere: the kernel's routing gives the source address and the interface MTU.
        let route = if here { None } else { Some(super::net::route::resolve(dst.ip())) };
        {
            let mut st = lock(&self.st);
            match st.state {
                State::Idle => {
                    let local_ip = match (src, dst.ip(), &route) {
                        (Some(s), _, _) => s.ip(),
                        (None, _, Some(Ok(r))) => r.src,
                        (None, d, _) if here && !d.is_unspecified() => d,
                        (None, IpAddr::V4(_), _) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        (None, IpAddr::V6(_), _) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    };
                    if let Some(s) = src {
                        if s.is_ipv4() != dst.is_ipv4() {
                            return Err(Errno::EINVAL);
                        }
                    }
                    let port = src.map_or(0, |s| s.port());
                    self.bind_locked(&mut st, SocketAddr::new(local_ip, port))?;
                }
                State::Bound => {}
                _ => return Err(Errno::EINVAL),
            }
            st.remote = Some(dst);
            st.path_mtu = match &route {
                Some(Ok(r)) => r.path_mtu,
                _ => ibv_mtu::IBV_MTU_4096,
            };
            // SAFETY: the live struct, under the state lock.
            unsafe { set_dst(self.raw.as_ptr(), &dst) };
        }
        if let Some(Err(e)) = route {
            // No route (ENETUNREACH, EHOSTUNREACH...): as rdma_cm reports it.
            self.post_event(RDMA_CM_EVENT_ADDR_ERROR, -e.0, EventParams::default(), None);
            return self.complete();
        }
        {
            let mut st = lock(&self.st);
            st.state = State::AddrResolved;
            let local = st.local.expect("bound above");
            let r = self.raw.as_ptr();
            // SAFETY: raw writes of single fields of the live struct (C reads it meanwhile),
            // under the state lock.
            unsafe {
                if local.ip().is_unspecified() && !dst.ip().is_multicast() {
                    let ip = match &route {
                        Some(Ok(r)) => r.src,
                        _ => dst.ip(),
                    };
                    let l = SocketAddr::new(ip, local.port());
                    set_src(r, &l);
                    st.local = Some(l);
                }
                (*r).verbs = cm_context()?;
                (*r).pd = cm_pd()?;
                (*r).port_num = device::PORT;
                (*r).route.addr.addr.ibaddr.sgid.raw = gid_of_addr(&st.local.expect("set"));
                (*r).route.addr.addr.ibaddr.dgid.raw = gid_of_addr(&dst);
                (*r).route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
            }
        }
        self.post_event(RDMA_CM_EVENT_ADDR_RESOLVED, 0, EventParams::default(), None);
        self.complete()
    }

    pub fn resolve_route(&self) -> Result<()> {
        {
            let mut st = lock(&self.st);
            if st.state != State::AddrResolved {
                return Err(Errno::EINVAL);
            }
            // SAFETY: all-zero is a valid path record.
            let mut path: Box<ibv_sa_path_rec> = Box::new(unsafe { std::mem::zeroed() });
            let r = self.raw.as_ptr();
            // SAFETY: a raw read of the live struct; the ibaddr union member is the one we
            // filled at resolution.
            let ib = unsafe { (*r).route.addr.addr.ibaddr };
            path.sgid = ib.sgid;
            path.dgid = ib.dgid;
            path.pkey = ib.pkey;
            path.hop_limit = 64;
            path.reversible = 1;
            path.numb_path = 1;
            path.mtu_selector = 2;
            path.mtu = st.path_mtu as u8;
            path.rate_selector = 2;
            path.rate = 7;
            path.packet_life_time_selector = 2;
            path.packet_life_time = 14;
            // SAFETY: raw writes of single fields of the live struct, under the state lock.
            unsafe {
                (*r).route.path_rec = &mut *path;
                (*r).route.num_paths = 1;
            }
            st.path = Some(path);
            st.state = State::RouteResolved;
        }
        self.post_event(RDMA_CM_EVENT_ROUTE_RESOLVED, 0, EventParams::default(), None);
        self.complete()
    }
}
