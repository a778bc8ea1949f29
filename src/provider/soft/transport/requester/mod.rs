//! The requester half of an RC QP: segments work requests into packets with consecutive PSNs,
//! keeps a bounded window of unacknowledged packets, and turns ACKs, READ responses, atomic ACKs
//! and NAKs into completions, strictly in posting order. Recovery is go-back-N from the oldest
//! unacknowledged PSN (on timeout, sequence NAK, RNR NAK after its timer, or a response that
//! shows an earlier READ/atomic answer was lost).

mod responses;

use super::api::*;
use super::psn;
use crate::provider::soft::roce::opcode::{self, op, Extra, Position, Transport};
use crate::provider::soft::roce::{
    AtomicEth, Ieth, ImmDt, NakCode, Packet, Reth, Syndrome, XrcEth,
};
use std::collections::VecDeque;

/// PSNs the send queue may span (keeps every comparison far inside the 2^23 half-space).
const MAX_SPAN: i32 = 1 << 22;
/// The window a loss shrinks to at the least (packets).
const MIN_CWND: u32 = 4;
/// What the fast timer allows for each READ answer still due (ns): a busy responder's pace.
const READ_ANSWER_NS: u64 = 20_000;
/// The shortest fast retransmission interval (ns). A busy host's scheduling alone can delay
/// answers longer, but a fast resend only probes (one packet; a spurious one resumes where
/// sending was), so firing early costs a packet, while a lost tail or NAK waits this long:
/// 1,000,000 SENDs under 5% loss took 93 s with 1 ms here, 23 s with 0.2 ms.
const FAST_MIN: u64 = 200_000;

/// A probe in flight: its PSN, and the window it replaced.
#[derive(Clone, Copy, Debug)]
struct Probe {
    psn: u32,
    cwnd: u32,
    ssthresh: u32,
}

/// One posted work request and how far it has been acknowledged.
#[derive(Clone, Copy, Debug)]
struct Wqe {
    wr: SendWr,
    /// First PSN; a request takes `npkts` PSNs (a READ: one per response packet).
    first: u32,
    npkts: u32,
    /// PSNs acknowledged (or READ responses placed), contiguous from `first`.
    acked: u32,
}

impl Wqe {
    fn done(&self) -> bool {
        self.acked == self.npkts
    }
    fn last(&self) -> u32 {
        psn::add(self.first, self.npkts - 1)
    }
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("next_psn", &self.next_psn)
            .field("una", &self.una)
            .field("snd", &self.snd)
            .field("sent_hi", &self.sent_hi)
            .field("cwnd", &self.cwnd)
            .field("ssthresh", &self.ssthresh)
            .field("timer", &self.timer)
            .field("rnr_wait", &self.rnr_wait)
            .field("rewound", &self.rewound)
            .field("error", &self.error)
            .field("next_deadline", &self.next_deadline())
            .field("stats", &self.stats)
            .field("sq", &self.sq.iter().take(3).collect::<Vec<_>>())
            .finish()
    }
}

pub struct Requester {
    cfg: RcConfig,
    mtu: u32,
    sq: VecDeque<Wqe>,
    /// PSN the next posted request gets.
    next_psn: u32,
    /// Oldest PSN not acknowledged.
    una: u32,
    /// Next PSN to transmit (rewinds to `una` for go-back-N).
    snd: u32,
    /// One past the highest PSN ever transmitted: responses beyond it are bogus.
    sent_hi: u32,
    /// Retransmission deadline (ns), while packets are outstanding.
    timer: Option<u64>,
    /// Packets beyond `una` we may have in flight now (at most `window`). A timeout drops it to
    /// one: the receiver may only be slow (a busy host), not losing anything, and a whole
    /// window sent again would queue a window of duplicates in front of new data there, make
    /// the next ACK later still, and feed on itself until the retries run out. It doubles with
    /// each ACK that makes progress up to `ssthresh`, then grows by one per such ACK.
    cwnd: u32,
    /// Where doubling stops. A sequence NAK (a packet lost while the path works) halves the
    /// window into it: go-back-N resends everything in flight after a loss, so a smaller
    /// window under loss wastes less, and a loss-free path grows it back to `window`.
    ssthresh: u32,
    /// After a timeout: the PSN resent as a probe. If the next progress acknowledges more than
    /// the probe, packets never resent since the timeout got there: nothing was lost, the
    /// timeout was spurious, and sending resumes where it was (no window of duplicates).
    /// With the window and `ssthresh` it had before: a spurious probe gives them back (a
    /// whole window would feed the next real loss's go-back-N).
    probe: Option<Probe>,
    /// Smoothed round trip (ns), sampled from packets sent once and acknowledged (Karn).
    srtt: Option<u64>,
    /// The first transmission being timed: (its PSN, when it left).
    timed: Option<(u32, u64)>,
    /// Fast retransmission: with packets outstanding and no progress by this time, go back to
    /// `una` without spending a retry (see `poll`).
    fast: Option<u64>,
    /// How many times the fast interval has doubled since the last progress.
    fast_backoff: u32,
    retries: u8,
    /// Whether any response came from the peer (even a stale one) since the timer was armed.
    heard: bool,
    /// Timeouts let pass since the last progress because answers were still coming.
    waited: u8,
    rnr_left: u8,
    /// After an RNR NAK: transmission resumes (from `una`) at this time.
    rnr_wait: Option<u64>,
    /// A response proved an answer lost and we already went back to `una` for it.
    rewound: bool,
    error: bool,
    scratch: Vec<u8>,
    pub stats: ReqStats,
}

/// What the requester has seen (for diagnostics: `RDMASHIM_NET_DEBUG`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReqStats {
    pub sent: u64,
    pub timeouts: u64,
    pub acks: u64,
    pub seq_naks: u64,
    /// Go-backs by the fast timer (a lost NAK or tail: no progress within a few round trips).
    pub fast_resends: u64,
    pub rnr_naks: u64,
    pub stale: u64,
}

impl Requester {
    pub fn new(cfg: &RcConfig) -> Self {
        let sq_psn = cfg.sq_psn & psn::PSN_MASK;
        Requester {
            cfg: *cfg,
            mtu: cfg.mtu(),
            sq: VecDeque::with_capacity(cfg.sq_depth as usize),
            next_psn: sq_psn,
            una: sq_psn,
            snd: sq_psn,
            sent_hi: sq_psn,
            timer: None,
            cwnd: cfg.window.max(1),
            ssthresh: cfg.window.max(1),
            probe: None,
            srtt: None,
            timed: None,
            fast: None,
            fast_backoff: 0,
            retries: cfg.retry_cnt,
            heard: false,
            waited: 0,
            rnr_left: cfg.rnr_retry,
            rnr_wait: None,
            rewound: false,
            error: false,
            scratch: vec![0; cfg.mtu() as usize],
            stats: ReqStats::default(),
        }
    }

    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }
    pub fn transport(&self) -> Transport {
        self.cfg.transport
    }
    pub fn is_error(&self) -> bool {
        self.error
    }
    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.sq.len()
    }

    /// Queues a work request. In the error state it completes at once with `WrFlushErr`.
    pub fn post(&mut self, wr: SendWr, out: &mut impl Sink) -> Result<(), PostError> {
        if wr.op.is_atomic() && wr.len != 8 {
            return Err(PostError::Invalid);
        }
        if self.cfg.transport == Transport::Uc
            && (wr.op.is_rd_atomic() || matches!(wr.op, WrOp::SendInv(_)))
        {
            return Err(PostError::Invalid); // UC has no READ, atomics or SEND with invalidate
        }
        if self.error {
            out.completion(Completion::send(wr.wr_id, Status::WrFlushErr, wr.op.wc_opcode(), 0));
            return Ok(());
        }
        let npkts = if wr.op.is_atomic() { 1 } else { wr.len.div_ceil(self.mtu).max(1) };
        if npkts >= MAX_SPAN as u32 {
            return Err(PostError::Invalid); // more PSNs than the comparable window
        }
        let span = psn::diff(psn::add(self.next_psn, npkts), self.una);
        if self.sq.len() >= self.cfg.sq_depth as usize || !(0..MAX_SPAN).contains(&span) {
            return Err(PostError::QueueFull);
        }
        self.sq.push_back(Wqe { wr, first: self.next_psn, npkts, acked: 0 });
        self.next_psn = psn::add(self.next_psn, npkts);
        Ok(())
    }

    /// When [`Requester::poll`] next has work of its own.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.error {
            return None;
        }
        self.rnr_wait.or(match (self.timer, self.fast) {
            (Some(t), Some(f)) => Some(t.min(f)),
            (t, f) => t.or(f),
        })
    }

    /// Resends one packet (`una`) and waits for its answer: the window shrinks to it and half
    /// of it becomes `ssthresh`, both given back if the probe proves nothing was lost.
    fn start_probe(&mut self) {
        let before = self.probe.map_or((self.cwnd, self.ssthresh), |p| (p.cwnd, p.ssthresh));
        self.ssthresh = (self.limit() / 2).max(MIN_CWND);
        self.cwnd = 1;
        self.probe = Some(Probe { psn: self.una, cwnd: before.0, ssthresh: before.1 });
    }

    /// Whether the fast timer may probe now: while the oldest unfinished request is a READ or
    /// an atomic, once per stretch without progress. Probing one asks again for everything not
    /// yet answered, so a responder still sending a long READ's answers (only paused) sends
    /// them all a second time; probing again as the copies came in, stale, set off a flood that
    /// overran the socket buffers (perftest's `ib_read_bw -a` across namespaces). Once is
    /// enough for what it is for: a lost request, or a lost last answer.
    fn fast_applies(&self) -> bool {
        self.fast_backoff == 0 || !self.head_is_rd_atomic()
    }

    fn head_is_rd_atomic(&self) -> bool {
        self.sq.iter().find(|w| !w.done()).is_some_and(|w| w.wr.op.is_rd_atomic())
    }

    /// See the IB timer in `poll`: answers to a READ or atomic at the head are still arriving.
    fn answers_still_coming(&self) -> bool {
        self.heard && self.head_is_rd_atomic() && self.waited <= self.cfg.retry_cnt
    }

    /// The fast retransmission interval: four smoothed round trips, at least `FAST_MIN`, at
    /// most half the IB timeout, doubled per fast resend without progress. `None` before the
    /// first round trip is measured, or with no IB timeout (no retransmission at all).
    fn fast_interval(&self) -> Option<u64> {
        let ib = ack_timeout_ns(self.cfg.timeout)?;
        let mut base = self.srtt?.saturating_mul(4).max(FAST_MIN);
        // A READ's answers come only as fast as the responder sends them: allow for those still
        // due (a 4 MiB READ gets half the IB timeout; a few packets, a millisecond or so).
        if let Some(w) = self.sq.iter().find(|w| !w.done()).filter(|w| w.wr.op == WrOp::Read) {
            base = base.saturating_add(u64::from(w.npkts.saturating_sub(w.acked)) * READ_ANSWER_NS);
        }
        Some(base.saturating_mul(1 << self.fast_backoff.min(16)).min(ib / 2))
    }

    /// Runs the timers at `now`, then transmits what the window allows.
    pub fn poll(&mut self, now: u64, mem: &mut impl Memory, out: &mut impl Sink) {
        if self.error {
            return;
        }
        if let Some(t) = self.rnr_wait {
            if now < t {
                return;
            }
            self.rnr_wait = None;
            self.snd = self.una;
        }
        if let Some(t) = self.timer {
            if now >= t && self.answers_still_coming() {
                // The oldest request is a READ (or atomic) and the responder is still sending:
                // our answers wait behind others in the socket. Asking again would only add a
                // whole READ's worth of answers to that queue (on a busy host the queue then
                // grew faster than it drained: ib_read_bw -a across namespaces). Wait one more
                // timeout, a bounded number of times, so a peer sending only stale answers
                // still ends in RETRY_EXC_ERR.
                self.waited += 1;
                self.heard = false;
                self.timer = ack_timeout_ns(self.cfg.timeout).map(|t| now.saturating_add(t));
                self.fast = None;
            } else if now >= t {
                self.timer = None;
                if self.retries == 0 {
                    self.fail(Status::RetryExcErr, out);
                    return;
                }
                self.retries -= 1;
                self.stats.timeouts += 1;
                self.timed = None;
                self.snd = self.una;
                self.start_probe();
            }
        }
        if let Some(f) = self.fast {
            if now >= f && !self.fast_applies() {
                self.fast = None;
            } else if now >= f && self.una != self.sent_hi && self.rnr_wait.is_none() {
                // No progress for a few round trips: a NAK or the last packets were lost (the
                // responder drops what follows a gap silently once it has NAKed), or the
                // receiver is only slow. Probe as a timeout does (one packet, then the window
                // reopens; a spurious probe resumes where sending was), without waiting for
                // the IB timeout and without spending a retry: the budget is the IB timer's.
                self.stats.fast_resends += 1;
                self.snd = self.una;
                self.timed = None;
                self.start_probe();
                self.fast_backoff += 1;
                self.fast = self.fast_interval().map(|i| now.saturating_add(i));
            }
        }
        self.transmit(now, mem, out);
    }

    /// Transmits what the window allows without running the timers: after a packet or a post,
    /// when responses may still wait unread (timers run in [`Requester::poll`], which the
    /// link calls after reading what has arrived).
    pub fn send_more(&mut self, now: u64, mem: &mut impl Memory, out: &mut impl Sink) {
        if self.error || self.rnr_wait.is_some() {
            return;
        }
        self.transmit(now, mem, out);
    }

    /// Packets that may be in flight beyond `una` now.
    fn limit(&self) -> u32 {
        self.cfg.window.max(1).min(self.cwnd.max(1))
    }

    fn transmit(&mut self, now: u64, mem: &mut impl Memory, out: &mut impl Sink) {
        while !self.error && self.snd != self.next_psn {
            let ahead = psn::diff(self.snd, self.una);
            if ahead < 0 {
                self.snd = self.una;
                continue;
            }
            if ahead as u32 >= self.limit() {
                break;
            }
            // The queue's PSN ranges are consecutive and ascending, so the request holding
            // `snd` is found by bisection: a long queue of small sends is not walked per packet.
            let snd = self.snd;
            let i = self.sq.partition_point(|w| psn::diff(snd, w.first) >= w.npkts as i32);
            let Some(&w) = self.sq.get(i).filter(|w| psn::in_range(snd, w.first, w.npkts)) else {
                break;
            };
            if w.wr.op.is_rd_atomic() {
                let busy = self.sq.iter().take(i).filter(|x| x.wr.op.is_rd_atomic() && !x.done());
                if busy.count() >= usize::from(self.cfg.max_rd_atomic.max(1)) {
                    break;
                }
            }
            let k = psn::diff(self.snd, w.first) as u32;
            let first_time = psn::diff(self.snd, self.sent_hi) >= 0;
            if !self.send_packet(&w, k, mem, out) {
                return;
            }
            if first_time && self.timed.is_none() {
                self.timed = Some((self.snd, now));
            }
            self.stats.sent += 1;
            self.snd = if w.wr.op == WrOp::Read {
                psn::add(w.first, w.npkts)
            } else {
                psn::add(self.snd, 1)
            };
            if psn::diff(self.snd, self.sent_hi) > 0 {
                self.sent_hi = self.snd;
            }
            if self.cfg.transport == Transport::Uc {
                // Nothing answers UC: a packet out is a packet done (and its request complete
                // after its last one), and no timer runs.
                self.timed = None;
                self.ack_through(psn::prev(self.snd), now, out);
                continue;
            }
            if self.timer.is_none() {
                self.timer = ack_timeout_ns(self.cfg.timeout).map(|t| now.saturating_add(t));
            }
            if self.fast.is_none() && self.fast_applies() {
                self.fast = self.fast_interval().map(|i| now.saturating_add(i));
            }
        }
    }

    /// Emits packet `k` of `w` (for a READ: the request for what is missing from packet `k`).
    fn send_packet(&mut self, w: &Wqe, k: u32, mem: &mut impl Memory, out: &mut impl Sink) -> bool {
        let p = psn::add(w.first, k);
        let dest = self.cfg.dest_qpn;
        let off = u64::from(k) * u64::from(self.mtu);
        let pos = match (k == 0, k + 1 == w.npkts) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        };
        let ends = matches!(pos, Position::Last | Position::Only);
        let mut pkt = Packet::new(0, dest, p, &[]);
        let t = self.cfg.transport;
        if t == Transport::Xrc {
            pkt.ext.xrc = Some(XrcEth::new(w.wr.xrc_srqn));
        }
        match w.wr.op {
            WrOp::Read => {
                pkt.bth.set_opcode(t.base() | op::READ_REQUEST);
                let va = w.wr.remote_va.wrapping_add(off);
                pkt.ext.reth = Some(Reth::new(va, w.wr.rkey, w.wr.len - off as u32));
                pkt.bth.set_ack_req(true);
                out.packet(&pkt);
                return true;
            }
            WrOp::CmpSwap { compare, swap } => {
                pkt.bth.set_opcode(t.base() | op::CMP_SWAP);
                pkt.ext.atomic = Some(AtomicEth::new(w.wr.remote_va, w.wr.rkey, swap, compare));
            }
            WrOp::FetchAdd { add } => {
                pkt.bth.set_opcode(t.base() | op::FETCH_ADD);
                pkt.ext.atomic = Some(AtomicEth::new(w.wr.remote_va, w.wr.rkey, add, 0));
            }
            o => {
                let n = (u64::from(w.wr.len) - off).min(u64::from(self.mtu)) as usize;
                // A zero-length message names no local memory.
                if n > 0 && mem.read_local(w.wr.sgl, off, &mut self.scratch[..n]).is_err() {
                    self.fail(Status::LocProtErr, out);
                    return false;
                }
                let is_send = matches!(o, WrOp::Send | WrOp::SendImm(_) | WrOp::SendInv(_));
                // Immediate data and invalidate ride on the last packet only.
                let (extra, imm, inv) = match (ends, o) {
                    (true, WrOp::SendImm(i) | WrOp::WriteImm(i)) => (Extra::Imm, Some(i), None),
                    (true, WrOp::SendInv(r)) => (Extra::Inv, None, Some(r)),
                    _ => (Extra::None, None, None),
                };
                let code = if is_send {
                    opcode::send_opcode(t, pos, extra)
                } else {
                    opcode::write_opcode(t, pos, extra == Extra::Imm)
                };
                let Some(code) = code else {
                    // Every (position, extra) pair built above has an opcode.
                    self.fail(Status::LocProtErr, out);
                    return false;
                };
                pkt.bth.set_opcode(code);
                let info = pkt.info();
                if info.is_some_and(|i| i.has(opcode::Ext::Reth)) {
                    pkt.ext.reth = Some(Reth::new(w.wr.remote_va, w.wr.rkey, w.wr.len));
                }
                if info.is_some_and(|i| i.has(opcode::Ext::ImmDt)) {
                    pkt.ext.imm = imm.map(ImmDt::new);
                }
                if info.is_some_and(|i| i.has(opcode::Ext::Ieth)) {
                    pkt.ext.ieth = inv.map(Ieth::new);
                }
                pkt.bth.set_se(ends && w.wr.solicited);
                let every = self.cfg.ack_every.max(1);
                // Also at the window's edge: nothing more goes out until this is ACKed.
                let edge = psn::diff(p, self.una) + 1 >= self.limit() as i32;
                let ask = ends || edge || (k + 1) % every == 0;
                pkt.bth.set_ack_req(ask && self.cfg.transport != Transport::Uc);
                pkt.payload = &self.scratch[..n];
                out.packet(&pkt);
                return true;
            }
        }
        pkt.bth.set_ack_req(true);
        out.packet(&pkt);
        true
    }
}
