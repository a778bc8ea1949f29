//! CM ids and the connection state machine.

use super::carrier::{self, rendezvous_for, Carrier, Incoming};
use super::channel::{Event, EventChannel, CHANNELS, EVENT_PRIVATE};
use super::proto::{self, Msg};
use crate::errno::{Errno, Result};
use crate::handle::{pod_copy, CBox, CData, Registry};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::unix;
use crate::sys::*;
use crate::verbs::{device, objects, qp};
use once_cell::sync::Lazy;
use rdma_cm_event_type::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

pub static IDS: Lazy<Registry<CmId>> = Lazy::new(Registry::default);

pub fn lookup(p: *const rdma_cm_id) -> Result<Arc<CmId>> {
    IDS.get(p)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// Passive: a request arrived on this (new) id.
    ReqRcvd,
    /// Active: REQ sent.
    Connecting,
    /// Active without a QP: REP arrived, waiting for `rdma_establish`.
    RespRcvd,
    /// Passive: REP sent, waiting for RTU.
    Accepting,
    Connected,
    /// We sent DREQ and wait for the peer.
    Disconnecting,
    Disconnected,
    Rejected,
}

/// Connection parameters kept for the QP transitions.
#[derive(Clone, Copy, Default)]
pub(super) struct ConnParams {
    pub(super) responder_resources: u8,
    pub(super) initiator_depth: u8,
    pub(super) retry_count: u8,
    pub(super) rnr_retry_count: u8,
    /// Starting PSNs: ours (sent in the REQ or REP) and the peer's. Random across namespaces,
    /// as the kernel's rdma_cm; 0 in one namespace (the unix carrier).
    pub(super) sq_psn: u32,
    pub(super) rq_psn: u32,
}

/// A random starting PSN (24 bits).
fn random_psn() -> u32 {
    let mut r: u32 = 0;
    // SAFETY: getrandom into a valid 4-byte buffer.
    unsafe { libc::getrandom((&mut r as *mut u32).cast(), 4, 0) };
    r & 0x00ff_ffff
}

pub(super) struct IdState {
    pub(super) state: State,
    pub(super) local: Option<SocketAddr>,
    pub(super) remote: Option<SocketAddr>,
    /// The socket that holds our rendezvous name (listening or active side).
    bound: Option<Arc<OwnedFd>>,
    /// The CM connection of a connecting or connected id.
    pub(super) conn: Option<Carrier>,
    /// The path MTU (`ibv_mtu`) of the route to the peer: the outgoing interface's, through
    /// RoCE's rule; 4096 inside one namespace.
    pub(super) path_mtu: u32,
    /// A listening id's acceptor (it stops accepting when dropped).
    acceptor: Option<Acceptor>,
    /// Events handed to the application (or queued) and not yet acknowledged.
    outstanding: u32,
    disconnect_reported: bool,
    pub(super) peer_qpn: u32,
    pub(super) params: ConnParams,
    /// `rdma_create_ep` on a passive id: the QP attributes and PD for `rdma_get_request`.
    ep_qp_attr: Option<CData<ibv_qp_init_attr>>,
    ep_pd: usize,
    /// `rai_connect` data prepended to the private data of `rdma_connect`.
    connect_data: Vec<u8>,
    /// CQs and channels `rdma_create_qp` created for this id.
    owned_cqs: Vec<usize>,
    owned_channels: Vec<usize>,
    pub(super) path: Option<Box<ibv_sa_path_rec>>,
    afonly: bool,
    /// `rdma_destroy_id` started: events for this id are discarded, as the kernel does.
    destroyed: bool,
    /// ECE options to send (`rdma_set_local_ece`) and those the peer sent: (vendor id, options).
    local_ece: (u32, u32),
    remote_ece: (u32, u32),
    /// `RDMA_OPTION_ID_REUSEADDR`: binding an address in use is allowed (only one may listen).
    reuseaddr: bool,
    /// A listening id's rendezvous name (requests from other namespaces find it by name).
    listen_name: Option<String>,
    /// Multicast groups joined: (group address, MGID, send-only).
    pub(super) joins: Vec<(SocketAddr, [u8; 16], bool)>,
}

pub struct CmId {
    pub raw: CBox<rdma_cm_id>,
    channel: Mutex<Arc<EventChannel>>,
    /// A sync id owns a private channel and blocks in the calls that produce events.
    sync: std::sync::atomic::AtomicBool,
    pub ps: u32,
    pub(super) st: Mutex<IdState>,
    acked: Condvar,
    me: Weak<CmId>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device context and default PD the CM binds ids to (one per process, as librdmacm keeps
/// one per device).
struct CmDevice {
    ctx: usize,
    pd: usize,
}

/// Opened on first use, and again in a forked child (the parent's context is not the child's).
static CM_DEVICE: PerProcess<Mutex<Option<(u64, CmDevice)>>> = PerProcess::new(|| Mutex::new(None));

fn cm_device() -> Result<(usize, usize)> {
    let generation = crate::runtime::fork::generation();
    let mut d = lock(CM_DEVICE.get());
    if let Some((g, dev)) = d.as_ref() {
        if *g == generation {
            return Ok((dev.ctx, dev.pd));
        }
    }
    let ctx = device::Context::open(device::device_ptr())?;
    let c = objects().contexts.get(ctx)?;
    let pd = crate::verbs::pd::Pd::alloc(c)?;
    *d = Some((generation, CmDevice { ctx: ctx as usize, pd: pd as usize }));
    Ok((ctx as usize, pd as usize))
}

/// The context `rdma_get_devices` returns and ids are bound to.
pub fn cm_context() -> Result<*mut ibv_context> {
    cm_device().map(|(ctx, _)| ctx as *mut ibv_context)
}

pub(super) fn cm_pd() -> Result<*mut ibv_pd> {
    cm_device().map(|(_, pd)| pd as *mut ibv_pd)
}

// --- socket addresses ----------------------------------------------------------------------

/// Reads a socket address given by the caller (`EINVAL` for other families, like rdma-core).
///
/// # Safety
/// `sa` is NULL or points at a sockaddr of the size its family implies.
pub unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Result<SocketAddr> {
    // SAFETY: per the function's contract.
    let fam = unsafe { sa.as_ref() }.ok_or(Errno::EINVAL)?.sa_family as i32;
    match fam {
        libc::AF_INET => {
            // SAFETY: AF_INET addresses are sockaddr_in.
            let s = unsafe { &*(sa as *const libc::sockaddr_in) };
            Ok(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                u16::from_be(s.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 addresses are sockaddr_in6.
            let s = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Ok(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                u16::from_be(s.sin6_port),
            ))
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Writes the id's source address.
///
/// # Safety
/// `r` is a live `rdma_cm_id` and the caller holds its state lock (the only Rust writers).
pub(super) unsafe fn set_src(r: *mut rdma_cm_id, a: &SocketAddr) {
    // SAFETY: per the function's contract; a raw write of one field, no reference made.
    unsafe {
        std::ptr::addr_of_mut!((*r).route.addr.src_addr_union)
            .cast::<libc::sockaddr_storage>()
            .write(storage(a))
    };
}

/// Writes the id's destination address.
///
/// # Safety
/// As `set_src`.
pub(super) unsafe fn set_dst(r: *mut rdma_cm_id, a: &SocketAddr) {
    // SAFETY: per the function's contract; a raw write of one field, no reference made.
    unsafe {
        std::ptr::addr_of_mut!((*r).route.addr.dst_addr_union)
            .cast::<libc::sockaddr_storage>()
            .write(storage(a))
    };
}

fn storage(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let dst = &mut st;
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(dst as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s = unsafe { &mut *(dst as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
        }
    }
    st
}

pub(super) fn addr_to_wire(a: &SocketAddr) -> [u8; 28] {
    let mut w = [0u8; 28];
    let ip = match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    w[..16].copy_from_slice(&ip.octets());
    w[16..18].copy_from_slice(&a.port().to_be_bytes());
    w
}

pub(super) fn addr_from_wire(w: &[u8; 28]) -> SocketAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&w[..16]);
    let port = u16::from_be_bytes([w[16], w[17]]);
    let ip6 = Ipv6Addr::from(o);
    match ip6.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
        None => SocketAddr::new(IpAddr::V6(ip6), port),
    }
}

/// `true` if `ip` belongs to this host (a socket can bind to it).
pub(super) fn is_local(ip: IpAddr) -> bool {
    // The GID table answers, as it does for ibv_query_gid and UD sends (re-read on a miss).
    ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || device::is_local_ip(ip)
}

fn random_port() -> u16 {
    let mut r: u16 = 0;
    // SAFETY: getrandom into a valid 2-byte buffer.
    unsafe { libc::getrandom((&mut r as *mut u16).cast(), 2, 0) };
    32768 + r % 28232
}

pub(super) fn gid_of_addr(a: &SocketAddr) -> [u8; 16] {
    let ip = if a.ip().is_unspecified() {
        match a.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    } else {
        a.ip()
    };
    device::gid_of(ip)
}

/// The GID table index of our address `local` (the source GID of the id's path): the network
/// path sends from the sgid, so it must be the address the peer knows us by, not index 0
/// (loopback). 0 when unknown (unbound, or a wildcard).
pub(super) fn sgid_index_of(local: Option<SocketAddr>) -> u8 {
    let Some(l) = local else { return 0 };
    let gid = gid_of_addr(&l);
    device::gid_lookup(|t| t.position(&gid)).and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
}

/// The private data and parameters an event reports.
#[derive(Default)]
pub struct EventParams<'a> {
    pub private: &'a [u8],
    /// The length reported (rdma_cm reports the whole CM field on IB, zero-filled).
    pub private_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
    /// UD events (ESTABLISHED, CONNECT_REQUEST, MULTICAST_JOIN): `param.ud` instead of
    /// `param.conn`: the address handle attributes and the qkey.
    pub ud: Option<(ibv_ah_attr, u32)>,
    /// `param.ud.private_data` as a pointer value (multicast: the join context).
    pub ud_context: Option<usize>,
    pub on_fetch: Option<super::channel::OnFetch>,
}

impl CmId {
    /// Creates an id; `channel == None` makes a sync id with a private channel.
    pub fn create(
        channel: Option<Arc<EventChannel>>,
        context: *mut libc::c_void,
        ps: u32,
        qp_type: u32,
    ) -> Result<Arc<CmId>> {
        let sync = channel.is_none();
        let channel = match channel {
            Some(c) => c,
            None => EventChannel::new()?,
        };
        let mut raw: CBox<rdma_cm_id> = CBox::zeroed();
        let r = raw.init();
        r.channel = channel.raw.as_ptr();
        r.context = context;
        r.ps = ps;
        r.qp_type = qp_type;
        let id = Arc::new_cyclic(|me| CmId {
            raw,
            channel: Mutex::new(channel),
            sync: std::sync::atomic::AtomicBool::new(sync),
            ps,
            st: Mutex::new(IdState {
                state: State::Idle,
                local: None,
                remote: None,
                bound: None,
                conn: None,
                path_mtu: ibv_mtu::IBV_MTU_4096,
                acceptor: None,
                outstanding: 0,
                disconnect_reported: false,
                peer_qpn: 0,
                params: ConnParams::default(),
                ep_qp_attr: None,
                ep_pd: 0,
                connect_data: Vec::new(),
                owned_cqs: Vec::new(),
                owned_channels: Vec::new(),
                path: None,
                afonly: false,
                destroyed: false,
                joins: Vec::new(),
                local_ece: (0, 0),
                remote_ece: (0, 0),
                reuseaddr: false,
                listen_name: None,
            }),
            acked: Condvar::new(),
            me: me.clone(),
        });
        IDS.insert(id.raw.addr(), id.clone());
        Ok(id)
    }

    pub fn ptr(&self) -> *mut rdma_cm_id {
        self.raw.as_ptr()
    }

    pub fn is_sync(&self) -> bool {
        self.sync.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `rdma_migrate_id`: moves the id and its queued events to `to` (a new private channel
    /// when `None`, making the id sync), once the events it already handed out are acknowledged.
    /// A sync id's own `id->event` is acknowledged first, as librdmacm does: the application
    /// never sees that event as its own to ack, so waiting for it would wait forever.
    pub fn migrate(&self, to: Option<Arc<EventChannel>>) -> Result<()> {
        if to.is_none() && self.is_sync() {
            return Err(Errno::EINVAL);
        }
        let make_sync = to.is_none();
        let to = match to {
            Some(c) => c,
            None => EventChannel::new()?,
        };
        let me = self.arc();
        if self.is_sync() {
            // Before taking the state lock: acking takes it (`event_acked`).
            self.ack_held_event();
        }
        let mut st = lock(&self.st);
        while super::channel::has_unacked(self) {
            st = self.acked.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let old = std::mem::replace(&mut *lock(&self.channel), to.clone());
        for e in old.take_events_of(&me) {
            to.post(e);
        }
        self.sync.store(make_sync, std::sync::atomic::Ordering::Release);
        // SAFETY: a raw write of one field of the live struct, under the state lock (held).
        unsafe { std::ptr::addr_of_mut!((*self.raw.as_ptr()).channel).write(to.raw.as_ptr()) };
        Ok(())
    }

    pub(super) fn channel(&self) -> Arc<EventChannel> {
        lock(&self.channel).clone()
    }

    pub(super) fn weak(&self) -> Weak<CmId> {
        self.me.clone()
    }

    fn arc(&self) -> Arc<CmId> {
        self.me.upgrade().expect("id alive while in use")
    }

    /// Writes fields of the public struct: `f` gets the raw pointer and writes single fields
    /// through it (C reads the struct meanwhile, so no reference to it is made), under the
    /// id's state lock, which serialises the Rust writers.
    fn with_raw(&self, f: impl FnOnce(*mut rdma_cm_id)) {
        let _g = lock(&self.st);
        f(self.raw.as_ptr());
    }

    /// Sets `id->event` (sync ids: the event of the last call).
    fn set_event(&self, ev: *mut rdma_cm_event) {
        // SAFETY: a raw write of one field of the live struct, under the state lock.
        self.with_raw(|r| unsafe { std::ptr::addr_of_mut!((*r).event).write(ev) });
    }

    pub fn state(&self) -> State {
        lock(&self.st).state
    }

    // --- events ----------------------------------------------------------------------------

    /// Queues an event of this id (or, with `new_id`, a CONNECT_REQUEST for a new id).
    pub(super) fn post_event(
        &self,
        kind: u32,
        status: i32,
        p: EventParams<'_>,
        new_id: Option<Arc<CmId>>,
    ) {
        let mut st = lock(&self.st);
        self.post_event_locked(&mut st, kind, status, p, new_id);
    }

    /// Queues an event while the caller holds the state lock, so that a state change and its
    /// event are seen together, and a destroyed id gets no more events.
    fn post_event_locked(
        &self,
        st: &mut IdState,
        kind: u32,
        status: i32,
        p: EventParams<'_>,
        new_id: Option<Arc<CmId>>,
    ) {
        if st.destroyed {
            return;
        }
        let mut ev: CBox<rdma_cm_event> = CBox::zeroed();
        let mut private = Box::new([0u8; EVENT_PRIVATE]);
        let n = p.private.len().min(EVENT_PRIVATE);
        private[..n].copy_from_slice(&p.private[..n]);
        let e = ev.init();
        match &new_id {
            Some(nid) => {
                e.id = nid.ptr();
                e.listen_id = self.ptr();
            }
            None => e.id = self.ptr(),
        }
        e.event = kind;
        e.status = status;
        let len = if p.private_len == 0 { n as u8 } else { p.private_len };
        if let Some((ah_attr, qkey)) = p.ud {
            e.param.ud = rdma_ud_param {
                private_data: match p.ud_context {
                    Some(c) => c as *const libc::c_void,
                    None if len > 0 => private.as_ptr().cast(),
                    None => std::ptr::null(),
                },
                private_data_len: if p.ud_context.is_some() { 0 } else { len },
                ah_attr,
                qp_num: p.qp_num,
                qkey,
            };
            st.outstanding += 1;
            self.channel().post(Event {
                ev,
                private,
                owner: self.arc(),
                new_id,
                on_fetch: p.on_fetch,
            });
            return;
        }
        e.param.conn = rdma_conn_param {
            private_data: if len > 0 { private.as_ptr().cast() } else { std::ptr::null() },
            private_data_len: len,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            qp_num: p.qp_num,
        };
        st.outstanding += 1;
        self.channel().post(Event { ev, private, owner: self.arc(), new_id, on_fetch: p.on_fetch });
    }

    pub fn event_acked(&self) {
        let mut st = lock(&self.st);
        st.outstanding = st.outstanding.saturating_sub(1);
        self.acked.notify_all();
    }

    /// Sync ids: waits for the event the last call produces, as librdmacm's `ucma_complete`:
    /// acks the previous `id->event`, stores the new one there, and maps its status to errno.
    pub(super) fn complete(&self) -> Result<()> {
        if !self.is_sync() {
            return Ok(());
        }
        self.ack_held_event();
        let p = self.channel().get()?;
        self.set_event(p);
        // SAFETY: p is a live event we just handed out.
        let e = unsafe { &*p };
        if e.status != 0 {
            return Err(if e.event == RDMA_CM_EVENT_REJECTED {
                Errno::ECONNREFUSED
            } else if e.status < 0 {
                Errno(-e.status)
            } else {
                Errno(e.status)
            });
        }
        Ok(())
    }

    fn ack_held_event(&self) {
        let held = self.raw.read().event;
        if !held.is_null() {
            self.set_event(std::ptr::null_mut());
            let _ = super::channel::ack(held);
        }
    }

    // --- binding and resolution --------------------------------------------------------------

    /// Binds to a local address; port 0 picks an ephemeral port.
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut st = lock(&self.st);
        if st.state != State::Idle {
            return Err(Errno::EINVAL);
        }
        self.bind_locked(&mut st, addr)
    }

    pub(super) fn bind_locked(&self, st: &mut IdState, addr: SocketAddr) -> Result<()> {
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
        super::net::listener_added(&name, self.me.clone());
        Ok(())
    }

    /// The first message on a connection to our listener: a request, or garbage (dropped).
    fn on_first_message(&self, conn: OwnedFd, first: &[u8]) {
        if super::net::relay::is_relayed(first) {
            super::net::on_relayed(self, first);
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
    pub(super) fn new_request_id(&self, m: &Msg) -> Result<Arc<CmId>> {
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

    pub(super) fn on_request(&self, conn: Incoming, m: Msg) -> Result<()> {
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
            EventParams {
                private: m.private_data(),
                private_len: proto::REQ_PRIVATE as u8,
                responder_resources: m.initiator_depth,
                initiator_depth: m.responder_resources,
                flow_control: m.flow_control,
                retry_count: m.retry_count,
                rnr_retry_count: m.rnr_retry_count,
                srq: m.srq,
                qp_num: m.qpn,
                ..Default::default()
            },
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
    pub(super) fn send_request(
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
            let a = super::net::Assoc::active(self.ps, local, remote, mtu)?;
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

    pub(super) fn report_disconnect(&self) {
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

    pub(super) fn on_msg(&self, m: Msg) {
        let state = self.state();
        match (m.kind, state) {
            (proto::REP, State::Connecting) => {
                {
                    let mut st = lock(&self.st);
                    st.peer_qpn = m.qpn;
                    st.remote_ece = (m.ece_vendor, m.ece_options);
                    st.params.rq_psn = m.psn & 0x00ff_ffff;
                }
                let reported = EventParams {
                    private: m.private_data(),
                    private_len: proto::REP_PRIVATE as u8,
                    responder_resources: m.initiator_depth,
                    initiator_depth: m.responder_resources,
                    flow_control: m.flow_control,
                    retry_count: m.retry_count,
                    rnr_retry_count: m.rnr_retry_count,
                    srq: m.srq,
                    qp_num: m.qpn,
                    ..Default::default()
                };
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
    pub(super) fn on_hangup(&self, status: i32) {
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

    // --- endpoint and QP helpers -------------------------------------------------------------

    pub fn set_ep(&self, pd: *mut ibv_pd, attr: Option<&ibv_qp_init_attr>) {
        let mut st = lock(&self.st);
        st.ep_pd = pd as usize;
        st.ep_qp_attr = attr.map(|a| CData(pod_copy(a)));
    }

    pub fn set_connect_data(&self, d: &[u8]) {
        lock(&self.st).connect_data = d.to_vec();
    }

    /// The saved `rdma_create_ep` QP attributes of a request id (from its listener).
    pub fn ep_qp(&self) -> Option<(*mut ibv_pd, ibv_qp_init_attr)> {
        let st = lock(&self.st);
        st.ep_qp_attr.as_ref().map(|a| (st.ep_pd as *mut ibv_pd, pod_copy(&a.0)))
    }

    pub fn set_afonly(&self, v: bool) {
        lock(&self.st).afonly = v;
    }

    pub fn set_reuseaddr(&self, v: bool) {
        lock(&self.st).reuseaddr = v;
    }

    /// `rdma_set_local_ece`: options sent with our REQ or REP.
    pub fn set_local_ece(&self, vendor: u32, options: u32) {
        lock(&self.st).local_ece = (vendor, options);
    }

    /// `rdma_get_remote_ece`: the options the peer sent (zero if none).
    pub fn remote_ece(&self) -> (u32, u32) {
        lock(&self.st).remote_ece
    }

    pub fn record_owned(&self, cqs: &[usize], channels: &[usize]) {
        let mut st = lock(&self.st);
        st.owned_cqs.extend_from_slice(cqs);
        st.owned_channels.extend_from_slice(channels);
    }

    pub fn take_owned(&self) -> (Vec<usize>, Vec<usize>) {
        let mut st = lock(&self.st);
        (std::mem::take(&mut st.owned_cqs), std::mem::take(&mut st.owned_channels))
    }

    pub fn set_raw(&self, f: impl FnOnce(*mut rdma_cm_id)) {
        self.with_raw(f)
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
            let _ = super::channel::ack(p);
            return Err(Errno(e.status.abs()));
        }
        if e.event != RDMA_CM_EVENT_CONNECT_REQUEST {
            let _ = super::channel::ack(p);
            return Err(Errno::EINVAL);
        }
        let nid = lookup(e.id)?;
        nid.set_event(p);
        Ok(nid)
    }

    /// Destroys the id once all its events are acknowledged (as librdmacm, it blocks).
    pub fn destroy(self: &Arc<CmId>) -> Result<()> {
        if !IDS.contains(self.ptr()) {
            return Err(Errno::EINVAL);
        }
        self.leave_all();
        IDS.remove(self.ptr()).ok_or(Errno::EINVAL)?;
        self.ack_held_event();
        let ch = self.channel();
        let (bound, conn) = {
            let mut st = lock(&self.st);
            st.destroyed = true;
            let dropped = ch.take_events_of(self).len();
            st.outstanding = st.outstanding.saturating_sub(dropped as u32);
            st.acceptor = None;
            if let Some(n) = st.listen_name.take() {
                super::net::listener_removed(&n);
            }
            (st.bound.take(), st.conn.take())
        };
        if let (Some(b), Ok(e)) = (&bound, engine()) {
            e.unwatch(b.as_raw_fd());
        }
        if let Some(c) = &conn {
            c.close();
        }
        drop(bound);
        drop(conn);
        let mut st = lock(&self.st);
        while st.outstanding > 0 {
            st = self.acked.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    }

    pub fn src_port(&self) -> u16 {
        lock(&self.st).local.map_or(0, |a| a.port())
    }

    pub fn dst_port(&self) -> u16 {
        lock(&self.st).remote.map_or(0, |a| a.port())
    }
}

fn check_depths(p: &rdma_conn_param) -> Result<()> {
    let max = 128u8;
    if (p.responder_resources != 0xff && p.responder_resources > max)
        || (p.initiator_depth != 0xff && p.initiator_depth > max)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The caller's private data.
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
pub(super) unsafe fn private_slice<'a>(p: *const libc::c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per the function's contract.
        unsafe { std::slice::from_raw_parts(p.cast(), len as usize) }
    }
}

/// Looks up an application channel.
pub fn channel(p: *mut rdma_event_channel) -> Result<Arc<EventChannel>> {
    CHANNELS.get(p)
}
