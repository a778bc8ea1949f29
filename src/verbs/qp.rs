//! Queue pairs: the state machine, work-request validation and the RC data path over a
//! provider link (segmenting sends into the ring, scattering received segments into posted
//! receives, generating completions).

use super::cq::{Cq, Wc};
use super::device::{self, Context};
use super::objects;
use super::pd::Pd;
use super::rc::{InMsg, Inflight, RespJob, SendWqe};
use super::srq::Srq;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::soft::link::{self, Hello, Link};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::{engine, Pollable};
use crate::runtime::fork;
use crate::sys::*;
use once_cell::sync::Lazy;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, RwLock, Weak};

use ibv_qp_state::*;
use ibv_wc_opcode::*;
use ibv_wc_status::*;

/// A scatter/gather list; one entry (the common case) needs no allocation.
#[derive(Clone)]
pub enum Sgl {
    One(ibv_sge),
    Many(Vec<ibv_sge>),
}

impl Sgl {
    pub fn from_slice(s: &[ibv_sge]) -> Sgl {
        match s {
            [one] => Sgl::One(*one),
            _ => Sgl::Many(s.to_vec()),
        }
    }

    pub fn as_slice(&self) -> &[ibv_sge] {
        match self {
            Sgl::One(s) => std::slice::from_ref(s),
            Sgl::Many(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    pub(super) fn total(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }
}

/// A posted receive.
#[derive(Clone)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Sgl,
}

/// The mutable state of a QP, under its lock (the data path in `rc.rs` works on it too).
pub struct QpState {
    pub(super) state: u32,
    pub(super) attr: ibv_qp_attr,
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
    /// Send requests accepted so far (the last one's send queue position).
    sq_posted: u64,
    /// UD: multicast groups this QP is attached to, with the marker socket of each.
    mcast: Vec<([u8; 16], OwnedFd)>,
}

pub struct Qp {
    /// An `ibv_qp_ex` whose first member is the `ibv_qp` handed out, so that every QP can be
    /// used with the extended posting API (`ibv_qp_to_qp_ex`).
    pub raw: CBox<ibv_qp_ex>,
    pub ctx: Arc<Context>,
    pub pd: Arc<Pd>,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub srq: Option<Arc<Srq>>,
    pub qp_type: u32,
    pub qpn: u32,
    pub sq_sig_all: bool,
    pub cap: ibv_qp_cap,
    /// The socket that owns our QPN: listening (RC) or receiving datagrams (UD).
    listener: Arc<OwnedFd>,
    /// RC: accepts the peer's handshake connection (never blocking the progress thread).
    _acceptor: Option<Acceptor>,
    /// The process generation (`fork`) that created the QP: a forked child must not touch it.
    pub generation: u64,
    /// The highest send queue position whose completion was polled.
    sq_retired: std::sync::atomic::AtomicU64,
    /// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: our own multicast sends are not looped back to us.
    block_self_mcast: std::sync::atomic::AtomicBool,
    st: Mutex<QpState>,
    me: Weak<Qp>,
}

/// QPN → QP, for handshakes arriving at a QP's socket.
static BY_QPN: Lazy<RwLock<HashMap<u32, Weak<Qp>>>> = Lazy::new(|| RwLock::new(HashMap::new()));

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const M_STATE: u32 = ibv_qp_attr_mask::IBV_QP_STATE.0;
const M_CUR_STATE: u32 = ibv_qp_attr_mask::IBV_QP_CUR_STATE.0;
const M_EN_SQD: u32 = ibv_qp_attr_mask::IBV_QP_EN_SQD_ASYNC_NOTIFY.0;
const M_ACCESS: u32 = ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
const M_PKEY: u32 = ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0;
const M_PORT: u32 = ibv_qp_attr_mask::IBV_QP_PORT.0;
const M_QKEY: u32 = ibv_qp_attr_mask::IBV_QP_QKEY.0;
const M_AV: u32 = ibv_qp_attr_mask::IBV_QP_AV.0;
const M_PATH_MTU: u32 = ibv_qp_attr_mask::IBV_QP_PATH_MTU.0;
const M_TIMEOUT: u32 = ibv_qp_attr_mask::IBV_QP_TIMEOUT.0;
const M_RETRY: u32 = ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0;
const M_RNR_RETRY: u32 = ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0;
const M_RQ_PSN: u32 = ibv_qp_attr_mask::IBV_QP_RQ_PSN.0;
const M_MAX_QP_RD: u32 = ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
const M_ALT_PATH: u32 = ibv_qp_attr_mask::IBV_QP_ALT_PATH.0;
const M_MIN_RNR: u32 = ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
const M_SQ_PSN: u32 = ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
const M_MAX_DEST_RD: u32 = ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0;
const M_MIG: u32 = ibv_qp_attr_mask::IBV_QP_PATH_MIG_STATE.0;
const M_CAP: u32 = ibv_qp_attr_mask::IBV_QP_CAP.0;
const M_DEST_QPN: u32 = ibv_qp_attr_mask::IBV_QP_DEST_QPN.0;

/// Required and optional attribute masks of an RC transition (IBA 11.2.4.2), `None` if the
/// transition does not exist.
fn rc_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    Some(match (from, to) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (M_PKEY | M_PORT | M_ACCESS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, M_PKEY | M_PORT | M_ACCESS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN | M_MAX_DEST_RD | M_MIN_RNR,
            M_ALT_PATH | M_ACCESS | M_PKEY,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (
            M_TIMEOUT | M_RETRY | M_RNR_RETRY | M_SQ_PSN | M_MAX_QP_RD,
            M_CUR_STATE | M_ALT_PATH | M_ACCESS | M_MIN_RNR | M_MIG,
        ),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (0, M_CUR_STATE | M_ACCESS | M_ALT_PATH | M_MIG | M_MIN_RNR),
        _ => return None,
    })
}

/// The same for UD QPs.
fn ud_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    Some(match (from, to) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (M_PKEY | M_PORT | M_QKEY, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, M_PKEY | M_PORT | M_QKEY),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (0, M_PKEY | M_QKEY),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (M_SQ_PSN, M_CUR_STATE | M_QKEY),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (0, M_CUR_STATE | M_QKEY),
        _ => return None,
    })
}

impl Qp {
    /// The `ibv_qp` handed to C (the first member of the `ibv_qp_ex`).
    pub fn ptr(&self) -> *mut ibv_qp {
        self.raw.as_ptr().cast()
    }

    /// A copy of the public `ibv_qp` fields.
    pub fn public(&self) -> ibv_qp {
        self.raw.read().qp_base
    }

    pub fn create(pd: Arc<Pd>, attr: &mut ibv_qp_init_attr) -> Result<*mut ibv_qp> {
        let o = objects();
        let send_cq = o.cqs.get(attr.send_cq)?;
        let recv_cq = o.cqs.get(attr.recv_cq)?;
        let srq = if attr.srq.is_null() { None } else { Some(o.srqs.get(attr.srq)?) };
        match attr.qp_type {
            ibv_qp_type::IBV_QPT_RC | ibv_qp_type::IBV_QPT_UD => {}
            // UD and UC are owned by later work (issue 4 for UD): refuse clearly.
            _ => return Err(Errno::EOPNOTSUPP),
        }
        let c = &mut attr.cap;
        if c.max_send_wr > device::MAX_QP_WR
            || (srq.is_none() && c.max_recv_wr > device::MAX_QP_WR)
            || c.max_send_sge > device::MAX_SGE
            || c.max_recv_sge > device::MAX_SGE
            || c.max_inline_data > device::MAX_INLINE
        {
            return Err(Errno::EINVAL);
        }
        c.max_send_wr = c.max_send_wr.max(1);
        c.max_send_sge = c.max_send_sge.max(1);
        c.max_inline_data = c.max_inline_data.max(64);
        if srq.is_some() {
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        } else {
            c.max_recv_wr = c.max_recv_wr.max(1);
            c.max_recv_sge = c.max_recv_sge.max(1);
        }
        let ud = attr.qp_type == ibv_qp_type::IBV_QPT_UD;
        let (qpn, listener) = link::allocate_qpn(ud)?;
        let listener = Arc::new(listener);
        let acceptor = if ud {
            None
        } else {
            Some(Acceptor::start(listener.clone(), Box::new(on_handshake))?)
        };
        let mut raw: CBox<ibv_qp_ex> = CBox::zeroed();
        let r = &mut raw.init().qp_base;
        r.context = pd.ctx.ptr();
        r.qp_context = attr.qp_context;
        r.pd = pd.raw.as_ptr();
        r.send_cq = attr.send_cq;
        r.recv_cq = attr.recv_cq;
        r.srq = attr.srq;
        r.handle = qpn;
        r.qp_num = qpn;
        r.state = IBV_QPS_RESET;
        r.qp_type = attr.qp_type;
        let p: *mut ibv_qp = raw.as_ptr().cast();
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut qattr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        qattr.cap = crate::handle::pod_copy(&attr.cap);
        let qp = Arc::new_cyclic(|me| Qp {
            raw,
            ctx: pd.ctx.clone(),
            pd,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq,
            qp_type: attr.qp_type,
            qpn,
            sq_sig_all: attr.sq_sig_all != 0,
            cap: attr.cap,
            listener,
            _acceptor: acceptor,
            generation: fork::generation(),
            block_self_mcast: std::sync::atomic::AtomicBool::new(false),
            sq_retired: std::sync::atomic::AtomicU64::new(0),
            st: Mutex::new(QpState {
                state: IBV_QPS_RESET,
                attr: qattr,
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
                sq_posted: 0,
                mcast: Vec::new(),
            }),
            me: me.clone(),
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
        BY_QPN.write().unwrap_or_else(|e| e.into_inner()).insert(qpn, w.clone());
        drop(f);
        send_cq.attach(w.clone());
        recv_cq.attach(w.clone());
        let pw: Weak<dyn Pollable> = w;
        eng.add_pollable(pw);
        o.qps.insert(p as usize, qp);
        Ok(p)
    }

    pub fn destroy(p: *mut ibv_qp) -> Result<()> {
        let qp = objects().qps.remove(p).ok_or(Errno::EINVAL)?;
        if let Ok(e) = engine() {
            e.unwatch(qp.listener.as_raw_fd());
        }
        let f = fork::shared();
        BY_QPN.write().unwrap_or_else(|e| e.into_inner()).remove(&qp.qpn);
        drop(f);
        let mut st = lock(&qp.st);
        st.link = None;
        st.pending_hello = None;
        st.mcast.clear();
        Ok(())
    }

    /// The socket that owns our QPN.
    pub(super) fn socket(&self) -> &OwnedFd {
        &self.listener
    }

    pub fn set_block_self_mcast(&self, v: bool) {
        self.block_self_mcast.store(v, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn block_self_mcast(&self) -> bool {
        self.block_self_mcast.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `ibv_attach_mcast`: UD QPs only; attaching twice is harmless.
    pub fn attach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        if self.qp_type != ibv_qp_type::IBV_QPT_UD {
            return Err(Errno::EINVAL);
        }
        let mut st = lock(&self.st);
        if st.mcast.iter().any(|(g, _)| *g == gid) {
            return Ok(());
        }
        let marker = crate::provider::soft::datagram::join(&gid, self.qpn)?;
        st.mcast.push((gid, marker));
        Ok(())
    }

    /// `ibv_detach_mcast`: `EINVAL` if not attached.
    pub fn detach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        let mut st = lock(&self.st);
        let before = st.mcast.len();
        st.mcast.retain(|(g, _)| *g != gid);
        if st.mcast.len() == before {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    pub fn state(&self) -> u32 {
        lock(&self.st).state
    }

    fn set_state(&self, st: &mut QpState, s: u32) {
        st.state = s;
        // SAFETY: a raw write of one field of the live struct (no reference to memory C reads);
        // the only Rust writer of `state` is here, under st's lock.
        unsafe { std::ptr::addr_of_mut!((*self.raw.as_ptr()).qp_base.state).write(s) };
    }

    pub fn modify(&self, attr: &ibv_qp_attr, mask: u32) -> Result<()> {
        let mut st = lock(&self.st);
        let cur = st.state;
        if mask & M_CUR_STATE != 0 && attr.cur_qp_state != cur {
            return Err(Errno::EINVAL);
        }
        let to = if mask & M_STATE != 0 { attr.qp_state } else { cur };
        let table =
            if self.qp_type == ibv_qp_type::IBV_QPT_UD { ud_transition } else { rc_transition };
        let (req, opt) = table(cur, to).ok_or(Errno::EINVAL)?;
        let given = mask & !M_STATE;
        if given & req != req || given & !(req | opt | M_CUR_STATE) != 0 {
            return Err(Errno::EINVAL);
        }
        if mask & M_PORT != 0 && attr.port_num != device::PORT {
            return Err(Errno::EINVAL);
        }
        if mask & M_PKEY != 0 && attr.pkey_index != 0 {
            return Err(Errno::EINVAL);
        }
        if mask & M_PATH_MTU != 0
            && !(ibv_mtu::IBV_MTU_256..=ibv_mtu::IBV_MTU_4096).contains(&attr.path_mtu)
        {
            return Err(Errno::EINVAL);
        }
        if mask & M_DEST_QPN != 0 && attr.dest_qp_num > 0x00ff_ffff {
            return Err(Errno::EINVAL);
        }
        // Record what was given.
        let a = &mut st.attr;
        if mask & M_ACCESS != 0 {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask & M_PKEY != 0 {
            a.pkey_index = attr.pkey_index;
        }
        if mask & M_PORT != 0 {
            a.port_num = attr.port_num;
        }
        if mask & M_QKEY != 0 {
            a.qkey = attr.qkey;
        }
        if mask & M_AV != 0 {
            a.ah_attr = attr.ah_attr;
        }
        if mask & M_PATH_MTU != 0 {
            a.path_mtu = attr.path_mtu;
        }
        if mask & M_TIMEOUT != 0 {
            a.timeout = attr.timeout;
        }
        if mask & M_RETRY != 0 {
            a.retry_cnt = attr.retry_cnt;
        }
        if mask & M_RNR_RETRY != 0 {
            a.rnr_retry = attr.rnr_retry;
        }
        if mask & M_RQ_PSN != 0 {
            a.rq_psn = attr.rq_psn;
        }
        if mask & M_SQ_PSN != 0 {
            a.sq_psn = attr.sq_psn;
        }
        if mask & M_MAX_QP_RD != 0 {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask & M_MAX_DEST_RD != 0 {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask & M_MIN_RNR != 0 {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask & M_DEST_QPN != 0 {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if mask & M_MIG != 0 {
            a.path_mig_state = attr.path_mig_state;
        }
        let _ = (M_EN_SQD, M_CAP);
        match to {
            IBV_QPS_RESET => {
                st.sq.clear();
                st.inflight.clear();
                // Reset empties the send queue without completions.
                self.retire(st.sq_posted);
                st.rq.clear();
                st.cur_in = None;
                st.responses.clear();
                st.link = None;
                st.pending_hello = None;
                st.peer_gone = false;
                st.retry_deadline = None;
                st.pushed = 0;
                self.set_state(&mut st, IBV_QPS_RESET);
            }
            IBV_QPS_ERR => self.to_error(&mut st),
            IBV_QPS_RTR if cur == IBV_QPS_INIT && self.qp_type == ibv_qp_type::IBV_QPT_RC => {
                self.set_state(&mut st, IBV_QPS_RTR);
                self.connect_link(&mut st);
            }
            s => self.set_state(&mut st, s),
        }
        drop(st);
        self.progress_now();
        Ok(())
    }

    pub fn query(&self) -> ibv_qp_attr {
        let st = lock(&self.st);
        let mut a = crate::handle::pod_copy(&st.attr);
        a.qp_state = st.state;
        a.cur_qp_state = st.state;
        a.cap = self.cap;
        a
    }

    /// At RTR: the smaller QPN connects; the larger one waits for (or adopts) the handshake.
    fn connect_link(&self, st: &mut QpState) {
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

    fn attach(&self, st: &mut QpState, l: Link) {
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
        st.link = Some(l);
        st.retry_deadline = None;
    }

    /// A peer's handshake arrived at our socket.
    fn on_hello(&self, sock: OwnedFd, h: Hello, fds: Vec<OwnedFd>) {
        let mut st = lock(&self.st);
        let ready = matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS) && st.link.is_none();
        if ready && st.attr.dest_qp_num == h.from_qpn {
            match Link::accept(self.qpn, sock, &h, fds) {
                Ok(l) => self.attach(&mut st, l),
                Err(_) => st.peer_gone = true,
            }
        } else if matches!(st.state, IBV_QPS_RESET | IBV_QPS_INIT) {
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

    /// Moves to ERR: every outstanding request completes with `IBV_WC_WR_FLUSH_ERR`.
    pub(super) fn to_error(&self, st: &mut QpState) {
        self.set_state(st, IBV_QPS_ERR);
        if let Some(l) = &st.link {
            l.out.close();
            l.notify_peer();
        }
        let flush = |wr_id, cq: &Cq, opcode, sq_seq| {
            cq.push(Wc {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode,
                qp_num: self.qpn,
                sq_seq,
                ..Wc::default()
            })
        };
        for f in st.inflight.drain(..) {
            flush(f.wr_id, &self.send_cq, f.wc_opcode, f.seq);
        }
        for w in st.sq.drain(..) {
            flush(w.wr_id, &self.send_cq, w.wc_opcode(), w.seq);
        }
        st.pushed = 0;
        st.responses.clear();
        if let Some(InMsg::Recv { wqe, .. }) = st.cur_in.take() {
            flush(wqe.wr_id, &self.recv_cq, IBV_WC_RECV, 0);
        }
        for w in st.rq.drain(..) {
            flush(w.wr_id, &self.recv_cq, IBV_WC_RECV, 0);
        }
    }

    /// A send request failed: its error completion, then the QP fails.
    pub(super) fn error_completion(
        &self,
        st: &mut QpState,
        wr_id: u64,
        sq_seq: u64,
        status: u32,
        opcode: u32,
    ) {
        self.send_cq.push(Wc { wr_id, status, opcode, qp_num: self.qpn, sq_seq, ..Wc::default() });
        self.fail(st);
    }

    /// Send queue entries up to `seq` are free again (their completion was polled).
    pub fn retire(&self, seq: u64) {
        self.sq_retired.fetch_max(seq, std::sync::atomic::Ordering::AcqRel);
    }

    /// Moves to ERR because of an error (not a modify): flushes, and reports `IBV_EVENT_QP_FATAL`
    /// on the context's async events, as rxe does.
    pub(super) fn fail(&self, st: &mut QpState) {
        self.to_error(st);
        self.ctx.events.push((
            ibv_event_type::IBV_EVENT_QP_FATAL,
            crate::verbs::async_event::Element::Qp(self.ptr() as usize),
        ));
    }

    /// Validates and queues one send request.
    pub fn post_send(&self, mut w: SendWqe, num_sge: usize) -> Result<()> {
        use std::sync::atomic::Ordering::Acquire;
        let mut st = lock(&self.st);
        if !matches!(st.state, IBV_QPS_RTS | IBV_QPS_ERR) {
            return Err(Errno::EINVAL);
        }
        if num_sge > self.cap.max_send_sge as usize || w.len > device::MAX_MSG as u64 {
            return Err(Errno::EINVAL);
        }
        if self.qp_type == ibv_qp_type::IBV_QPT_UD {
            Self::check_ud(&w)?;
        }
        // A request holds its send queue entry until its completion (or a later one) is polled.
        let posted = st.sq_posted;
        if posted - self.sq_retired.load(Acquire).min(posted) >= self.cap.max_send_wr as u64 {
            return Err(Errno::ENOMEM);
        }
        st.sq_posted = posted + 1;
        w.seq = posted + 1;
        if st.state == IBV_QPS_ERR {
            // Posting to a QP in error is allowed: the request is flushed.
            self.send_cq.push(Wc {
                wr_id: w.wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: w.wc_opcode(),
                qp_num: self.qpn,
                sq_seq: w.seq,
                ..Wc::default()
            });
            return Ok(());
        }
        if self.qp_type == ibv_qp_type::IBV_QPT_UD {
            return self.post_send_ud(&mut st, w);
        }
        st.sq.push_back(w);
        if self.push_sends(&mut st) {
            if let Some(l) = &st.link {
                l.notify_peer();
            }
        }
        Ok(())
    }

    /// Validates and queues one receive request.
    pub fn post_recv(&self, w: RecvWqe) -> Result<()> {
        if self.srq.is_some() {
            return Err(Errno::EINVAL);
        }
        let mut st = lock(&self.st);
        if st.state == IBV_QPS_RESET {
            return Err(Errno::EINVAL);
        }
        if w.sges.len() > self.cap.max_recv_sge as usize {
            return Err(Errno::EINVAL);
        }
        if st.rq.len() >= self.cap.max_recv_wr as usize {
            return Err(Errno::ENOMEM);
        }
        if st.state == IBV_QPS_ERR {
            self.recv_cq.push(Wc {
                wr_id: w.wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: IBV_WC_RECV,
                qp_num: self.qpn,
                ..Wc::default()
            });
            return Ok(());
        }
        st.rq.push_back(w);
        // A message may be waiting for exactly this receive (RNR): take it now, as the
        // application may block on its channel next.
        self.consume(&mut st);
        Ok(())
    }

    pub(super) fn lock_state(&self) -> std::sync::MutexGuard<'_, QpState> {
        lock(&self.st)
    }
}

impl Pollable for Qp {
    fn progress(&self) -> bool {
        self.progress_now()
    }
}

/// The first message on a connection to a QP's socket: a peer's handshake, or garbage (the
/// connection is then dropped).
fn on_handshake(conn: OwnedFd, first: &[u8], fds: Vec<OwnedFd>) {
    let Ok(h) = link::parse_hello(first) else { return };
    let f = fork::shared();
    let table = BY_QPN.read().unwrap_or_else(|e| e.into_inner());
    let qp = table.get(&h.to_qpn).and_then(|w| w.upgrade());
    drop(table);
    drop(f);
    // A QP inherited from a parent process is the parent's: a child never adopts for it.
    if let Some(qp) = qp.filter(|q| q.generation == fork::generation()) {
        qp.on_hello(conn, h, fds);
    }
}

/// For callers that hold an `ibv_qp` pointer: the QP's context must be ours.
pub fn lookup(p: *const ibv_qp) -> Result<Arc<Qp>> {
    objects().qps.get(p)
}
