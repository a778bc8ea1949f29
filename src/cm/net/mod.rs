//! The CM across network namespaces and hosts: InfiniBand CM MADs in RoCEv2 UD SENDs to QP1,
//! over UDP (docs/DESIGN-NOTES.md, "The connection manager").
//!
//! Each process generation has one [`Endpoint`]: a dual-stack UDP socket on an ephemeral port
//! that sends every MAD of the process and receives the answers, and, in the process that owns
//! it ([`relay`]), the socket on port 4791 where requests arrive. An [`Assoc`] is one id's
//! exchange with one peer (a connection, or a SIDR request): comm ids, where the peer listens,
//! retries and duplicates ([`exchange`]); [`translate`] maps its MADs to the id's messages.

pub mod capture;
pub mod exchange;
pub mod relay;
pub mod route;
pub mod translate;

use super::id::{lock, CmId};
use super::proto::{self, Msg};
use crate::errno::{Errno, Result};
use crate::provider::soft::net;
use crate::provider::soft::roce::{self, opcode::op, Deth, Flow, Packet, GSI_QKEY, GSI_QPN};
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::{fork, udp, unix};
use exchange::{
    timeout_of, Exchange, OnTimer, Sent, Verdict, MAX_CM_RETRIES, MRA_SERVICE_TIMEOUT,
    RESPONSE_TIMEOUT,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use translate::Ctx;
use wire::{attr, Cm, MAD_LEN};

use super::wire;

/// How long a finished association still answers duplicates (the peer's resend budget).
fn timewait() -> std::time::Duration {
    timeout_of(RESPONSE_TIMEOUT) * (u32::from(MAX_CM_RETRIES) + 1)
}

/// The UDP sockets and associations of one process generation.
pub struct Endpoint {
    generation: u64,
    sock: Arc<OwnedFd>,
    port: u16,
    /// The inbox of answers to our comm ids that other stacks sent to port 4791 and its owner
    /// passed on (`None` if it could not be bound).
    inbox: Mutex<Option<net::relay::Inbox>>,
    tables: Mutex<Tables>,
    psn: AtomicU32,
}

#[derive(Default)]
struct Tables {
    by_id: HashMap<u32, Arc<Assoc>>,
    /// Passive associations by (requester IP, its comm id): a resent request finds its own.
    by_peer: HashMap<(IpAddr, u32), u32>,
}

static ENDPOINT: PerProcess<Mutex<Option<Arc<Endpoint>>>> = PerProcess::new(|| Mutex::new(None));
/// This process's listeners by rendezvous name: the owner of 4791 hands requests for them over
/// directly (a burst of requests would overflow the listener's accept queue otherwise).
static LOCAL: PerProcess<Mutex<HashMap<String, Weak<CmId>>>> =
    PerProcess::new(|| Mutex::new(HashMap::new()));

/// This generation's endpoint, opened on first use.
pub fn endpoint() -> Result<Arc<Endpoint>> {
    let generation = fork::generation();
    let mut e = lock(ENDPOINT.get());
    if let Some(ep) = e.as_ref() {
        if ep.generation == generation {
            return Ok(ep.clone());
        }
    }
    let sock = Arc::new(udp::open(0, None)?);
    let port = udp::local_port(sock.as_raw_fd())?;
    let ep = Arc::new(Endpoint {
        generation,
        sock: sock.clone(),
        port,
        inbox: Mutex::new(None),
        tables: Mutex::new(Tables::default()),
        psn: AtomicU32::new(random_u32() & 0xff_ffff),
    });
    ep.watch(sock, port)?;
    let me = Arc::downgrade(&ep);
    let on: net::relay::OnPacket = Arc::new(move |pkt: &[u8], from, to| {
        if let Some(ep) = me.upgrade() {
            ep.on_packet(pkt, from, to);
        }
    });
    *lock(&ep.inbox) = net::relay::open_inbox(port, on).ok();
    *e = Some(ep.clone());
    Ok(ep)
}

/// Makes the owner of port 4791 (whichever process of ours it is) hand us the CM MADs that
/// arrive there. Called at load time.
pub fn install() {
    net::well_known::set_gsi_handler(|pkt, from, to| {
        if let Ok(ep) = endpoint() {
            ep.on_packet(pkt, from, to);
        }
    });
}

/// A CM MAD as the RoCEv2 packet that carries it, `from` → `to`: a UD SEND Only to QP1 (DETH:
/// the GSI Q_Key, source QP 1) with PSN `psn`, into `buf`; its length.
fn gsi_packet(
    from: SocketAddr,
    to: SocketAddr,
    psn: u32,
    mad: &[u8; MAD_LEN],
    buf: &mut [u8],
) -> Result<usize> {
    let flow = Flow::new(from, to).ok_or(Errno::EINVAL)?;
    let mut pkt = Packet::new(op::UD | op::SEND_ONLY, GSI_QPN, psn, mad);
    pkt.ext.deth = Some(Deth::new(GSI_QKEY, GSI_QPN));
    roce::encode(&pkt, &flow, buf).map_err(|_| Errno::EINVAL)
}

fn random_u32() -> u32 {
    let mut r: u32 = 0;
    // SAFETY: getrandom into a valid 4-byte buffer.
    unsafe { libc::getrandom((&mut r as *mut u32).cast(), 4, 0) };
    r
}

/// A listening id started on rendezvous `name` (it makes this process a candidate owner of
/// port 4791).
pub fn listener_added(name: &str, id: Weak<CmId>) {
    lock(LOCAL.get()).insert(name.to_string(), id);
    net::well_known::want();
}

/// The listening id on rendezvous `name` is gone.
pub fn listener_removed(name: &str) {
    lock(LOCAL.get()).remove(name);
    net::well_known::unwant();
}

impl Endpoint {
    fn watch(self: &Arc<Self>, sock: Arc<OwnedFd>, port: u16) -> Result<()> {
        let me = Arc::downgrade(self);
        engine()?.watch(
            sock.as_raw_fd(),
            Arc::new(move |_| {
                let Some(ep) = me.upgrade() else { return };
                let mut buf = [0u8; 2048];
                loop {
                    match udp::recv(sock.as_raw_fd(), &mut buf) {
                        // Without our address the ICRC cannot be checked: skipped.
                        Ok(Some(r)) => {
                            if let Some(to) = r.to {
                                ep.on_packet(&buf[..r.len], r.from, SocketAddr::new(to, port));
                            }
                        }
                        Err(e) if e == Errno::EINVAL => {} // truncated: skipped
                        _ => break,
                    }
                }
            }),
        )
    }

    /// Sends one MAD in a RoCEv2 UD SEND Only to QP1 from our address `src`.
    fn send_mad(&self, src: IpAddr, to: SocketAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        let psn = self.psn.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
        let mut buf = [0u8; 512];
        let n = gsi_packet(SocketAddr::new(src, self.port), to, psn, mad, &mut buf)?;
        udp::send_from(self.sock.as_raw_fd(), src, to, &buf[..n])
    }

    /// One datagram from `from` to our `to`: a checked RoCEv2 packet to QP1 carrying a CM MAD,
    /// or dropped.
    fn on_packet(&self, bytes: &[u8], from: SocketAddr, to: SocketAddr) {
        let Some(flow) = Flow::new(from, to) else { return };
        let Ok(pkt) = roce::decode(bytes, &flow) else { return };
        let is_gsi = pkt.bth.opcode() == op::UD | op::SEND_ONLY
            && pkt.bth.dest_qp() == GSI_QPN
            && pkt.ext.deth.is_some_and(|d| d.qkey() == GSI_QKEY);
        let Ok(mad) = <&[u8; MAD_LEN]>::try_from(pkt.payload) else { return };
        if !is_gsi {
            return;
        }
        let Ok(cm) = wire::decode(mad) else { return };
        let ours = match &cm.msg {
            wire::Msg::Req(_) | wire::Msg::SidrReq(_) => return self.relay(from, to, mad, &cm),
            wire::Msg::Rep(m) => m.remote_comm_id,
            wire::Msg::Rej(m) => m.remote_comm_id,
            wire::Msg::Rtu(m) => m.remote_comm_id,
            wire::Msg::Mra(m) => m.remote_comm_id,
            wire::Msg::Dreq(m) => m.remote_comm_id,
            wire::Msg::Drep(m) => m.remote_comm_id,
            wire::Msg::SidrRep(m) => m.request_id,
        };
        let a = lock(&self.tables).by_id.get(&ours).cloned();
        match a {
            Some(a) => a.on_wire(&cm.msg, from),
            // Another stack answers to port 4791, and we own it: the comm id names the
            // endpoint port of the process it is for (`new_comm_id`).
            None if to.port() == roce::ROCE_UDP_PORT && port_of_comm_id(ours) != self.port => {
                let _ = net::relay::forward(port_of_comm_id(ours), bytes, from, to.ip());
            }
            None => {}
        }
    }

    /// A request: to the process listening on its (port space, port, address), or refused.
    fn relay(&self, from: SocketAddr, to: SocketAddr, mad: &[u8; MAD_LEN], cm: &Cm) {
        let Some((_, req)) = translate::request_from_wire(&cm.msg) else { return };
        if !addressed_as_sent(&req, from, to) {
            return;
        }
        let names = super::carrier::listener_names(req.ps, req.local);
        let blob = relay::encode(from, to, mad);
        for n in &names {
            let local = lock(LOCAL.get()).get(n).and_then(Weak::upgrade);
            if let Some(l) = local {
                return on_relayed(&l, &blob);
            }
        }
        if let Ok(fd) = super::carrier::dial(req.ps, req.local) {
            let _ = unix::send(fd.as_raw_fd(), &blob, &[]);
            return;
        }
        let bound = unix::bound_names("rdmashim/cm/");
        if names.iter().any(|n| bound.contains(n)) {
            // A listener exists but its queue is full: the requester's resend will get through.
            return;
        }
        // Nobody listens there: "invalid service id", as the IB CM answers.
        let msg = match cm.msg {
            wire::Msg::Req(_) => wire::Msg::Rej(wire::Rej {
                remote_comm_id: req.remote_id,
                reason: wire::msgs::reason::INVALID_SERVICE_ID,
                ..Default::default()
            }),
            _ => wire::Msg::SidrRep(wire::SidrRep {
                request_id: req.remote_id,
                status: wire::msgs::sidr_status::SERVICE_ID_NOT_SUPPORTED,
                service_id: req.service_id,
                ..Default::default()
            }),
        };
        let mut out = [0u8; MAD_LEN];
        if wire::encode(&Cm { tid: cm.tid, msg }, &mut out).is_ok() {
            let _ = self.send_mad(to.ip(), from, &out);
        }
    }

    fn insert(&self, a: &Arc<Assoc>, peer_key: Option<(IpAddr, u32)>) {
        let mut t = lock(&self.tables);
        t.by_id.insert(a.local_id, a.clone());
        if let Some(k) = peer_key {
            t.by_peer.insert(k, a.local_id);
        }
    }

    /// A comm id not in use here: our endpoint's port, then 16 random bits, so that the owner
    /// of port 4791 can pass on the answers other stacks send there (never 0, which a REJ or
    /// SIDR_REP for "nobody" carries: the port is not 0).
    fn new_comm_id(&self) -> u32 {
        let t = lock(&self.tables);
        loop {
            let id = (u32::from(self.port) << 16) | (random_u32() & 0xffff);
            if id != 0 && !t.by_id.contains_key(&id) {
                return id;
            }
        }
    }
}

/// The CM endpoint port of the process whose comm id `id` is (see `Endpoint::new_comm_id`).
fn port_of_comm_id(id: u32) -> u16 {
    (id >> 16) as u16
}

/// `true` if a request's rdma_cm IP header names the addresses its packet travelled between:
/// otherwise a peer could reach a listener bound to an address it cannot send to (loopback).
fn addressed_as_sent(req: &translate::Request, from: SocketAddr, to: SocketAddr) -> bool {
    req.remote.ip() == from.ip() && req.local.ip() == to.ip()
}

/// A request relayed to `listener` (first message on its rendezvous, [`relay`]).
pub fn on_relayed(listener: &CmId, blob: &[u8]) {
    let Some((from, to, mad)) = relay::decode(blob) else { return };
    let Ok(cm) = wire::decode(&mad) else { return };
    let Some((m, req)) = translate::request_from_wire(&cm.msg) else { return };
    if !addressed_as_sent(&req, from, to) {
        return;
    }
    let Ok(ep) = endpoint() else { return };
    let dup = {
        let t = lock(&ep.tables);
        t.by_peer.get(&(from.ip(), req.remote_id)).and_then(|l| t.by_id.get(l)).cloned()
    };
    if let Some(a) = dup {
        a.on_wire(&cm.msg, from);
        return;
    }
    let path_mtu = if (1..=5).contains(&m.path_mtu) {
        u32::from(m.path_mtu)
    } else {
        crate::sys::ibv_mtu::IBV_MTU_1024
    };
    let local_id = ep.new_comm_id();
    let mut ex = Exchange::default();
    ex.received(cm.msg.attr_id());
    let a = Arc::new(Assoc {
        ep: ep.clone(),
        local_id,
        src: to.ip(),
        st: Mutex::new(AssocState {
            id: Weak::new(),
            ctx: Ctx {
                local_id,
                remote_id: req.remote_id,
                service_id: req.service_id,
                local: req.local,
                remote: req.remote,
                path_mtu,
                peer_qpn: m.qpn,
                passive: true,
            },
            peer_udp: from,
            tid: cm.tid,
            ex,
            closed: false,
        }),
    });
    ep.insert(&a, Some((from.ip(), req.remote_id)));
    let inc = super::carrier::Incoming::Mad(a.clone());
    let r = match m.kind {
        proto::REQ => listener.on_request(inc, m),
        _ => listener.on_sidr_request(inc, m),
    };
    if r.is_err() {
        a.close();
    }
}

/// One id's exchange of CM MADs with one peer.
pub struct Assoc {
    ep: Arc<Endpoint>,
    local_id: u32,
    /// Our address the MADs go out from.
    src: IpAddr,
    st: Mutex<AssocState>,
}

struct AssocState {
    id: Weak<CmId>,
    ctx: Ctx,
    /// Where the peer's CM is: `ip:4791` until it answers, then the port it answered from.
    peer_udp: SocketAddr,
    tid: u64,
    ex: Exchange,
    closed: bool,
}

/// The message of the peer an outgoing message answers (for resends to duplicates).
fn answers(kind: u32, passive: bool) -> Option<u16> {
    match kind {
        proto::REP => Some(attr::REQ),
        proto::RTU => Some(attr::REP),
        proto::DREP => Some(attr::DREQ),
        proto::SIDR_REP => Some(attr::SIDR_REQ),
        proto::REJ if passive => Some(attr::REQ),
        proto::REJ => Some(attr::REP),
        _ => None,
    }
}

impl Assoc {
    /// The active side's association: to the listener on `remote` (port space `ps`), from our
    /// resolved address `local`.
    pub fn active(
        ps: u32,
        local: SocketAddr,
        remote: SocketAddr,
        path_mtu: u32,
    ) -> Result<Arc<Assoc>> {
        let ep = endpoint()?;
        let local_id = ep.new_comm_id();
        let a = Arc::new(Assoc {
            ep: ep.clone(),
            local_id,
            src: local.ip(),
            st: Mutex::new(AssocState {
                id: Weak::new(),
                ctx: Ctx {
                    local_id,
                    remote_id: 0,
                    service_id: wire::service_id(ps as u16, remote.port()),
                    local,
                    remote,
                    path_mtu,
                    peer_qpn: 0,
                    passive: false,
                },
                peer_udp: SocketAddr::new(remote.ip(), roce::ROCE_UDP_PORT),
                tid: (u64::from(local_id) << 32) | u64::from(random_u32()),
                ex: Exchange::default(),
                closed: false,
            }),
        });
        ep.insert(&a, None);
        Ok(a)
    }

    /// The id this association delivers to.
    pub fn attach(&self, id: Weak<CmId>) {
        lock(&self.st).id = id;
    }

    /// Sends an id's message as a MAD; requests are resent until answered.
    pub fn send(self: &Arc<Self>, m: &Msg) -> Result<()> {
        let (sent, epoch) = {
            let mut st = lock(&self.st);
            if st.closed {
                return Err(Errno::ENOTCONN);
            }
            let w = translate::to_wire(m, &st.ctx)?;
            let mut mad = [0u8; MAD_LEN];
            wire::encode(&Cm { tid: st.tid, msg: w }, &mut mad).map_err(|_| Errno::EINVAL)?;
            let sent = Sent { mad, to: st.peer_udp };
            let expects = matches!(m.kind, proto::REQ | proto::REP | proto::DREQ | proto::SIDR_REQ);
            let answers = answers(m.kind, st.ctx.passive);
            (sent, st.ex.sent(sent, answers, expects, MAX_CM_RETRIES))
        };
        // A datagram refused on its way out (a firewall's EPERM, ENOBUFS...) is a datagram
        // lost: the resends (ours, or the peer's for a message answering it) cover it, and
        // failing the call instead would fail the application's rdma_accept on a lossy link.
        let _ = self.ep.send_mad(self.src, sent.to, &sent.mad);
        if let Some(e) = epoch {
            self.arm(e);
        }
        Ok(())
    }

    fn arm(self: &Arc<Self>, epoch: u64) {
        let me = Arc::downgrade(self);
        let wait = lock(&self.st).ex.wait();
        if let Ok(e) = engine() {
            e.after(
                wait,
                Box::new(move || {
                    if let Some(a) = me.upgrade() {
                        a.on_timer(epoch);
                    }
                }),
            );
        }
    }

    fn on_timer(self: &Arc<Self>, epoch: u64) {
        let (what, id) = {
            let mut st = lock(&self.st);
            if st.closed {
                return;
            }
            (st.ex.timer(epoch), st.id.clone())
        };
        match what {
            OnTimer::Stale => {}
            OnTimer::Resend(s) => {
                let _ = self.ep.send_mad(self.src, s.to, &s.mad);
                self.arm(epoch);
            }
            OnTimer::GiveUp => {
                if let Some(id) = id.upgrade() {
                    id.on_hangup(-libc::ETIMEDOUT);
                }
            }
        }
    }

    /// A MAD of this association's peer (already known to name our comm id).
    fn on_wire(self: &Arc<Self>, w: &wire::Msg, from: SocketAddr) {
        let (verdict, id) = {
            let mut st = lock(&self.st);
            if from.ip() != st.ctx.remote.ip() {
                return;
            }
            let their_id = match w {
                wire::Msg::Rep(m) => Some(m.local_comm_id),
                wire::Msg::Rtu(m) => Some(m.local_comm_id),
                wire::Msg::Dreq(m) => Some(m.local_comm_id),
                wire::Msg::Drep(m) => Some(m.local_comm_id),
                wire::Msg::Req(m) => Some(m.local_comm_id),
                wire::Msg::SidrReq(m) => Some(m.request_id),
                // A REJ may come from the owner of 4791 (nobody listens): no comm id yet.
                _ => None,
            };
            if let Some(t) = their_id {
                if st.ctx.remote_id != 0 && t != st.ctx.remote_id {
                    return;
                }
            }
            if let wire::Msg::Mra(m) = w {
                // Our request was received and will be answered later: wait longer. (An MRA
                // is not a message of the exchange: one may come for every resend.)
                if m.message_mraed == wire::msgs::MsgRef::Req && !st.ctx.passive && !st.closed {
                    if let Some(epoch) = st.ex.mra(m.service_timeout) {
                        drop(st);
                        return self.arm(epoch);
                    }
                }
                return;
            }
            let verdict = st.ex.received(w.attr_id());
            if verdict == Verdict::Deliver {
                match w {
                    wire::Msg::Rep(r) => {
                        st.ctx.remote_id = r.local_comm_id;
                        st.ctx.peer_qpn = r.local_qpn;
                        st.peer_udp = from;
                    }
                    wire::Msg::SidrRep(_) => st.peer_udp = from,
                    _ => {}
                }
            }
            (verdict, if st.closed { Weak::new() } else { st.id.clone() })
        };
        match verdict {
            Verdict::Deliver => {
                let (Some(id), Some(m)) = (id.upgrade(), translate::from_wire(w)) else { return };
                id.on_msg(m);
            }
            Verdict::Resend(s) => {
                let _ = self.ep.send_mad(self.src, s.to, &s.mad);
            }
            Verdict::NotYet => self.send_mra(),
            Verdict::Drop => {}
        }
    }

    /// "Not yet": the peer resent its request because the application has not accepted (or
    /// rejected) it yet; an MRA makes the peer wait the service timeout before resending.
    fn send_mra(&self) {
        let (mad, to) = {
            let st = lock(&self.st);
            if st.closed || !st.ctx.passive {
                return;
            }
            let msg = wire::Msg::Mra(wire::Mra {
                local_comm_id: st.ctx.local_id,
                remote_comm_id: st.ctx.remote_id,
                message_mraed: wire::msgs::MsgRef::Req,
                service_timeout: MRA_SERVICE_TIMEOUT,
                ..Default::default()
            });
            let mut mad = [0u8; MAD_LEN];
            if wire::encode(&Cm { tid: st.tid, msg }, &mut mad).is_err() {
                return;
            }
            (mad, st.peer_udp)
        };
        let _ = self.ep.send_mad(self.src, to, &mad);
    }

    /// The id no longer listens: no more deliveries or retries; duplicates still get our last
    /// answer until the peer's retries are over, then the association is forgotten.
    pub fn close(&self) {
        let peer_key = {
            let mut st = lock(&self.st);
            if st.closed {
                return;
            }
            st.closed = true;
            st.id = Weak::new();
            st.ctx.passive.then_some((st.peer_udp.ip(), st.ctx.remote_id))
        };
        let ep = Arc::downgrade(&self.ep);
        let local_id = self.local_id;
        let forget = move || {
            if let Some(ep) = ep.upgrade() {
                let mut t = lock(&ep.tables);
                t.by_id.remove(&local_id);
                if let Some(k) = peer_key {
                    if t.by_peer.get(&k) == Some(&local_id) {
                        t.by_peer.remove(&k);
                    }
                }
            }
        };
        match engine() {
            Ok(e) => e.after(timewait(), Box::new(forget)),
            Err(_) => forget(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(local: &str, remote: &str) -> translate::Request {
        translate::Request {
            ps: 0x106,
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            remote_id: 1,
            service_id: wire::service_id(0x106, 7500),
        }
    }

    #[test]
    fn a_request_must_name_the_addresses_it_travelled_between() {
        let from: SocketAddr = "10.0.0.2:50000".parse().unwrap();
        let to: SocketAddr = "10.0.0.1:4791".parse().unwrap();
        assert!(addressed_as_sent(&req("10.0.0.1:7500", "10.0.0.2:40000"), from, to));
        // To a loopback-only listener from another host: refused.
        assert!(!addressed_as_sent(&req("127.0.0.1:7500", "10.0.0.2:40000"), from, to));
        // Claiming another requester's address: refused.
        assert!(!addressed_as_sent(&req("10.0.0.1:7500", "10.0.0.3:40000"), from, to));
    }

    #[test]
    fn replies_answer_the_message_they_reply_to() {
        assert_eq!(answers(proto::REP, true), Some(attr::REQ));
        assert_eq!(answers(proto::RTU, false), Some(attr::REP));
        assert_eq!(answers(proto::REJ, true), Some(attr::REQ));
        assert_eq!(answers(proto::REJ, false), Some(attr::REP));
        assert_eq!(answers(proto::DREP, false), Some(attr::DREQ));
        assert_eq!(answers(proto::DREQ, false), None);
        assert_eq!(answers(proto::REQ, false), None);
    }
}
