//! Queue pairs: the handle, the checks every provider shares, modify (its state machine in
//! `qp_state.rs`), and send-queue accounting. The data path is the provider's
//! [`TransportQp`], held by the QP and called directly.

use super::cq::Cq;
use super::device::{self, Context};
use super::objects;
use super::pd::Pd;
use super::qp_state::*;
use super::srq::Srq;
use super::xrcd::Xrcd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{
    CompletionSink, EventSink, MemoryKeys, QpEvent, QpInit, QpState, RecvWqe, SendWqe, TransportQp,
    Xrc,
};
use crate::runtime::lock;
use crate::sys::*;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ibv_qp_state::*;

/// What a QP is created in.
pub enum Owner {
    Pd(Arc<Pd>),
    /// `IBV_QPT_XRC_RECV`.
    Xrcd(Arc<Xrcd>),
}

/// What the owner of a QP (the CM) runs when the QP fails on its own; see [`Qp::on_fatal`].
pub type FatalHook = Box<dyn Fn() + Send + Sync>;

pub use crate::provider::Sgl;

pub struct Qp {
    /// An `ibv_qp_ex` whose first member is the `ibv_qp` handed out, so that every QP can be
    /// used with the extended posting API (`ibv_qp_to_qp_ex`). Shared with the QP's event sink.
    pub raw: Arc<CBox<ibv_qp_ex>>,
    pub ctx: Arc<Context>,
    /// `None` for an XRC target, which lives in an XRC domain instead.
    pub pd: Option<Arc<Pd>>,
    /// `None` for an XRC target; the receive CQ also for an XRC initiator created without one.
    pub send_cq: Option<Arc<Cq>>,
    pub recv_cq: Option<Arc<Cq>>,
    pub srq: Option<Arc<Srq>>,
    /// An XRC target's domain (the one it was created or opened in).
    pub xrcd: Option<Arc<Xrcd>>,
    /// Handles on this QP's transport: an XRC target's own and those `ibv_open_qp` gave.
    handles: Arc<AtomicUsize>,
    /// A handle `ibv_open_qp` gave (not the one the QP was created with).
    opened: bool,
    pub qp_type: u32,
    pub qpn: u32,
    pub sq_sig_all: bool,
    pub cap: ibv_qp_cap,
    /// The provider's data path for this QP.
    pub transport: Arc<dyn TransportQp>,
    /// The attributes given so far. Its lock serialises modifies (taken before the provider's).
    attr: Mutex<ibv_qp_attr>,
    /// Send requests accepted so far (the last one's send queue position). Written only by the
    /// admission of a request, under the provider's QP lock.
    sq_posted: AtomicU64,
    /// The highest send queue position whose completion was polled.
    sq_retired: AtomicU64,
    /// Shared with the event sink: run when the QP moves to ERR because of an error.
    on_fatal: Arc<OnceLock<FatalHook>>,
    /// The multicast groups the QP is attached to: `ibv_destroy_qp` refuses (`EBUSY`) while
    /// there is one, as ibv_create_qp(3) says.
    mcast: Mutex<Vec<[u8; 16]>>,
    /// The ECE options in use (`ece`).
    pub(super) ece: std::sync::atomic::AtomicU32,
}

/// The QP's async events and the state mirrored into the `ibv_qp` C reads.
struct QpEvents {
    raw: Arc<CBox<ibv_qp_ex>>,
    ctx: Arc<Context>,
    on_fatal: Arc<OnceLock<FatalHook>>,
}

impl EventSink for QpEvents {
    fn state_changed(&self, s: QpState) {
        // SAFETY: a raw write of one field of the live struct (kept alive by `raw`; no reference
        // to memory C reads); the only Rust writer of `state`, called under the provider's QP lock.
        unsafe {
            std::ptr::addr_of_mut!((*self.raw.as_ptr()).qp_base.state).write(to_ibv_state(s))
        };
    }

    fn qp_event(&self, e: QpEvent) {
        use ibv_event_type::*;
        let t = match e {
            QpEvent::Fatal => IBV_EVENT_QP_FATAL,
            QpEvent::AccessError => IBV_EVENT_QP_ACCESS_ERR,
            QpEvent::RequestError => IBV_EVENT_QP_REQ_ERR,
        };
        let qp = self.raw.as_ptr() as usize;
        self.ctx.events.push((t, super::async_event::Element::Qp(qp)));
        if let (QpEvent::Fatal, Some(f)) = (e, self.on_fatal.get()) {
            f();
        }
    }
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
        Self::create_in(Owner::Pd(pd), attr)
    }

    /// Creates a QP in a PD, or (`IBV_QPT_XRC_RECV`) in an XRC domain.
    pub fn create_in(owner: Owner, attr: &mut ibv_qp_init_attr) -> Result<*mut ibv_qp> {
        use ibv_qp_type::*;
        let o = objects();
        let (pd, named, xrcd, ctx) = match (owner, attr.qp_type) {
            (Owner::Xrcd(x), IBV_QPT_XRC_RECV) => {
                (None, ptr::null_mut(), Some(x.clone()), x.ctx.clone())
            }
            (Owner::Pd(pd), IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD | IBV_QPT_XRC_SEND) => {
                // Created in the PD's domain; the C struct names the PD (or parent domain) given.
                let (named, pd) = (pd.raw.as_ptr(), pd.domain());
                let ctx = pd.ctx.clone();
                (Some(pd), named, None, ctx)
            }
            // An XRC target needs a domain (ibv_create_qp_ex), which no other type takes.
            (_, IBV_QPT_XRC_RECV) | (Owner::Xrcd(_), _) => return Err(Errno::EINVAL),
            // Raw packet and driver QPs are not implemented: refuse clearly.
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let xrc_send = attr.qp_type == IBV_QPT_XRC_SEND;
        // An XRC target has no CQs of its own (its receives complete on the SRQs' CQs), an XRC
        // initiator no receive queue.
        let send_cq = match xrcd {
            Some(_) => None,
            None => Some(o.cqs.get(attr.send_cq)?),
        };
        let recv_cq = match (&xrcd, xrc_send, attr.recv_cq.is_null()) {
            (Some(_), ..) | (None, true, true) => None,
            _ => Some(o.cqs.get(attr.recv_cq)?),
        };
        // An XRC target's receives come from the SRQ each request names: the attributes' SRQ
        // is ignored (and left as the caller set it), as libibverbs ignores it (it passes the
        // kernel no SRQ for XRC_RECV).
        let srq_ptr = if xrcd.is_some() { ptr::null_mut() } else { attr.srq };
        let srq = if srq_ptr.is_null() { None } else { Some(o.srqs.get(srq_ptr)?) };
        // Only RC and UD QPs take an SRQ (ibv_create_qp(3), NOTES).
        if srq.is_some() && !matches!(attr.qp_type, IBV_QPT_RC | IBV_QPT_UD) {
            return Err(Errno::EINVAL);
        }
        let c = &mut attr.cap;
        let no_recv = srq.is_some() || xrc_send || xrcd.is_some();
        // With an SRQ, max_recv_wr and max_recv_sge are ignored.
        if c.max_send_wr > device::MAX_QP_WR
            || (!no_recv && c.max_recv_wr > device::MAX_QP_WR)
            || c.max_send_sge > device::MAX_SGE
            || (!no_recv && c.max_recv_sge > device::MAX_SGE)
            || c.max_inline_data > device::MAX_INLINE
        {
            return Err(Errno::EINVAL);
        }
        if xrcd.is_some() {
            *c = ibv_qp_cap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            };
        } else {
            c.max_send_wr = c.max_send_wr.max(1);
            c.max_send_sge = c.max_send_sge.max(1);
            c.max_inline_data = c.max_inline_data.max(64);
        }
        if no_recv {
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        } else {
            c.max_recv_wr = c.max_recv_wr.max(1);
            c.max_recv_sge = c.max_recv_sge.max(1);
        }
        let ud = attr.qp_type == IBV_QPT_UD;
        let mut raw: CBox<ibv_qp_ex> = CBox::zeroed();
        let r = &mut raw.init().qp_base;
        r.context = ctx.ptr();
        r.qp_context = attr.qp_context;
        r.pd = named;
        r.send_cq = if send_cq.is_some() { attr.send_cq } else { ptr::null_mut() };
        r.recv_cq = if recv_cq.is_some() { attr.recv_cq } else { ptr::null_mut() };
        r.srq = srq_ptr;
        r.state = IBV_QPS_RESET;
        r.qp_type = attr.qp_type;
        let raw = Arc::new(raw);
        let on_fatal = Arc::new(OnceLock::new());
        let events =
            Arc::new(QpEvents { raw: raw.clone(), ctx: ctx.clone(), on_fatal: on_fatal.clone() });
        let sink = |c: &Option<Arc<Cq>>| -> Arc<dyn CompletionSink> {
            match c {
                Some(c) => c.clone(),
                None => Arc::new(super::xrcd::NoSink),
            }
        };
        let keys: Arc<dyn MemoryKeys> = match &pd {
            Some(pd) => pd.clone(),
            None => Arc::new(super::xrcd::NoKeys),
        };
        let xrc = match (&xrcd, xrc_send) {
            (Some(x), _) => Xrc::Recv(x.domain.clone()),
            (None, true) => Xrc::Send,
            (None, false) => Xrc::None,
        };
        let transport = ctx.provider.create_qp(QpInit {
            ud,
            uc: attr.qp_type == IBV_QPT_UC,
            max_recv_wr: attr.cap.max_recv_wr,
            sq_sig_all: attr.sq_sig_all != 0,
            send_cq: sink(&send_cq),
            recv_cq: sink(&recv_cq),
            keys,
            srq: srq.clone().map(|s| s as Arc<dyn crate::provider::SharedRecvQueue>),
            events,
            xrc,
        })?;
        let qpn = transport.qpn();
        let b = raw.as_ptr();
        // SAFETY: raw writes of two fields of the live struct, not yet handed out (the event sink
        // writes only `state`, also through a raw pointer).
        unsafe {
            std::ptr::addr_of_mut!((*b).qp_base.handle).write(qpn);
            std::ptr::addr_of_mut!((*b).qp_base.qp_num).write(qpn);
        }
        let p: *mut ibv_qp = raw.as_ptr().cast();
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut qattr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        qattr.cap = crate::handle::pod_copy(&attr.cap);
        let qp = Arc::new(Qp {
            raw,
            ctx,
            pd,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq,
            xrcd: xrcd.clone(),
            handles: Arc::new(AtomicUsize::new(1)),
            opened: false,
            qp_type: attr.qp_type,
            qpn,
            sq_sig_all: attr.sq_sig_all != 0,
            cap: attr.cap,
            transport,
            attr: Mutex::new(qattr),
            sq_posted: AtomicU64::new(0),
            sq_retired: AtomicU64::new(0),
            on_fatal,
            mcast: Mutex::new(Vec::new()),
            ece: super::ece::initial(),
        });
        let w = Arc::downgrade(&qp);
        for c in [&send_cq, &recv_cq].into_iter().flatten() {
            c.attach(w.clone());
        }
        if let Some(x) = &xrcd {
            x.add_qp(&qp);
        }
        o.qps.insert(p as usize, qp);
        Ok(p)
    }

    /// `ibv_open_qp`: another handle on the XRC target QP `qpn` of `xrcd`'s domain (`EINVAL` if
    /// there is none). The QP lives until its last handle is destroyed.
    pub fn open(xrcd: Arc<Xrcd>, a: &ibv_qp_open_attr) -> Result<*mut ibv_qp> {
        use ibv_qp_open_attr_mask as m;
        let need =
            m::IBV_QP_OPEN_ATTR_NUM.0 | m::IBV_QP_OPEN_ATTR_XRCD.0 | m::IBV_QP_OPEN_ATTR_TYPE.0;
        let known = need | m::IBV_QP_OPEN_ATTR_CONTEXT.0;
        if a.comp_mask & need != need || a.comp_mask & !known != 0 {
            return Err(Errno::EINVAL);
        }
        if a.qp_type != ibv_qp_type::IBV_QPT_XRC_RECV {
            return Err(Errno::EINVAL);
        }
        let q = xrcd.target_qp(a.qp_num).ok_or(Errno::EINVAL)?;
        let mut raw: CBox<ibv_qp_ex> = CBox::zeroed();
        let r = &mut raw.init().qp_base;
        *r = q.public();
        r.qp_context = if a.comp_mask & m::IBV_QP_OPEN_ATTR_CONTEXT.0 != 0 {
            a.qp_context
        } else {
            ptr::null_mut()
        };
        // The state C reads is the original handle's (the events write it there).
        let p: *mut ibv_qp = raw.as_ptr().cast();
        q.handles.fetch_add(1, Ordering::AcqRel);
        xrcd.hold();
        let opened = Qp {
            raw: Arc::new(raw),
            ctx: xrcd.ctx.clone(),
            pd: None,
            send_cq: None,
            recv_cq: None,
            srq: None,
            xrcd: Some(xrcd),
            handles: q.handles.clone(),
            opened: true,
            qp_type: q.qp_type,
            qpn: q.qpn,
            sq_sig_all: false,
            cap: q.cap,
            transport: q.transport.clone(),
            attr: Mutex::new(crate::handle::pod_copy(&*lock(&q.attr))),
            sq_posted: AtomicU64::new(0),
            sq_retired: AtomicU64::new(0),
            on_fatal: Arc::new(OnceLock::new()),
            mcast: Mutex::new(Vec::new()),
            ece: super::ece::initial(),
        };
        objects().qps.insert(p as usize, Arc::new(opened));
        Ok(p)
    }

    /// Whether the QP completes on `cq`.
    pub fn uses_cq(&self, cq: &Arc<Cq>) -> bool {
        [&self.send_cq, &self.recv_cq].into_iter().flatten().any(|c| Arc::ptr_eq(c, cq))
    }

    /// The QP's PD (`EINVAL` for an XRC target, which has none).
    pub fn pd(&self) -> Result<&Arc<Pd>> {
        self.pd.as_ref().ok_or(Errno::EINVAL)
    }

    pub fn destroy(p: *mut ibv_qp) -> Result<()> {
        if !lock(&objects().qps.get(p)?.mcast).is_empty() {
            return Err(Errno::EBUSY);
        }
        super::async_event::wait_acked(p as usize);
        let qp = objects().qps.remove(p).ok_or(Errno::EINVAL)?;
        if let Some(x) = &qp.xrcd {
            if qp.opened {
                x.release();
            } else {
                x.remove_qp(qp.qpn);
            }
        }
        // The last handle on the QP releases its transport.
        if qp.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            qp.transport.destroy();
        }
        Ok(())
    }

    /// Sets (once) what runs when the QP moves to ERR because of an error, not a modify: a
    /// requester out of retries, a NAK, a responder's refusal. It runs with the provider's QP
    /// lock held (see "Lock order"), so it must only hand the news on (e.g. to the progress
    /// engine's timers), never take a CM or verbs lock or call into the QP.
    pub fn on_fatal(&self, f: FatalHook) {
        let _ = self.on_fatal.set(f);
    }

    pub fn set_block_self_mcast(&self, v: bool) {
        self.transport.set_block_self_mcast(v);
    }

    /// `ibv_attach_mcast`: UD QPs only; attaching twice is harmless.
    pub fn attach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        if self.qp_type != ibv_qp_type::IBV_QPT_UD {
            return Err(Errno::EINVAL);
        }
        self.transport.attach_mcast(gid)?;
        let mut m = lock(&self.mcast);
        if !m.contains(&gid) {
            m.push(gid);
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: `EINVAL` if not attached.
    pub fn detach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        self.transport.detach_mcast(gid)?;
        lock(&self.mcast).retain(|g| *g != gid);
        Ok(())
    }

    pub fn state(&self) -> u32 {
        to_ibv_state(self.transport.state())
    }

    /// Holds the attribute lock (serialising modifies) while `f` runs.
    pub fn with_modify_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        let _a = lock(&self.attr);
        f()
    }

    pub fn modify(&self, attr: &ibv_qp_attr, mask: u32) -> Result<()> {
        let mut rec = lock(&self.attr);
        let table = match self.qp_type {
            ibv_qp_type::IBV_QPT_UD => ud_transition,
            ibv_qp_type::IBV_QPT_UC => uc_transition,
            ibv_qp_type::IBV_QPT_XRC_SEND => xrc_ini_transition,
            ibv_qp_type::IBV_QPT_XRC_RECV => xrc_tgt_transition,
            _ => rc_transition,
        };
        let mut decided = None;
        let r = self.transport.modify(&mut |cur| {
            let cur = to_ibv_state(cur);
            let to = check_modify(table, cur, attr, mask)?;
            let mut next = crate::handle::pod_copy(&*rec);
            record(&mut next, attr, mask);
            let t = transport_attrs(&next);
            decided = Some(next);
            Ok((from_ibv_state(to).ok_or(Errno::EINVAL)?, t))
        });
        if let Some(next) = decided.filter(|_| r.is_ok()) {
            *rec = next;
        }
        drop(rec);
        r?;
        if mask & M_STATE != 0 && attr.qp_state == IBV_QPS_RESET {
            // Reset empties the send queue without completions.
            self.retire(self.sq_posted.load(Ordering::Acquire));
        }
        Ok(())
    }

    pub fn query(&self) -> ibv_qp_attr {
        let rec = lock(&self.attr);
        let mut a = crate::handle::pod_copy(&*rec);
        let s = self.state();
        a.qp_state = s;
        a.cur_qp_state = s;
        a.cap = self.cap;
        a
    }

    /// Send queue entries up to `seq` are free again (their completion was polled).
    pub fn retire(&self, seq: u64) {
        self.sq_retired.fetch_max(seq, Ordering::AcqRel);
    }

    /// Send queue entries held by requests whose completion was not polled yet.
    pub fn sq_outstanding(&self) -> u64 {
        let posted = self.sq_posted.load(Ordering::Acquire);
        posted - self.sq_retired.load(Ordering::Acquire).min(posted)
    }

    /// Validates and queues one send request.
    pub fn post_send(
        &self,
        w: &mut SendWqe,
        num_sge: usize,
        local: Option<super::mw::LocalOp>,
    ) -> Result<()> {
        if num_sge > self.cap.max_send_sge as usize || w.len > device::MAX_MSG as u64 {
            return Err(Errno::EINVAL);
        }
        let max = self.cap.max_send_wr as u64;
        // A bind or local invalidate takes effect when posted on a QP in RTS with room (in ERR
        // it flushes, without effect); its completion comes in send-queue order.
        if let Some(op) = local {
            if self.state() == ibv_qp_state::IBV_QPS_RTS && self.sq_outstanding() < max {
                w.local_status = op.execute();
            }
        }
        self.transport.post_send(w, &mut |state| {
            if !matches!(state, QpState::Rts | QpState::Err) {
                return Err(Errno::EINVAL);
            }
            // A request holds its send queue entry until its completion (or a later one) is
            // polled.
            if self.sq_outstanding() >= max {
                return Err(Errno::ENOMEM);
            }
            let seq = self.sq_posted.load(Ordering::Relaxed) + 1;
            self.sq_posted.store(seq, Ordering::Release);
            Ok(seq)
        })
    }

    /// Validates and queues one receive request.
    pub fn post_recv(&self, w: RecvWqe) -> Result<()> {
        // XRC QPs have no receive queue (a target's receives are its SRQs').
        if self.srq.is_some()
            || self.cap.max_recv_wr == 0
            || w.sges.len() > self.cap.max_recv_sge as usize
        {
            return Err(Errno::EINVAL);
        }
        self.transport.post_recv(w)
    }

    /// One pass of the provider's data path for this QP.
    pub fn progress_now(&self) -> bool {
        self.transport.progress()
    }
}

/// For callers that hold an `ibv_qp` pointer: the QP's context must be ours.
pub fn lookup(p: *const ibv_qp) -> Result<Arc<Qp>> {
    objects().qps.get(p)
}
