//! The QP and SRQ of a CM id: `rdma_create_qp` creates the completion channels and CQs the caller
//! left out (depth = queue depth, `cq_context` = the id, as librdmacm) and brings the QP to where
//! rdma_cm keeps it until connection: INIT for connected QPs, RTS with `RDMA_UDP_QKEY` for UD.
//! Also the attributes the CM moves a QP with (`rdma_init_qp_attr` and its own transitions):
//! the peer's QPN and starting PSN, our starting PSN, the path MTU, the negotiated depths.

use super::id::{gid_of_addr, lock, sgid_index_of, CmId, ConnParams};
use super::proto;
use crate::errno::{Errno, Result};
use crate::runtime::fork::PerProcess;
use crate::sys::*;
use crate::verbs::cq::{CompChannel, Cq};
use crate::verbs::device;
use crate::verbs::objects;
use crate::verbs::qp::{self, Qp};
use crate::verbs::srq::Srq;
use crate::verbs::xrcd::Xrcd;

/// CQs and channels created for an id, destroyed again if a later step fails.
#[derive(Default)]
struct Made {
    cqs: Vec<usize>,
    channels: Vec<usize>,
}

impl Made {
    fn cq_with_channel(
        &mut self,
        id: &CmId,
        depth: u32,
    ) -> Result<(*mut ibv_comp_channel, *mut ibv_cq)> {
        let ctx = objects().contexts.get(id.raw.read().verbs)?;
        let ch = CompChannel::create(ctx.clone())?;
        self.channels.push(ch as usize);
        let cq = Cq::create(
            ctx,
            depth.max(1) as i32,
            id.ptr().cast(),
            Some(objects().channels.get(ch)?),
            0,
        )?;
        self.cqs.push(cq as usize);
        Ok((ch, cq))
    }

    fn undo(&self) {
        for c in &self.cqs {
            let _ = Cq::destroy(*c as *mut ibv_cq);
        }
        for c in &self.channels {
            let _ = CompChannel::destroy(*c as *mut ibv_comp_channel);
        }
    }
}

impl CmId {
    /// `rdma_create_qp`.
    pub fn create_qp(&self, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<()> {
        self.create_qp_in(pd, attr, std::ptr::null_mut())
    }

    /// `rdma_create_qp_ex`: as `rdma_create_qp`; an XRC target goes into `xrcd`, or (NULL) the
    /// XRC domain the CM keeps per device, as librdmacm does.
    pub fn create_qp_in(
        &self,
        pd: *mut ibv_pd,
        attr: &mut ibv_qp_init_attr,
        xrcd: *mut ibv_xrcd,
    ) -> Result<()> {
        use ibv_qp_type::{IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND};
        let raw = self.raw.read();
        if raw.verbs.is_null() || !raw.qp.is_null() {
            return Err(Errno::EINVAL);
        }
        let pd = if pd.is_null() { raw.pd } else { pd };
        let pdo = objects().pds.get(pd)?;
        if pdo.ctx.ptr() != raw.verbs {
            return Err(Errno::EINVAL);
        }
        if (!attr.send_cq.is_null() && !raw.send_cq.is_null() && attr.send_cq != raw.send_cq)
            || (!attr.recv_cq.is_null() && !raw.recv_cq.is_null() && attr.recv_cq != raw.recv_cq)
        {
            return Err(Errno::EINVAL);
        }
        let (xrc_send, xrc_recv) =
            (attr.qp_type == IBV_QPT_XRC_SEND, attr.qp_type == IBV_QPT_XRC_RECV);
        if attr.srq.is_null() && !xrc_send && !xrc_recv {
            attr.srq = raw.srq; // the id's SRQ (rdma_create_srq) feeds its QP
        }
        let owner = if xrc_recv {
            qp::Owner::Xrcd(match xrcd.is_null() {
                true => cm_xrcd(raw.verbs)?,
                false => objects().xrcds.get(xrcd)?,
            })
        } else {
            qp::Owner::Pd(pdo.clone())
        };
        let mut made = Made::default();
        let r = (|| -> Result<_> {
            let mut send = (raw.send_cq_channel, raw.send_cq);
            let mut recv = (raw.recv_cq_channel, raw.recv_cq);
            // An XRC target completes nothing of its own, but its SRQs (rdma_create_srq) use
            // the id's receive CQ; an XRC initiator has no receives.
            if attr.send_cq.is_null() && send.1.is_null() && !xrc_recv {
                send = made.cq_with_channel(self, attr.cap.max_send_wr)?;
            }
            if attr.recv_cq.is_null() && recv.1.is_null() && !xrc_send {
                recv = made.cq_with_channel(self, attr.cap.max_recv_wr)?;
            }
            if attr.send_cq.is_null() {
                attr.send_cq = send.1;
            }
            if attr.recv_cq.is_null() {
                attr.recv_cq = recv.1;
            }
            let qp = Qp::create_in(owner, attr)?;
            if let Err(e) = qp::lookup(qp).and_then(|q| {
                self.watch_qp(&q);
                ready(&q, raw.port_num)
            }) {
                let _ = Qp::destroy(qp);
                return Err(e);
            }
            Ok((qp, send, recv))
        })();
        let (qp, send, recv) = match r {
            Ok(v) => v,
            Err(e) => {
                made.undo();
                return Err(e);
            }
        };
        self.record_owned(&made.cqs, &made.channels);
        // SAFETY: raw reads and writes of single fields of the live id (C reads it meanwhile),
        // under its state lock (set_raw).
        self.set_raw(|r| unsafe {
            (*r).qp = qp;
            (*r).pd = pd;
            (*r).send_cq = attr.send_cq;
            (*r).recv_cq = attr.recv_cq;
            if (*r).send_cq_channel.is_null() && made.cqs.contains(&(send.1 as usize)) {
                (*r).send_cq_channel = send.0;
            }
            if (*r).recv_cq_channel.is_null() && made.cqs.contains(&(recv.1 as usize)) {
                (*r).recv_cq_channel = recv.0;
            }
        });
        Ok(())
    }

    /// `rdma_destroy_qp`: the QP (unless the caller already destroyed it, as rping does) and the
    /// CQs and channels created for the id.
    pub fn destroy_qp(&self) {
        let raw = self.raw.read();
        if !raw.qp.is_null() {
            let _ = Qp::destroy(raw.qp);
        }
        // SAFETY: a raw write of one field of the live id, under its state lock (set_raw).
        self.set_raw(|r| unsafe { (*r).qp = std::ptr::null_mut() });
        self.release_cqs();
    }

    /// Destroys the CQs and channels created for the id. One still in use stays the id's: an
    /// XRC SRQ completes on the id's receive CQ, which then goes with the SRQ. (librdmacm
    /// ignores the `EBUSY` and loses the CQ and its channel.)
    fn release_cqs(&self) {
        let (cqs, chs) = self.take_owned();
        let busy = |e: Result<()>| e == Err(Errno::EBUSY);
        let (kept, gone): (Vec<usize>, Vec<usize>) =
            cqs.into_iter().partition(|c| busy(Cq::destroy(*c as *mut ibv_cq)));
        let kept_chs: Vec<usize> = chs
            .into_iter()
            .filter(|c| busy(CompChannel::destroy(*c as *mut ibv_comp_channel)))
            .collect();
        // SAFETY: raw reads and writes of single fields of the live id (C reads it meanwhile),
        // under its state lock (set_raw).
        self.set_raw(|r| unsafe {
            if gone.contains(&((*r).send_cq as usize)) {
                (*r).send_cq = std::ptr::null_mut();
                (*r).send_cq_channel = std::ptr::null_mut();
            }
            if gone.contains(&((*r).recv_cq as usize)) {
                (*r).recv_cq = std::ptr::null_mut();
                (*r).recv_cq_channel = std::ptr::null_mut();
            }
        });
        self.record_owned(&kept, &kept_chs);
    }

    /// `rdma_create_srq`: a basic SRQ, or for an XRC target's id an XRC one.
    pub fn create_srq(&self, pd: *mut ibv_pd, attr: &mut ibv_srq_init_attr) -> Result<()> {
        use ibv_srq_init_attr_mask as m;
        // SAFETY: all-zero is a valid ibv_srq_init_attr_ex.
        let mut ex: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.srq_context = attr.srq_context;
        ex.attr = crate::handle::pod_copy(&attr.attr);
        ex.comp_mask = m::IBV_SRQ_INIT_ATTR_TYPE.0 | m::IBV_SRQ_INIT_ATTR_PD.0;
        ex.srq_type = if self.raw.read().qp_type == ibv_qp_type::IBV_QPT_XRC_RECV {
            ibv_srq_type::IBV_SRQT_XRC
        } else {
            ibv_srq_type::IBV_SRQT_BASIC
        };
        ex.pd = pd;
        self.create_srq_ex(&mut ex)?;
        attr.attr = ex.attr;
        Ok(())
    }

    /// `rdma_create_srq_ex`: the PD defaults to the id's; an XRC SRQ goes into the CM's XRC
    /// domain and completes on the id's receive CQ (created if missing), as librdmacm does.
    pub fn create_srq_ex(&self, a: &mut ibv_srq_init_attr_ex) -> Result<()> {
        use ibv_srq_init_attr_mask as m;
        let raw = self.raw.read();
        if !raw.srq.is_null() || a.comp_mask & m::IBV_SRQ_INIT_ATTR_TYPE.0 == 0 {
            return Err(Errno::EINVAL);
        }
        if a.comp_mask & m::IBV_SRQ_INIT_ATTR_PD.0 == 0 || a.pd.is_null() {
            a.pd = raw.pd;
            a.comp_mask |= m::IBV_SRQ_INIT_ATTR_PD.0;
        }
        let mut made = Made::default();
        if a.srq_type == ibv_srq_type::IBV_SRQT_XRC {
            if a.comp_mask & m::IBV_SRQ_INIT_ATTR_XRCD.0 == 0 || a.xrcd.is_null() {
                a.xrcd = cm_xrcd(raw.verbs)?.raw.as_ptr();
            }
            if a.comp_mask & m::IBV_SRQ_INIT_ATTR_CQ.0 == 0 || a.cq.is_null() {
                a.cq = match raw.recv_cq.is_null() {
                    false => raw.recv_cq,
                    true => made.cq_with_channel(self, a.attr.max_wr)?.1,
                };
            }
            a.comp_mask |= m::IBV_SRQ_INIT_ATTR_XRCD.0 | m::IBV_SRQ_INIT_ATTR_CQ.0;
        }
        let srq = match Srq::create_ex(a) {
            Ok(s) => s,
            Err(e) => {
                made.undo();
                return Err(e);
            }
        };
        self.record_owned(&made.cqs, &made.channels);
        let (ch, cq) = (made.channels.first().copied(), made.cqs.first().copied());
        // SAFETY: raw writes of single fields of the live id, under its state lock (set_raw).
        self.set_raw(|r| unsafe {
            (*r).srq = srq;
            if let (Some(ch), Some(cq)) = (ch, cq) {
                (*r).recv_cq = cq as *mut ibv_cq;
                (*r).recv_cq_channel = ch as *mut ibv_comp_channel;
            }
        });
        Ok(())
    }

    /// `rdma_destroy_srq`.
    pub fn destroy_srq(&self) {
        let srq = self.raw.read().srq;
        if !srq.is_null() {
            let _ = Srq::destroy(srq);
        }
        // SAFETY: a raw write of one field of the live id, under its state lock (set_raw).
        self.set_raw(|r| unsafe { (*r).srq = std::ptr::null_mut() });
        if self.raw.read().qp.is_null() {
            self.release_cqs(); // those destroy_qp kept for the SRQ
        }
    }
}

impl CmId {
    /// The QP attributes and mask that move a QP of this id to `state` (INIT, RTR or RTS),
    /// as the kernel's rdma_cm computes them: `rdma_init_qp_attr`, and our own transitions.
    pub(super) fn qp_attr_for(
        &self,
        state: u32,
        peer_qpn: u32,
        params: ConnParams,
    ) -> Result<(ibv_qp_attr, u32)> {
        use ibv_qp_attr_mask as M;
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        let ud = self.is_ud();
        let mask = match state {
            ibv_qp_state::IBV_QPS_INIT => {
                a.port_num = device::PORT;
                a.pkey_index = 0;
                if ud {
                    a.qkey = super::ud::UDP_QKEY;
                    M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_QKEY.0
                } else {
                    a.qp_access_flags = crate::verbs::mr::ACCESS_REMOTE_WRITE
                        | crate::verbs::mr::ACCESS_REMOTE_READ
                        | crate::verbs::mr::ACCESS_REMOTE_ATOMIC;
                    M::IBV_QP_STATE.0
                        | M::IBV_QP_PKEY_INDEX.0
                        | M::IBV_QP_PORT.0
                        | M::IBV_QP_ACCESS_FLAGS.0
                }
            }
            ibv_qp_state::IBV_QPS_RTR if ud => M::IBV_QP_STATE.0,
            ibv_qp_state::IBV_QPS_RTR => {
                let remote = lock(&self.st).remote.ok_or(Errno::EINVAL)?;
                if peer_qpn == 0 {
                    return Err(Errno::EINVAL); // no peer yet
                }
                a.path_mtu = lock(&self.st).path_mtu;
                a.dest_qp_num = peer_qpn;
                a.rq_psn = params.rq_psn;
                a.max_dest_rd_atomic = params.responder_resources;
                a.min_rnr_timer = 12;
                a.ah_attr.is_global = 1;
                a.ah_attr.port_num = device::PORT;
                a.ah_attr.grh.dgid.raw = gid_of_addr(&remote);
                a.ah_attr.grh.sgid_index = sgid_index_of(lock(&self.st).local);
                a.ah_attr.grh.hop_limit = 64;
                M::IBV_QP_STATE.0
                    | M::IBV_QP_AV.0
                    | M::IBV_QP_PATH_MTU.0
                    | M::IBV_QP_DEST_QPN.0
                    | M::IBV_QP_RQ_PSN.0
                    | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
                    | M::IBV_QP_MIN_RNR_TIMER.0
            }
            ibv_qp_state::IBV_QPS_RTS if ud => {
                a.sq_psn = 0;
                M::IBV_QP_STATE.0 | M::IBV_QP_SQ_PSN.0
            }
            ibv_qp_state::IBV_QPS_RTS => {
                a.timeout = 14;
                a.retry_cnt = params.retry_count;
                a.rnr_retry = params.rnr_retry_count;
                a.sq_psn = params.sq_psn;
                a.max_rd_atomic = params.initiator_depth;
                M::IBV_QP_STATE.0
                    | M::IBV_QP_TIMEOUT.0
                    | M::IBV_QP_RETRY_CNT.0
                    | M::IBV_QP_RNR_RETRY.0
                    | M::IBV_QP_SQ_PSN.0
                    | M::IBV_QP_MAX_QP_RD_ATOMIC.0
            }
            _ => return Err(Errno::EINVAL),
        };
        Ok((a, mask))
    }

    /// `rdma_init_qp_attr`: for a QP the application creates and moves itself.
    pub fn init_qp_attr(&self, state: u32) -> Result<(ibv_qp_attr, u32)> {
        if self.raw.read().verbs.is_null() {
            return Err(Errno::EINVAL); // not bound to a device yet
        }
        let (peer, params) = {
            let st = lock(&self.st);
            (st.peer_qpn, st.params)
        };
        self.qp_attr_for(state, peer, params)
    }

    /// Brings our QP (if any) through RTR to RTS towards the peer.
    pub(super) fn connect_qp(&self, peer_qpn: u32, params: ConnParams) -> Result<()> {
        let qpp = self.raw.read().qp;
        if qpp.is_null() {
            return Ok(());
        }
        let Ok(q) = qp::lookup(qpp) else { return Ok(()) };
        let (a, m) = self.qp_attr_for(ibv_qp_state::IBV_QPS_RTR, peer_qpn, params)?;
        q.modify(&a, m)?;
        let (a, m) = self.qp_attr_for(ibv_qp_state::IBV_QPS_RTS, peer_qpn, params)?;
        q.modify(&a, m)
    }

    pub(super) fn qp_to_error(&self) {
        let qpp = self.raw.read().qp;
        if let Ok(q) = qp::lookup(qpp) {
            // SAFETY: all-zero is a valid ibv_qp_attr.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = ibv_qp_state::IBV_QPS_ERR;
            let _ = q.modify(&a, ibv_qp_attr_mask::IBV_QP_STATE.0);
        }
    }

    pub(super) fn own_qpn(&self) -> Option<u32> {
        let qpp = self.raw.read().qp;
        qp::lookup(qpp).ok().map(|q| q.qpn)
    }

    /// The IB CM transport service type of the id's own QP (RC if it has none: a QP the
    /// application connects itself, which the REQ cannot describe).
    pub(super) fn own_transport(&self) -> u8 {
        use ibv_qp_type::*;
        let qpp = self.raw.read().qp;
        match qp::lookup(qpp).map(|q| q.qp_type) {
            Ok(IBV_QPT_UC) => proto::TRANSPORT_UC,
            Ok(IBV_QPT_XRC_SEND) => proto::TRANSPORT_XRC,
            _ => proto::TRANSPORT_RC,
        }
    }
}

/// The XRC domain the CM opens for a device context (fd -1: private to this process), once
/// per context and process generation.
fn cm_xrcd(ctx: *mut ibv_context) -> Result<std::sync::Arc<Xrcd>> {
    static XRCDS: PerProcess<std::sync::Mutex<Vec<(usize, usize)>>> =
        PerProcess::new(|| std::sync::Mutex::new(Vec::new()));
    let mut t = lock(XRCDS.get());
    if let Some(x) = t
        .iter()
        .find(|e| e.0 == ctx as usize)
        .and_then(|e| objects().xrcds.get(e.1 as *const ibv_xrcd).ok())
    {
        return Ok(x);
    }
    let c = objects().contexts.get(ctx)?;
    let a = ibv_xrcd_init_attr {
        comp_mask: ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
            | ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    let x = Xrcd::open(c, &a)?;
    t.retain(|e| e.0 != ctx as usize);
    t.push((ctx as usize, x as usize));
    objects().xrcds.get(x)
}

/// INIT for connected QPs; INIT → RTR → RTS with `RDMA_UDP_QKEY` for UD QPs.
fn ready(q: &Qp, port: u8) -> Result<()> {
    use ibv_qp_attr_mask as M;
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_INIT;
    a.port_num = port;
    let base = M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0;
    if q.qp_type == ibv_qp_type::IBV_QPT_UD {
        a.qkey = super::ud::UDP_QKEY;
        q.modify(&a, base | M::IBV_QP_QKEY.0)?;
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        q.modify(&a, M::IBV_QP_STATE.0)?;
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        return q.modify(&a, M::IBV_QP_STATE.0 | M::IBV_QP_SQ_PSN.0);
    }
    use crate::verbs::mr::{ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};
    a.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    q.modify(&a, base | M::IBV_QP_ACCESS_FLAGS.0)
}
