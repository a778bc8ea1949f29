//! UD over the CM: service ID resolution (SIDR) instead of a connection, and multicast joins.
//!
//! The active side's `rdma_connect` sends a SIDR request; the passive side sees
//! CONNECT_REQUEST with `param.ud`, and `rdma_accept` answers at once (no event on its side);
//! the active side gets ESTABLISHED with the peer's address handle, QPN and qkey, or UNREACHABLE.

use super::id::{
    addr_to_wire, gid_of_addr, lock, private_slice, sgid_index_of, CmId, EventParams, State,
};
use super::proto::{self, Msg};
use crate::errno::{Errno, Result};
use crate::sys::*;
use crate::verbs::{device, qp};
use rdma_cm_event_type::*;
use std::net::{IpAddr, SocketAddr};

/// The qkey of rdma_cm's UDP port space (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// The address handle attributes that reach `remote` from this host.
fn ah_to(gid: [u8; 16], sgid_index: u8) -> ibv_ah_attr {
    // SAFETY: all-zero is a valid ibv_ah_attr.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.is_global = 1;
    a.grh.dgid.raw = gid;
    a.grh.sgid_index = sgid_index;
    a.grh.hop_limit = 64;
    a.port_num = device::PORT;
    a
}

/// The multicast GID of a group address (RoCE: the IPv4-mapped or IPv6 address itself).
pub fn mgid_of(addr: &SocketAddr) -> [u8; 16] {
    device::gid_of(addr.ip())
}

impl CmId {
    pub fn is_ud(&self) -> bool {
        self.raw.read().qp_type == ibv_qp_type::IBV_QPT_UD
    }

    pub(super) fn on_sidr_request(&self, conn: super::carrier::Incoming, m: Msg) -> Result<()> {
        let nid = self.new_request_id(&m)?;
        nid.adopt_incoming(conn)?;
        let (remote, local) = {
            let st = lock(&nid.st);
            (st.remote.ok_or(Errno::EINVAL)?, st.local)
        };
        self.post_event(
            RDMA_CM_EVENT_CONNECT_REQUEST,
            0,
            EventParams {
                private: m.private_data(),
                private_len: proto::SIDR_REQ_PRIVATE as u8,
                qp_num: m.qpn,
                ud: Some((ah_to(gid_of_addr(&remote), sgid_index_of(local)), m.qkey)),
                ..Default::default()
            },
            Some(nid),
        );
        Ok(())
    }

    pub(super) fn connect_ud(&self, p: Option<&rdma_conn_param>) -> Result<()> {
        let (local, remote) = {
            let st = lock(&self.st);
            if st.state != State::RouteResolved {
                return Err(Errno::EINVAL);
            }
            (st.local.ok_or(Errno::EINVAL)?, st.remote.ok_or(Errno::EINVAL)?)
        };
        let mut m = Msg::new(proto::SIDR_REQ);
        m.qpn = match (self.own_qpn(), p) {
            (Some(q), _) => q,
            (None, Some(p)) => p.qp_num,
            (None, None) => 0,
        };
        m.qkey = UDP_QKEY;
        if let Some(p) = p {
            // SAFETY: private_data holds private_data_len bytes per the man page.
            let pd = unsafe { private_slice(p.private_data, p.private_data_len) };
            if pd.len() > proto::SIDR_REQ_PRIVATE {
                return Err(Errno::EINVAL);
            }
            m.private[..pd.len()].copy_from_slice(pd);
            m.private_len = pd.len() as u32;
        }
        m.src = addr_to_wire(&local);
        m.dst = addr_to_wire(&remote);
        lock(&self.st).state = State::Connecting;
        self.send_request(remote, &m, RDMA_CM_EVENT_UNREACHABLE, proto::SIDR_UNSUPPORTED)?;
        self.complete()
    }

    pub(super) fn on_sidr_rep(&self, m: Msg) {
        let remote = lock(&self.st).remote;
        self.drop_conn();
        if m.status != 0 {
            lock(&self.st).state = State::Rejected;
            self.post_event(RDMA_CM_EVENT_UNREACHABLE, m.status, EventParams::default(), None);
            return;
        }
        lock(&self.st).state = State::Connected;
        let gid = remote.map_or([0; 16], |r| gid_of_addr(&r));
        let sgid_index = sgid_index_of(lock(&self.st).local);
        self.post_event(
            RDMA_CM_EVENT_ESTABLISHED,
            0,
            EventParams {
                private: m.private_data(),
                private_len: proto::SIDR_REP_PRIVATE as u8,
                qp_num: m.qpn,
                ud: Some((ah_to(gid, sgid_index), m.qkey)),
                ..Default::default()
            },
            None,
        );
    }

    /// UD accept: answers the SIDR request and returns at once, even for sync ids.
    pub(super) fn accept_ud(&self, p: Option<&rdma_conn_param>) -> Result<()> {
        if lock(&self.st).state != State::ReqRcvd {
            return Err(Errno::EINVAL);
        }
        let mut m = Msg::new(proto::SIDR_REP);
        m.qpn = match (self.own_qpn(), p) {
            (Some(q), _) => q,
            (None, Some(p)) => p.qp_num,
            (None, None) => return Err(Errno::EINVAL),
        };
        m.qkey = UDP_QKEY;
        if let Some(p) = p {
            // SAFETY: private_data holds private_data_len bytes per the man page.
            let pd = unsafe { private_slice(p.private_data, p.private_data_len) };
            if pd.len() > proto::SIDR_REP_PRIVATE {
                return Err(Errno::EINVAL);
            }
            m.private[..pd.len()].copy_from_slice(pd);
            m.private_len = pd.len() as u32;
        }
        lock(&self.st).state = State::Connected;
        let r = self.send(&m);
        self.drop_conn();
        r
    }

    pub(super) fn reject_ud(&self, private: &[u8]) -> Result<()> {
        if lock(&self.st).state != State::ReqRcvd {
            return Err(Errno::EINVAL);
        }
        if private.len() > proto::SIDR_REP_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let mut m = Msg::new(proto::SIDR_REP);
        m.status = proto::SIDR_REJECT;
        m.private[..private.len()].copy_from_slice(private);
        m.private_len = private.len() as u32;
        lock(&self.st).state = State::Rejected;
        let r = self.send(&m);
        self.drop_conn();
        r
    }

    /// `rdma_join_multicast_ex`: the join completes at once (one host, no subnet manager); the
    /// QP is attached when the application fetches the MULTICAST_JOIN event, as librdmacm does.
    pub fn join(
        &self,
        addr: SocketAddr,
        send_only: bool,
        context: *mut libc::c_void,
    ) -> Result<()> {
        if !addr.ip().is_multicast() && !matches!(addr.ip(), IpAddr::V6(_)) {
            return Err(Errno::EINVAL);
        }
        {
            let st = lock(&self.st);
            if self.raw.read().verbs.is_null() || matches!(st.state, State::Idle) {
                return Err(Errno::EINVAL);
            }
            if st.joins.iter().any(|(a, _, _)| a.ip() == addr.ip()) {
                return Err(Errno::EADDRINUSE);
            }
        }
        let mgid = mgid_of(&addr);
        lock(&self.st).joins.push((addr, mgid, send_only));
        let mut ah = ah_to(mgid, sgid_index_of(lock(&self.st).local));
        ah.dlid = 0xc000;
        let idp = self.ptr() as usize;
        let attach = move |e: &mut rdma_cm_event| {
            if send_only {
                return;
            }
            let Ok(id) = super::id::lookup(idp as *const rdma_cm_id) else { return };
            let qpp = id.raw.read().qp;
            if let Ok(q) = qp::lookup(qpp) {
                if q.attach_mcast(mgid).is_err() {
                    e.event = RDMA_CM_EVENT_MULTICAST_ERROR;
                    e.status = -libc::EINVAL;
                }
            }
        };
        self.post_event(
            RDMA_CM_EVENT_MULTICAST_JOIN,
            0,
            EventParams {
                qp_num: crate::provider::MCAST_QPN,
                ud: Some((ah, UDP_QKEY)),
                ud_context: Some(context as usize),
                on_fetch: Some(Box::new(attach)),
                ..Default::default()
            },
            None,
        );
        Ok(())
    }

    /// `rdma_leave_multicast`: `EADDRNOTAVAIL` if the group was not joined.
    pub fn leave(&self, addr: SocketAddr) -> Result<()> {
        let (mgid, send_only) = {
            let mut st = lock(&self.st);
            let i = st
                .joins
                .iter()
                .position(|(a, _, _)| a.ip() == addr.ip())
                .ok_or(Errno::EADDRNOTAVAIL)?;
            let (_, mgid, so) = st.joins.remove(i);
            (mgid, so)
        };
        if !send_only {
            if let Ok(q) = qp::lookup(self.raw.read().qp) {
                let _ = q.detach_mcast(mgid);
            }
        }
        Ok(())
    }

    /// Leaves every group (the id is being destroyed).
    pub(super) fn leave_all(&self) {
        let joins = std::mem::take(&mut lock(&self.st).joins);
        for (addr, _, _) in joins {
            lock(&self.st).joins.push((addr, [0; 16], true));
            let _ = self.leave(addr);
        }
    }
}
