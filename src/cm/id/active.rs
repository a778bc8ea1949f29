//! The active side of a CM id and the connection's life after it: connect and its request,
//! establish, disconnect, the messages that move the state machine, and the peer's hangup.

use super::*;

impl CmId {
    // --- active side -------------------------------------------------------------------------

    pub fn connect(&self, p: Option<&rdma_conn_param>) -> Result<()> {
        if self.is_ud() {
            return self.connect_ud(p);
        }
        let (local, remote, ep_data) = {
            let st = lock(&self.st);
            if st.state != State::RouteResolved {
                return Err(Errno::EINVAL);
            }
            (
                st.local.ok_or(Errno::EINVAL)?,
                st.remote.ok_or(Errno::EINVAL)?,
                st.connect_data.clone(),
            )
        };
        let qpn = match (self.own_qpn(), p) {
            (Some(q), _) => q,
            (None, Some(p)) => p.qp_num,
            (None, None) => return Err(Errno::EINVAL),
        };
        let mut m = Msg::new(proto::REQ);
        m.qpn = qpn;
        m.transport = self.own_transport();
        (m.ece_vendor, m.ece_options) = lock(&self.st).local_ece;
        let sq_psn = if is_local(remote.ip()) { 0 } else { random_psn() };
        let mut params = ConnParams {
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            sq_psn,
            rq_psn: 0,
        };
        let mut private = ep_data;
        if let Some(p) = p {
            check_depths(p)?;
            params = ConnParams {
                responder_resources: if p.responder_resources == 0xff {
                    128
                } else {
                    p.responder_resources
                },
                initiator_depth: if p.initiator_depth == 0xff { 128 } else { p.initiator_depth },
                retry_count: p.retry_count.min(7),
                rnr_retry_count: p.rnr_retry_count.min(7),
                sq_psn,
                rq_psn: 0,
            };
            // SAFETY: private_data holds private_data_len bytes per the man page.
            private.extend_from_slice(unsafe { private_slice(p.private_data, p.private_data_len) });
            m.flow_control = p.flow_control;
            m.srq = p.srq;
        }
        // With a QP, rdma_cm reports whether that QP uses an SRQ, whatever the caller said.
        if let Ok(q) = qp::lookup(self.raw.read().qp) {
            m.srq = q.srq.is_some() as u8;
        }
        if private.len() > proto::REQ_PRIVATE {
            return Err(Errno::EINVAL);
        }
        m.private[..private.len()].copy_from_slice(&private);
        m.private_len = private.len() as u32;
        m.responder_resources = params.responder_resources;
        m.initiator_depth = params.initiator_depth;
        m.psn = params.sq_psn;
        m.retry_count = params.retry_count;
        m.rnr_retry_count = params.rnr_retry_count;
        m.src = addr_to_wire(&local);
        m.dst = addr_to_wire(&remote);
        {
            let mut st = lock(&self.st);
            st.params = params;
            st.state = State::Connecting;
        }
        self.send_request(remote, &m, RDMA_CM_EVENT_REJECTED, proto::REJ_NO_LISTENER)?;
        self.complete()
    }

    /// Opens the CM connection to the listener for `remote` and sends the request. With no
    /// listener there, the id gets `no_listener` (REJECTED for RC, UNREACHABLE for UD).
    pub(in crate::cm) fn send_request(
        &self,
        remote: SocketAddr,
        m: &Msg,
        no_listener: u32,
        status: i32,
    ) -> Result<()> {
        if !is_local(remote.ip()) {
            // Another namespace or host: InfiniBand CM MADs over RoCEv2.
            let (local, mtu) = {
                let st = lock(&self.st);
                (st.local.ok_or(Errno::EINVAL)?, st.path_mtu)
            };
            let a = crate::cm::net::Assoc::active(self.ps, local, remote, mtu)?;
            self.arc().adopt_assoc(a);
            return match self.send(m) {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.on_hangup(-e.0);
                    Ok(())
                }
            };
        }
        match carrier::dial(self.ps, remote) {
            Ok(conn) => {
                self.adopt_conn(conn)?;
                match self.send(m) {
                    // The listener closed at once (it refused us): its hang-up reports
                    // UNREACHABLE, like any connection that breaks while connecting.
                    Err(e) if e.0 == libc::EPIPE || e == Errno::ECONNRESET => Ok(()),
                    r => r,
                }
            }
            Err(_) => {
                lock(&self.st).state = State::Rejected;
                self.post_event(no_listener, status, EventParams::default(), None);
                Ok(())
            }
        }
    }

    pub fn establish(&self) -> Result<()> {
        let mut st = lock(&self.st);
        if st.state != State::RespRcvd || !self.raw.read().qp.is_null() {
            return Err(Errno::EINVAL);
        }
        st.state = State::Connected;
        drop(st);
        self.send(&Msg::new(proto::RTU))
    }

    pub fn disconnect(&self) -> Result<()> {
        if self.raw.read().verbs.is_null() {
            return Err(Errno::EINVAL);
        }
        let state = self.state();
        // The QP goes to error first: posted requests flush with IBV_WC_WR_FLUSH_ERR.
        self.qp_to_error();
        match state {
            State::Connected | State::Accepting | State::RespRcvd => {
                lock(&self.st).state = State::Disconnecting;
                if self.send(&Msg::new(proto::DREQ)).is_err() {
                    self.report_disconnect();
                }
                self.complete()
            }
            State::Disconnected => {
                // The peer disconnected first: answer it; the DISCONNECTED event is queued.
                let _ = self.send(&Msg::new(proto::DREP));
                if self.raw.read().event.is_null() || self.is_sync() {
                    self.complete_if_pending()
                } else {
                    Ok(())
                }
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// Sync ids whose DISCONNECTED is already queued pick it up; otherwise nothing to wait for.
    fn complete_if_pending(&self) -> Result<()> {
        if !self.is_sync() {
            return Ok(());
        }
        let pending = lock(&self.st).outstanding > (!self.raw.read().event.is_null()) as u32;
        if pending {
            self.complete()
        } else {
            Ok(())
        }
    }

    pub(in crate::cm) fn report_disconnect(&self) {
        let mut st = lock(&self.st);
        let first = !st.disconnect_reported;
        st.disconnect_reported = true;
        st.state = State::Disconnected;
        if first {
            self.post_event_locked(
                &mut st,
                RDMA_CM_EVENT_DISCONNECTED,
                0,
                EventParams::default(),
                None,
            );
        }
    }

    pub(in crate::cm) fn on_msg(&self, m: Msg) {
        let state = self.state();
        match (m.kind, state) {
            (proto::REP, State::Connecting) => {
                {
                    let mut st = lock(&self.st);
                    st.peer_qpn = m.qpn;
                    st.remote_ece = (m.ece_vendor, m.ece_options);
                    st.params.rq_psn = m.psn & 0x00ff_ffff;
                }
                let reported = EventParams::of_connect(&m, proto::REP_PRIVATE);
                if self.raw.read().qp.is_null() {
                    let mut st = lock(&self.st);
                    st.state = State::RespRcvd;
                    st.params.initiator_depth =
                        st.params.initiator_depth.min(m.responder_resources);
                    st.params.responder_resources =
                        st.params.responder_resources.min(m.initiator_depth);
                    drop(st);
                    self.post_event(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reported, None);
                    return;
                }
                let mut params = lock(&self.st).params;
                params.initiator_depth = params.initiator_depth.min(m.responder_resources);
                params.responder_resources = params.responder_resources.min(m.initiator_depth);
                match self.connect_qp(m.qpn, params) {
                    Ok(()) => {
                        lock(&self.st).state = State::Connected;
                        let _ = self.send(&Msg::new(proto::RTU));
                        self.post_event(RDMA_CM_EVENT_ESTABLISHED, 0, reported, None);
                    }
                    Err(e) => {
                        let mut rej = Msg::new(proto::REJ);
                        rej.status = proto::REJ_CONSUMER;
                        let _ = self.send(&rej);
                        lock(&self.st).state = State::Rejected;
                        self.post_event(
                            RDMA_CM_EVENT_CONNECT_ERROR,
                            -e.0,
                            EventParams::default(),
                            None,
                        );
                    }
                }
            }
            (proto::SIDR_REP, State::Connecting) => self.on_sidr_rep(m),
            (proto::REJ, State::Connecting) => {
                lock(&self.st).state = State::Rejected;
                self.post_event(
                    RDMA_CM_EVENT_REJECTED,
                    m.status,
                    EventParams {
                        private: m.private_data(),
                        private_len: proto::REJ_PRIVATE as u8,
                        ..Default::default()
                    },
                    None,
                );
            }
            (proto::RTU, State::Accepting) => {
                lock(&self.st).state = State::Connected;
                self.post_event(RDMA_CM_EVENT_ESTABLISHED, 0, EventParams::default(), None);
            }
            (proto::DREQ, _) => {
                let _ = self.send(&Msg::new(proto::DREP));
                self.report_disconnect();
            }
            (proto::DREP, State::Disconnecting) => self.report_disconnect(),
            _ => {}
        }
    }

    /// The carrier is gone (unix hang-up, or a MAD retry budget ran out): `status` is the
    /// negative errno the events report.
    pub(in crate::cm) fn on_hangup(&self, status: i32) {
        match self.state() {
            State::Connecting => {
                lock(&self.st).state = State::Rejected;
                self.post_event(RDMA_CM_EVENT_UNREACHABLE, status, EventParams::default(), None);
            }
            State::Accepting => {
                lock(&self.st).state = State::Disconnected;
                self.post_event(RDMA_CM_EVENT_CONNECT_ERROR, status, EventParams::default(), None);
            }
            // UD ids are never connected: the SIDR exchange's connection just ends.
            State::Connected | State::Disconnecting | State::RespRcvd if !self.is_ud() => {
                self.report_disconnect()
            }
            _ => {}
        }
        let conn = lock(&self.st).conn.take();
        if let Some(c) = conn {
            c.close();
        }
    }
}

pub(super) fn check_depths(p: &rdma_conn_param) -> Result<()> {
    let max = 128u8;
    if (p.responder_resources != 0xff && p.responder_resources > max)
        || (p.initiator_depth != 0xff && p.initiator_depth > max)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}
