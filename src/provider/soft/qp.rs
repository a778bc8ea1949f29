//! A soft QP: its QPN and socket (the `BY_QPN` table leads a peer's handshake to it), the link
//! handshake at RTR, the state it keeps for the data path (`rc.rs`, `rc_recv.rs`, `ud.rs`), and
//! the moves to ERR with their flush completions.

use super::link::{self, Hello, Link};
use super::net::rc::NetRc;
use super::rc::{InMsg, Inflight, RespJob};
use super::roce::Packet;
use crate::errno::{Errno, Result};
use crate::provider::{
    AdmitFn, Completion, CompletionSink, EventSink, MemoryKeys, ModifyFn, QpAttrs, QpEvent, QpInit,
    QpState, RecvWqe, SendWqe, SharedRecvQueue, TransportQp, Xrc, XrcTarget,
};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::{engine, on_progress_thread, Pollable};
use crate::runtime::{fork, lock, read_lock, write_lock};
use crate::sys::*;
use once_cell::sync::Lazy;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use ibv_wc_opcode::*;
use ibv_wc_status::*;

/// The mutable state of a QP, under its lock (the data path works on it too).
pub struct Inner {
    pub(super) state: QpState,
    pub(super) attr: QpAttrs,
    pub(super) sq: VecDeque<SendWqe>,
    /// Bytes of the front send already written to the ring.
    pub(super) pushed: u64,
    pub(super) inflight: VecDeque<Inflight>,
    pub(super) rq: VecDeque<RecvWqe>,
    pub(super) cur_in: Option<InMsg>,
    pub(super) responses: VecDeque<RespJob>,
    pub(super) link: Option<Arc<Link>>,
    /// The peer connected before we reached RTR: its handshake waits here.
    pending_hello: Option<(OwnedFd, Hello, Vec<OwnedFd>)>,
    /// The peer's QP is gone (or could not be reached).
    pub(super) peer_gone: bool,
    /// When the transport retries towards a silent peer run out.
    pub(super) retry_deadline: Option<std::time::Instant>,
    /// UD: multicast groups this QP is attached to, with the marker socket of each and the
    /// network membership (none where the group could not be joined on any interface).
    mcast: Vec<([u8; 16], OwnedFd, Option<super::net::mcast::Membership>)>,
    /// RC with a peer behind the network: RoCEv2 over UDP instead of the link.
    pub(super) net: Option<Box<NetRc>>,
    /// UD: destination GIDs known to be behind the network (`true`) or ours.
    pub(super) ud_remote: Vec<([u8; 16], bool)>,
    /// UD: sends waiting for room at a full destination on this host.
    pub(super) ud_backlog: super::ud_backlog::Backlog,
    /// UD: the shared-memory rings towards destinations on this host.
    pub(super) ud_rings: super::ud_ring::Senders,
    /// UD: the members of the group a multicast send goes to (kept, so sends allocate nothing).
    pub(super) mcast_members: Vec<u32>,
    /// XRC target: the receive side of the request being executed (see `rc_recv::rx_*`).
    pub(super) xrc_cur: Option<XrcTarget>,
    /// A capture of the ring path (`ring_capture`): the `sq_psn` its count started from, and
    /// the PSN of the next request packet.
    pub(super) capture_psn: Option<(u32, u32)>,
    /// The responder's message count that the captured responses carry (their AETH MSN).
    pub(super) capture_msn: u32,
}

pub struct SoftQp {
    pub qpn: u32,
    pub(super) ud: bool,
    /// Unreliable Connected: the link without acknowledgements, RNR or NAKs.
    pub(super) uc: bool,
    max_recv_wr: u32,
    pub(super) sq_sig_all: bool,
    pub(super) send_cq: Arc<dyn CompletionSink>,
    pub(super) recv_cq: Arc<dyn CompletionSink>,
    pub(super) keys: Arc<dyn MemoryKeys>,
    pub(super) srq: Option<Arc<dyn SharedRecvQueue>>,
    pub(super) events: Arc<dyn EventSink>,
    pub(super) xrc: Xrc,
    /// The socket that owns our QPN: listening (RC) or receiving datagrams (UD).
    listener: Arc<OwnedFd>,
    /// The UDP socket whose port our QPN carries (the network path sends from it).
    pub(super) udp: Arc<super::net::endpoint::Sock>,
    /// RC: accepts the peer's handshake connection (never blocking the progress thread).
    _acceptor: Option<Acceptor>,
    /// The process generation (`fork`) that created the QP: a forked child must not touch it.
    generation: u64,
    /// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: our own multicast sends are not looped back to us.
    block_self_mcast: AtomicBool,
    /// UD: held across an attach, which waits for the group's senders outside `st` (the
    /// progress thread never takes it), so attaches of the QP come one at a time.
    attaching: Mutex<()>,
    /// UD: the buffer datagrams are read into and the rings from same-host senders; one
    /// thread at a time holds it (the progress thread, or an application polling a CQ), so
    /// datagrams are delivered in arrival order.
    pub(super) ud_reading: Mutex<super::ud_ring::Receivers>,
    st: Mutex<Inner>,
    pub(super) me: Weak<SoftQp>,
    /// An application thread progressed the QP since the progress thread's last routine pass.
    app_progressed: AtomicBool,
    /// Network path: when ACKs kept back for the application's answer are to go (engine time,
    /// `net::now_ns`; 0: none kept back). The progress thread's routine pass sends them then,
    /// even if an application thread progressed the QP meanwhile.
    pub(super) acks_due: AtomicU64,
}

/// QPN → QP, for handshakes arriving at a QP's socket and for the first packet of each QP in
/// a received batch. A fast hash: only QPNs we allocated are inserted (a peer chooses which
/// one is looked up, never what the table holds).
static BY_QPN: Lazy<RwLock<FxHashMap<u32, Weak<SoftQp>>>> = Lazy::new(Default::default);

impl SoftQp {
    /// Allocates a QPN and its socket and registers the QP with the progress engine.
    pub fn create(init: QpInit) -> Result<Arc<SoftQp>> {
        let ud = init.ud;
        let (qpn, listener, udp) = link::allocate_qpn(ud)?;
        let listener = Arc::new(listener);
        let acceptor = if ud {
            None
        } else {
            Some(Acceptor::start(listener.clone(), Box::new(on_handshake))?)
        };
        let qp = Arc::new_cyclic(|me| SoftQp {
            qpn,
            ud,
            uc: init.uc,
            max_recv_wr: init.max_recv_wr,
            sq_sig_all: init.sq_sig_all,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            keys: init.keys,
            srq: init.srq,
            events: init.events,
            xrc: init.xrc,
            listener,
            udp,
            _acceptor: acceptor,
            generation: fork::generation(),
            block_self_mcast: AtomicBool::new(false),
            attaching: Mutex::new(()),
            ud_reading: Mutex::default(),
            st: Mutex::new(Inner {
                state: QpState::Reset,
                attr: QpAttrs::default(),
                sq: VecDeque::new(),
                pushed: 0,
                inflight: VecDeque::new(),
                rq: VecDeque::new(),
                cur_in: None,
                responses: VecDeque::new(),
                link: None,
                pending_hello: None,
                peer_gone: false,
                retry_deadline: None,
                mcast: Vec::new(),
                net: None,
                ud_remote: Vec::new(),
                ud_backlog: Default::default(),
                ud_rings: Default::default(),
                mcast_members: Vec::new(),
                xrc_cur: None,
                capture_psn: None,
                capture_msn: 0,
            }),
            me: me.clone(),
            app_progressed: AtomicBool::new(false),
            acks_due: AtomicU64::new(0),
        });
        let w = Arc::downgrade(&qp);
        let eng = engine()?;
        if ud {
            let lw = w.clone();
            // The handler reaches the socket through the QP, so a destroyed QP's descriptor
            // number (possibly reused) is never touched.
            eng.watch(
                qp.listener.as_raw_fd(),
                Arc::new(move |_| {
                    if let Some(q) = lw.upgrade() {
                        q.receive_datagrams();
                    }
                }),
            )?;
        }
        let f = fork::shared();
        write_lock(&BY_QPN).insert(qpn, w.clone());
        drop(f);
        let pw: Weak<dyn Pollable> = w;
        eng.add_pollable(pw);
        Ok(qp)
    }

    /// The socket that owns our QPN.
    pub(super) fn socket(&self) -> &OwnedFd {
        &self.listener
    }

    /// Whether this QP is attached to the multicast group `gid`.
    pub(super) fn attached(&self, gid: &[u8; 16]) -> bool {
        lock(&self.st).mcast.iter().any(|(g, ..)| g == gid)
    }

    pub(super) fn block_self_mcast(&self) -> bool {
        self.block_self_mcast.load(Ordering::Relaxed)
    }

    fn set_state(&self, st: &mut Inner, s: QpState) {
        st.state = s;
        self.events.state_changed(s);
    }

    /// At RTR: the smaller QPN connects; the larger one waits for (or adopts) the handshake.
    fn connect_link(&self, st: &mut Inner) {
        let dest = st.attr.dest_qp_num;
        if self.qpn < dest {
            match Link::connect(self.qpn, dest) {
                Ok(l) => self.attach(st, l),
                Err(_) => st.peer_gone = true,
            }
        } else if let Some((sock, h, fds)) = st.pending_hello.take() {
            if h.from_qpn == dest {
                match Link::accept(self.qpn, sock, &h, fds) {
                    Ok(l) => self.attach(st, l),
                    Err(_) => st.peer_gone = true,
                }
            }
        }
    }

    fn attach(&self, st: &mut Inner, l: Link) {
        let l = Arc::new(l);
        let fd = l.sock_fd();
        let me = self.me.clone();
        let weak_link = Arc::downgrade(&l);
        if let Ok(e) = engine() {
            let _ = e.watch(
                fd,
                Arc::new(move |_| {
                    let (Some(qp), Some(link)) = (me.upgrade(), weak_link.upgrade()) else {
                        return;
                    };
                    match link.on_readable() {
                        Ok(true) => {
                            qp.progress_now();
                        }
                        _ => {
                            if let Ok(e) = engine() {
                                e.unwatch(link.sock_fd());
                            }
                            qp.on_peer_gone();
                        }
                    }
                }),
            );
        }
        l.inn.set_peer_access(st.attr.qp_access_flags);
        st.link = Some(l);
        st.retry_deadline = None;
    }

    /// A peer's handshake arrived at our socket.
    fn on_hello(&self, sock: OwnedFd, h: Hello, fds: Vec<OwnedFd>) {
        let mut st = lock(&self.st);
        let ready = matches!(st.state, QpState::Rtr | QpState::Rts) && st.link.is_none();
        if ready && st.attr.dest_qp_num == h.from_qpn {
            match Link::accept(self.qpn, sock, &h, fds) {
                Ok(l) => self.attach(&mut st, l),
                Err(_) => st.peer_gone = true,
            }
        } else if matches!(st.state, QpState::Reset | QpState::Init) {
            st.pending_hello = Some((sock, h, fds));
        }
        drop(st);
        self.progress_now();
    }

    fn on_peer_gone(&self) {
        let mut st = lock(&self.st);
        st.peer_gone = true;
        drop(st);
        self.progress_now();
    }

    pub(super) fn flush(&self, cq: &dyn CompletionSink, wr_id: u64, opcode: u32, sq_seq: u64) {
        cq.push(Completion {
            wr_id,
            status: IBV_WC_WR_FLUSH_ERR,
            opcode,
            qp_num: self.qpn,
            sq_seq,
            ..Completion::default()
        })
    }

    /// Moves to ERR: every outstanding request completes with `IBV_WC_WR_FLUSH_ERR`.
    pub(super) fn to_error(&self, st: &mut Inner) {
        self.set_state(st, QpState::Err);
        self.net_flush(st);
        if let Some(l) = &st.link {
            l.out.close();
            l.notify_peer();
        }
        for f in st.inflight.drain(..) {
            self.flush(&*self.send_cq, f.wr_id, f.wc_opcode, f.seq);
        }
        for w in st.sq.drain(..) {
            self.flush(&*self.send_cq, w.wr_id, w.wc_opcode(), w.seq);
        }
        self.flush_ud_backlog(st);
        st.pushed = 0;
        st.responses.clear();
        if let Some(InMsg::Recv { wqe, .. }) = st.cur_in.take() {
            self.flush(&*self.recv_cq, wqe.wr_id, IBV_WC_RECV, 0);
        }
        for w in st.rq.drain(..) {
            self.flush(&*self.recv_cq, w.wr_id, IBV_WC_RECV, 0);
        }
    }

    /// A send request failed: its error completion, then the QP fails.
    pub(super) fn error_completion(
        &self,
        st: &mut Inner,
        wr_id: u64,
        sq_seq: u64,
        status: u32,
        opcode: u32,
    ) {
        self.send_cq.push(Completion {
            wr_id,
            status,
            opcode,
            qp_num: self.qpn,
            sq_seq,
            ..Completion::default()
        });
        self.fail(st);
    }

    /// Moves to ERR because of an error (not a modify): flushes, and reports `QpEvent::Fatal`
    /// (`IBV_EVENT_QP_FATAL` on the context's async events), as rxe does.
    pub(super) fn fail(&self, st: &mut Inner) {
        self.to_error(st);
        self.events.qp_event(QpEvent::Fatal);
    }

    /// Empties every queue without completions (the move to RESET).
    fn reset(&self, st: &mut Inner) {
        st.sq.clear();
        st.ud_backlog.take_all();
        st.inflight.clear();
        st.rq.clear();
        st.cur_in = None;
        st.responses.clear();
        st.link = None;
        st.net = None;
        st.pending_hello = None;
        st.peer_gone = false;
        st.retry_deadline = None;
        st.pushed = 0;
        self.set_state(st, QpState::Reset);
    }

    pub(super) fn lock_state(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.st)
    }
}

impl TransportQp for SoftQp {
    fn qpn(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        lock(&self.st).state
    }

    fn modify(&self, decide: ModifyFn<'_>) -> Result<()> {
        let mut st = lock(&self.st);
        let cur = st.state;
        let (to, attr) = decide(cur)?;
        st.attr = attr;
        if let Some(l) = &st.link {
            l.inn.set_peer_access(attr.qp_access_flags); // what the peer's direct path obeys
        }
        match to {
            QpState::Reset => self.reset(&mut st),
            QpState::Err => self.to_error(&mut st),
            QpState::Rtr if cur == QpState::Init && !self.ud => {
                self.set_state(&mut st, QpState::Rtr);
                if !self.connect_net(&mut st) {
                    self.connect_link(&mut st);
                }
            }
            QpState::Rts if cur == QpState::Rtr && st.net.is_some() => {
                self.net_rts(&mut st);
                self.set_state(&mut st, QpState::Rts);
            }
            s => self.set_state(&mut st, s),
        }
        drop(st);
        self.progress_now();
        Ok(())
    }

    fn post_send(&self, w: &mut SendWqe, admit: AdmitFn<'_>) -> Result<()> {
        if self.ud {
            Self::check_ud(w)?;
        }
        let mut st = lock(&self.st);
        w.seq = admit(st.state)?;
        if st.state == QpState::Err {
            // Posting to a QP in error is allowed: the request is flushed.
            self.flush(&*self.send_cq, w.wr_id, w.wc_opcode(), w.seq);
            return Ok(());
        }
        if self.ud {
            return self.post_send_ud(&mut st, w.take());
        }
        if st.net.is_some() {
            self.post_send_net(&mut st, w.take());
            return Ok(());
        }
        st.sq.push_back(w.take());
        if self.push_sends(&mut st) {
            if let Some(l) = &st.link {
                l.notify_peer();
            }
        }
        Ok(())
    }

    fn post_recv(&self, w: RecvWqe) -> Result<()> {
        let mut st = lock(&self.st);
        if st.state == QpState::Reset {
            return Err(Errno::EINVAL);
        }
        if st.rq.len() >= self.max_recv_wr as usize {
            return Err(Errno::ENOMEM);
        }
        if st.state == QpState::Err {
            self.flush(&*self.recv_cq, w.wr_id, IBV_WC_RECV, 0);
            return Ok(());
        }
        st.rq.push_back(w);
        // A message may be waiting for exactly this receive (RNR): take it now, as the
        // application may block on its channel next.
        self.consume(&mut st);
        Ok(())
    }

    fn progress(&self) -> bool {
        self.progress_now()
    }

    /// UD QPs only (checked above); attaching twice is harmless.
    fn attach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        let _one_at_a_time = lock(&self.attaching);
        if lock(&self.st).mcast.iter().any(|(g, ..)| *g == gid) {
            return Ok(());
        }
        // Joining waits for the group's senders, our progress thread perhaps among them,
        // which may want this QP's lock meanwhile: not under it.
        let marker = super::groups::join(&gid, self.qpn)?;
        let net = super::net::mcast::join(&gid, self.qpn).ok();
        lock(&self.st).mcast.push((gid, marker, net));
        Ok(())
    }

    /// `EINVAL` if not attached.
    fn detach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        let mut st = lock(&self.st);
        let before = st.mcast.len();
        st.mcast.retain(|(g, ..)| *g != gid);
        if st.mcast.len() == before {
            return Err(Errno::EINVAL);
        }
        drop(st);
        super::groups::left(&gid, self.socket().as_raw_fd());
        Ok(())
    }

    fn set_block_self_mcast(&self, v: bool) {
        self.block_self_mcast.store(v, Ordering::Relaxed);
    }

    fn destroy(&self) {
        if let Ok(e) = engine() {
            e.unwatch(self.listener.as_raw_fd());
        }
        let f = fork::shared();
        write_lock(&BY_QPN).remove(&self.qpn);
        drop(f);
        super::net::endpoint::release(self.qpn);
        let mut st = lock(&self.st);
        st.link = None;
        st.net = None;
        st.pending_hello = None;
        st.mcast.clear();
        st.ud_backlog.take_all();
        st.ud_rings = Default::default();
        drop(st);
        // Our receiving rings close too: their senders go back to the (now refused) socket.
        *lock(&self.ud_reading) = Default::default();
    }
}

impl SoftQp {
    /// Marks the QP as progressed by the application (see `progress_unattended`).
    pub(super) fn note_app_progress(&self) {
        // The flag first: once set, a poll reads no thread-local (a call in a shared library).
        if !self.app_progressed.load(Ordering::Relaxed) && !on_progress_thread() {
            self.app_progressed.store(true, Ordering::Relaxed);
        }
    }
}

impl Pollable for SoftQp {
    fn progress(&self) -> bool {
        self.progress_now()
    }

    fn progress_unattended(&self) -> bool {
        // An application polling this QP's CQ does its work: the progress thread leaves it
        // alone until a pass finds it unpolled (on a busy 2-core machine, a progress thread
        // that competes for every QP halves the message rate).
        if self.app_progressed.swap(false, Ordering::Relaxed) && !self.acks_overdue() {
            return false;
        }
        self.progress_now()
    }
}

/// Makes the process send, when it exits, the ACKs its QPs keep back for the application's next
/// call (`net::rc`): a program that exits right after its last completion, without destroying
/// its QPs, must not leave its peer without the ACK a NIC would have sent. Registered once.
pub(super) fn send_kept_acks_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        // No panic may leave through exit(3).
        let _ = std::panic::catch_unwind(|| {
            let qps: Vec<Arc<SoftQp>> = read_lock(&BY_QPN)
                .values()
                .filter_map(Weak::upgrade)
                .filter(|q| q.generation == fork::generation())
                .collect();
            for q in qps {
                // A lock held by a thread that exit(3) left running is skipped, never waited for.
                if let Ok(mut st) = q.st.try_lock() {
                    if let Some(n) = st.net.as_mut() {
                        n.send_waiting();
                    }
                }
            }
        });
    }
    ONCE.call_once(|| {
        // SAFETY: registering a function with C linkage that takes no arguments and cannot
        // unwind; failure (no room for handlers) only loses this courtesy.
        unsafe { libc::atexit(at_exit) };
    });
}

/// A RoCEv2 packet (ICRC checked) for `qpn` from `from`: `false` if no QP of this process
/// generation took it.
pub fn deliver_packet(
    qpn: u32,
    pkt: &Packet<'_>,
    from: &SocketAddr,
    to: IpAddr,
    batch: &mut Delivered,
) -> bool {
    // A burst read together is most often for one QP: the batch's last one, looked up already.
    if let Some(q) = batch.qps.last().filter(|q| q.qpn == qpn).cloned() {
        let now = batch.now();
        return q.on_net_packet(pkt, from, now);
    }
    let f = fork::shared();
    let qp = read_lock(&BY_QPN).get(&qpn).and_then(|w| w.upgrade());
    drop(f);
    match qp.filter(|q| q.generation == fork::generation()) {
        Some(q) if q.ud => q.on_net_ud(pkt, from, to),
        Some(q) => {
            let took = q.on_net_packet(pkt, from, batch.now());
            if took {
                batch.qps.push(q);
            }
            took
        }
        None => false,
    }
}

/// The RC QPs a batch of received packets went to: what those packets led to (ACKs, responses)
/// is sent when the batch ends, so that ACKs for packets read together coalesce.
#[derive(Default)]
pub struct Delivered {
    /// Each RC QP once (a QP met again after another is not looked for: its flush only sends).
    qps: Vec<Arc<SoftQp>>,
    /// The engine time of the batch (`net::now_ns`), read once: its packets came together.
    now: Option<u64>,
}

impl Delivered {
    /// Sends what the batch's packets led to.
    pub fn flush(&mut self) {
        for q in self.qps.drain(..) {
            q.flush_net_out();
        }
        self.now = None;
    }

    fn now(&mut self) -> u64 {
        *self.now.get_or_insert_with(super::net::now_ns)
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The first message on a connection to a QP's socket: a peer's handshake, or garbage (the
/// connection is then dropped).
fn on_handshake(conn: OwnedFd, first: &[u8], fds: Vec<OwnedFd>) {
    let Ok(h) = link::parse_hello(first) else { return };
    let f = fork::shared();
    let table = read_lock(&BY_QPN);
    let qp = table.get(&h.to_qpn).and_then(|w| w.upgrade());
    drop(table);
    drop(f);
    // A QP inherited from a parent process is the parent's: a child never adopts for it.
    if let Some(qp) = qp.filter(|q| q.generation == fork::generation()) {
        qp.on_hello(conn, h, fds);
    }
}
