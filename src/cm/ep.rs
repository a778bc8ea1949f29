//! The endpoint API (`rdma_create_ep`, `rdma_get_request`, `rdma_destroy_ep`): sync ids that
//! resolve, create their QP and keep connect data in one call, as librdmacm's do.

use super::id::CmId;
use crate::errno::{Errno, Result};
use crate::handle::pod_copy;
use crate::sys::*;
use std::net::SocketAddr;
use std::sync::Arc;

/// What `rdma_create_ep` takes from an `rdma_addrinfo`.
pub struct Endpoint<'a> {
    pub passive: bool,
    pub port_space: u32,
    pub qp_type: u32,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// `ai_connect`: prepended to the private data of `rdma_connect`.
    pub connect_data: &'a [u8],
}

impl CmId {
    /// `rdma_create_ep`: a passive endpoint is bound and keeps `pd`/`qp_attr` for the ids
    /// `rdma_get_request` returns; an active one is resolved (address and route) and gets its QP.
    pub fn create_ep(
        ep: &Endpoint<'_>,
        pd: *mut ibv_pd,
        qp_attr: Option<&mut ibv_qp_init_attr>,
    ) -> Result<Arc<CmId>> {
        let id = CmId::create(None, std::ptr::null_mut(), ep.port_space, ep.qp_type)?;
        let r = (|| -> Result<()> {
            if ep.passive {
                id.bind(ep.src.ok_or(Errno::EINVAL)?)?;
                let saved = qp_attr.map(|a| {
                    let mut a = pod_copy(a);
                    a.qp_type = ep.qp_type; // the QP type comes from the address info
                    a
                });
                id.set_ep(pd, saved.as_ref());
                return Ok(());
            }
            id.resolve_addr(ep.src, ep.dst.ok_or(Errno::EINVAL)?)?;
            id.resolve_route()?;
            if let Some(a) = qp_attr {
                a.qp_type = ep.qp_type;
                id.create_qp(pd, a)?;
            }
            id.set_connect_data(ep.connect_data);
            Ok(())
        })();
        if let Err(e) = r {
            id.destroy_qp();
            let _ = id.destroy();
            return Err(e);
        }
        Ok(id)
    }

    /// `rdma_get_request`: the next connection request of a sync listener, with the QP
    /// `rdma_create_ep` asked for (the request is rejected if it cannot be created).
    pub fn get_request_ep(&self) -> Result<Arc<CmId>> {
        let id = self.get_request()?;
        if let Some((pd, mut attr)) = id.ep_qp() {
            if let Err(e) = id.create_qp(pd, &mut attr) {
                let _ = id.reject(&[], super::proto::REJ_CONSUMER);
                let _ = id.destroy();
                return Err(e);
            }
        }
        Ok(id)
    }

    /// `rdma_destroy_ep`: the QP, the SRQ, then the id.
    pub fn destroy_ep(self: &Arc<Self>) -> Result<()> {
        self.destroy_qp();
        self.destroy_srq();
        self.destroy()
    }
}
