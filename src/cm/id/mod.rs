//! CM ids and the connection state machine: the id, its state and its events here; the
//! passive side (`passive.rs`), the active side (`active.rs`), and the process's CM device and
//! local addressing (`local.rs`).

mod active;
mod local;
mod passive;

pub use local::*;

use super::carrier::{self, rendezvous_for, Carrier, Incoming};
use super::channel::{Event, EventChannel, CHANNELS, EVENT_PRIVATE};
use super::proto::{self, Msg};
use crate::errno::{Errno, Result};
use crate::handle::{pod_copy, CBox, CData, Registry};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
pub(super) use crate::runtime::lock;
use crate::runtime::{unix, wait_on};
use crate::sys::*;
use crate::verbs::{device, objects, qp};
use once_cell::sync::Lazy;
use rdma_cm_event_type::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, Weak};

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
    /// The connection came to us as a request (its carrier was adopted from a listener).
    pub(super) passive: bool,
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

impl<'a> EventParams<'a> {
    /// What a REQ or REP `m` reports to the other side (`private_len`: its private data field),
    /// the peer's initiator depth as our responder resources and vice versa.
    pub(in crate::cm) fn of_connect(m: &'a Msg, private_len: usize) -> Self {
        EventParams {
            private: m.private_data(),
            private_len: private_len as u8,
            responder_resources: m.initiator_depth,
            initiator_depth: m.responder_resources,
            flow_control: m.flow_control,
            retry_count: m.retry_count,
            rnr_retry_count: m.rnr_retry_count,
            srq: m.srq,
            qp_num: m.qpn,
            ..Default::default()
        }
    }
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
                passive: false,
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
            st = wait_on(&self.acked, st);
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
            st = wait_on(&self.acked, st);
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
