//! The passive side of a CM id: binding, listening, the requests that arrive, accept and
//! reject, and the sync listener's `rdma_get_request`.

use super::active::check_depths;
use super::*;

impl CmId {
    // --- binding and resolution --------------------------------------------------------------

    /// Binds to a local address; port 0 picks an ephemeral port.
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut st = lock(&self.st);
        if st.state != State::Idle {
            return Err(Errno::EINVAL);
        }
        self.bind_locked(&mut st, addr)
    }

    pub(in crate::cm) fn bind_locked(&self, st: &mut IdState, addr: SocketAddr) -> Result<()> {
        if !is_local(addr.ip()) {
            return Err(Errno::EADDRNOTAVAIL);
        }
        let v6only = st.afonly && addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        let name = |port| rendezvous_for(self.ps, addr.ip(), port, v6only);
        let (fd, port) = if addr.port() == 0 {
            let mut found = None;
            for _ in 0..64 {
                let port = random_port();
                match unix::bind(&name(port)) {
                    Ok(fd) => {
                        found = Some((Some(fd), port));
                        break;
                    }
                    Err(e) if e == Errno::EADDRINUSE => continue,
                    Err(e) => return Err(e),
                }
            }
            found.ok_or(Errno::EADDRINUSE)?
        } else {
            match unix::bind(&name(addr.port())) {
                Ok(fd) => (Some(fd), addr.port()),
                // REUSEADDR: the address is shared; the name is taken again at listen time.
                Err(e) if e == Errno::EADDRINUSE && st.reuseaddr => (None, addr.port()),
                Err(e) => return Err(e),
            }
        };
        let local = SocketAddr::new(addr.ip(), port);
        st.bound = fd.map(Arc::new);
        st.local = Some(local);
        st.state = State::Bound;
        let r = self.raw.as_ptr();
        // SAFETY: raw writes of single fields of the live struct (C reads it meanwhile), under
        // the state lock (held by the caller).
        unsafe {
            set_src(r, &local);
            if !addr.ip().is_unspecified() {
                // A specific address binds the id to the device, as the kernel does.
                (*r).verbs = cm_context()?;
                (*r).pd = cm_pd()?;
                (*r).port_num = device::PORT;
                (*r).route.addr.addr.ibaddr.sgid.raw = gid_of_addr(&local);
                (*r).route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
            }
        }
        Ok(())
    }

    // --- passive side ------------------------------------------------------------------------

    pub fn listen(&self, backlog: i32) -> Result<()> {
        let mut st = lock(&self.st);
        match st.state {
            State::Idle => {
                let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0);
                self.bind_locked(&mut st, any)?;
            }
            State::Bound => {}
            State::Listen => return Ok(()),
            _ => return Err(Errno::EINVAL),
        }
        if st.bound.is_none() {
            // Bound with REUSEADDR to an address in use: listening needs the name itself.
            let local = st.local.ok_or(Errno::EINVAL)?;
            let v6only = st.afonly && local.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED);
            st.bound = Some(Arc::new(unix::bind(&rendezvous_for(
                self.ps,
                local.ip(),
                local.port(),
                v6only,
            ))?));
        }
        let fd = st.bound.as_ref().ok_or(Errno::EINVAL)?;
        unix::listen_bound(fd, backlog.max(16))?;
        let fd = fd.clone();
        let me = self.me.clone();
        st.acceptor = Some(Acceptor::start(
            fd,
            Box::new(move |conn, first, _fds| {
                if let Some(l) = me.upgrade() {
                    l.on_first_message(conn, first);
                }
            }),
        )?);
        st.state = State::Listen;
        let local = st.local.ok_or(Errno::EINVAL)?;
        let v6only = st.afonly && local.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        let name = rendezvous_for(self.ps, local.ip(), local.port(), v6only);
        st.listen_name = Some(name.clone());
        drop(st);
        crate::cm::net::listener_added(&name, self.me.clone());
        Ok(())
    }

    /// The first message on a connection to our listener: a request, or garbage (dropped).
    fn on_first_message(&self, conn: OwnedFd, first: &[u8]) {
        if crate::cm::net::relay::is_relayed(first) {
            crate::cm::net::on_relayed(self, first);
            return;
        }
        let Some(m) = proto::decode(first) else { return };
        match m.kind {
            proto::REQ => {
                let _ = self.on_request(Incoming::Unix(conn), m);
            }
            proto::SIDR_REQ => {
                let _ = self.on_sidr_request(Incoming::Unix(conn), m);
            }
            _ => {}
        }
    }

    /// The new id of an incoming request: bound to the device, with the listener's context,
    /// channel (a private one for sync listeners), port space and saved endpoint attributes.
    pub(in crate::cm) fn new_request_id(&self, m: &Msg) -> Result<Arc<CmId>> {
        // A sync listener's new ids get their own private channel (they are sync too).
        let channel = if self.is_sync() { None } else { Some(self.channel()) };
        let raw = self.raw.read();
        let nid = CmId::create(channel, raw.context, self.ps, raw.qp_type)?;
        let local = addr_from_wire(&m.dst);
        let remote = addr_from_wire(&m.src);
        let mut st = lock(&nid.st);
        st.state = State::ReqRcvd;
        st.local = Some(local);
        st.remote = Some(remote);
        st.peer_qpn = m.qpn;
        st.remote_ece = (m.ece_vendor, m.ece_options);
        if (1..=5).contains(&m.path_mtu) {
            st.path_mtu = u32::from(m.path_mtu);
        }
        let r = nid.raw.as_ptr();
        // SAFETY: raw writes of single fields of the live struct, under the new id's state lock
        // (not yet visible to the application).
        unsafe {
            (*r).verbs = cm_context()?;
            (*r).pd = cm_pd()?;
            (*r).port_num = device::PORT;
            set_src(r, &local);
            set_dst(r, &remote);
            (*r).route.addr.addr.ibaddr.sgid.raw = gid_of_addr(&local);
            (*r).route.addr.addr.ibaddr.dgid.raw = gid_of_addr(&remote);
            (*r).route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        }
        let ep = lock(&self.st);
        st.ep_qp_attr = ep.ep_qp_attr.as_ref().map(|a| CData(pod_copy(&a.0)));
        st.ep_pd = ep.ep_pd;
        drop(ep);
        drop(st);
        Ok(nid)
    }

    pub(in crate::cm) fn on_request(&self, conn: Incoming, m: Msg) -> Result<()> {
        let nid = self.new_request_id(&m)?;
        {
            let mut st = lock(&nid.st);
            st.peer_qpn = m.qpn;
            st.params = ConnParams {
                // The peer's initiator depth is our responder resources and vice versa.
                responder_resources: m.initiator_depth,
                initiator_depth: m.responder_resources,
                retry_count: m.retry_count,
                rnr_retry_count: m.rnr_retry_count,
                sq_psn: if matches!(conn, Incoming::Mad(_)) { random_psn() } else { 0 },
                rq_psn: m.psn & 0x00ff_ffff,
            };
        }
        nid.adopt_incoming(conn)?;
        self.post_event(
            RDMA_CM_EVENT_CONNECT_REQUEST,
            0,
            EventParams::of_connect(&m, proto::REQ_PRIVATE),
            Some(nid),
        );
        Ok(())
    }

    pub fn accept(&self, p: Option<&rdma_conn_param>) -> Result<()> {
        if self.is_ud() {
            return self.accept_ud(p);
        }
        let (peer_qpn, mut params) = {
            let st = lock(&self.st);
            if st.state != State::ReqRcvd {
                return Err(Errno::EINVAL);
            }
            (st.peer_qpn, st.params)
        };
        let qpn = match (self.own_qpn(), p) {
            (Some(q), _) => q,
            (None, Some(p)) => p.qp_num,
            (None, None) => return Err(Errno::EINVAL),
        };
        let mut m = Msg::new(proto::REP);
        m.qpn = qpn;
        (m.ece_vendor, m.ece_options) = lock(&self.st).local_ece;
        if let Some(p) = p {
            if p.private_data_len as usize > proto::REP_PRIVATE {
                return Err(Errno::EINVAL);
            }
            check_depths(p)?;
            if p.responder_resources != 0xff {
                params.responder_resources = params.responder_resources.min(p.responder_resources);
            }
            if p.initiator_depth != 0xff {
                params.initiator_depth = params.initiator_depth.min(p.initiator_depth);
            }
            // SAFETY: private_data holds private_data_len bytes per the man page.
            let pd = unsafe { private_slice(p.private_data, p.private_data_len) };
            m.private[..pd.len()].copy_from_slice(pd);
            m.private_len = pd.len() as u32;
            m.rnr_retry_count = p.rnr_retry_count;
            m.flow_control = p.flow_control;
        }
        m.responder_resources = params.responder_resources;
        m.initiator_depth = params.initiator_depth;
        m.psn = params.sq_psn;
        if let Err(e) = self.connect_qp(peer_qpn, params) {
            self.qp_to_error();
            return Err(e);
        }
        {
            let mut st = lock(&self.st);
            st.params = params;
            st.state = State::Accepting;
        }
        self.send(&m)?;
        self.complete()
    }

    pub fn reject(&self, private: &[u8], reason: i32) -> Result<()> {
        if self.is_ud() {
            return self.reject_ud(private);
        }
        {
            let mut st = lock(&self.st);
            if st.state != State::ReqRcvd {
                return Err(Errno::EINVAL);
            }
            st.state = State::Rejected;
        }
        if private.len() > proto::REJ_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let mut m = Msg::new(proto::REJ);
        m.status = reason;
        m.private[..private.len()].copy_from_slice(private);
        m.private_len = private.len() as u32;
        self.send(&m)
    }

    /// Sync listeners: waits for the next CONNECT_REQUEST and returns its new id.
    pub fn get_request(&self) -> Result<Arc<CmId>> {
        if !self.is_sync() || self.state() != State::Listen {
            return Err(Errno::EINVAL);
        }
        self.ack_held_event();
        let p = self.channel().get()?;
        // SAFETY: p is a live event we just handed out.
        let e = unsafe { &*p };
        if e.status != 0 {
            let _ = crate::cm::channel::ack(p);
            return Err(Errno(e.status.abs()));
        }
        if e.event != RDMA_CM_EVENT_CONNECT_REQUEST {
            let _ = crate::cm::channel::ack(p);
            return Err(Errno::EINVAL);
        }
        let nid = lookup(e.id)?;
        nid.set_event(p);
        Ok(nid)
    }
}
