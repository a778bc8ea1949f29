//! The RC data path over a provider link: segmenting requests into the ring, writing READ and
//! atomic responses and NAKs, completions in posting order, and the RNR and transport timers.
//! Executing what the peer wrote (requests, responses, NAKs) is in `rc_recv.rs`.
//!
//! Acknowledgement is the ring itself: a request is acknowledged once the responder has consumed
//! its last segment (the ring tail passed it). A responder that refuses a request writes the NAK
//! *before* consuming it, so a requester never sees the tail pass a failed request without its
//! NAK already in the opposite ring.

use super::link::Link;
use super::qp::{Inner, SoftQp};
use super::ring::*;
use super::segcheck::Open;
use crate::provider::{
    AccessError, Completion, KeySpace, MemoryKeys, Payload, QpState, RecvWqe, Region, SendWqe, Sgl,
};
use crate::runtime::engine::engine;
use crate::sys::*;
use std::time::{Duration, Instant};

use ibv_wc_status::*;
use ibv_wr_opcode::*;

/// A request written to the ring and not yet completed.
pub struct Inflight {
    pub wr_id: u64,
    pub seq: u64,
    pub signaled: bool,
    pub wc_opcode: u32,
    pub len: u32,
    /// Ring sequence numbers of the request's first segment and just past its last.
    pub start_seq: u64,
    pub end_seq: u64,
    /// The responder has no receive for it (RNR NAK): when the retries run out.
    pub rnr_deadline: Option<Instant>,
    /// READ and atomics complete on their response, the others on acknowledgement.
    pub awaits_response: bool,
    pub done: bool,
    pub error: Option<u32>,
    /// Where READ and atomic results go.
    pub local: Option<Sgl>,
    /// The results could not be placed (a local region deregistered since the post): the
    /// request fails with this once its response is in.
    pub local_error: Option<u32>,
    pub resp_off: u64,
    /// Written to a capture (`ring_capture`): the PSNs its response is on.
    pub captured: Option<(u32, u32)>,
}

/// A request message being received across several segments, with what was validated at its
/// first segment (`open`): later segments land relative to that, never where their header says.
pub enum InMsg {
    Recv {
        wqe: RecvWqe,
        status: u32,
        open: Open,
    },
    /// `gate` is the checked region's (None for a zero-length write): each segment lands
    /// inside it.
    Write {
        base: u64,
        gate: Option<Region>,
        open: Open,
    },
    /// UC: a message the responder drops (no receive, or refused), segment by segment.
    Discard {
        open: Open,
    },
}

impl InMsg {
    pub fn open(&self) -> Open {
        match self {
            InMsg::Recv { open, .. } | InMsg::Write { open, .. } | InMsg::Discard { open } => *open,
        }
    }
}

/// Responses the responder still has to write (the ring was full).
pub enum RespJob {
    Read {
        req_seq: u64,
        addr: u64,
        len: u64,
        off: u64,
        /// The checked region's gate (None for a zero-length READ): each slot is read inside it.
        gate: Option<Region>,
    },
    Atomic {
        req_seq: u64,
        value: u64,
    },
    /// A refused request: once the NAK is written, the responder QP moves to ERR.
    Nak {
        req_seq: u64,
        status: u32,
    },
}

pub(super) fn status_of(e: AccessError) -> u32 {
    match e {
        AccessError::Protection | AccessError::Access => IBV_WC_REM_ACCESS_ERR,
    }
}

impl SoftQp {
    /// Writes queued responses, then queued requests, while the ring has room.
    pub(super) fn push_sends(&self, st: &mut Inner) -> bool {
        if st.sq.is_empty() && st.responses.is_empty() {
            return false; // the common poll: no hold taken on the link
        }
        let Some(link) = st.link.clone() else { return false };
        let mut wrote = self.push_responses(st, &link);
        if st.state != QpState::Rts || !st.responses.is_empty() {
            return wrote;
        }
        let ring = &link.out;
        while let Some(w) = st.sq.front() {
            if st.pushed == 0 && w.is_local() {
                wrote = true;
                if !self.complete_local(st) {
                    return wrote; // its error completion failed the QP
                }
                continue;
            }
            if st.pushed == 0 {
                if let Payload::Sges(sgl) = &w.payload {
                    // A SEND or WRITE of one entry and one segment is checked as its bytes
                    // are taken (`take_out`, on the ring or the direct path), before any of it
                    // is published: a check now would look the key up twice.
                    let checked_when_taken =
                        !w.awaits_response() && sgl.len() == 1 && w.len <= SEG_DATA as u64;
                    if !checked_when_taken && self.check_local(sgl, w.local_access()).is_err() {
                        self.fail_front(st, IBV_WC_LOC_PROT_ERR);
                        return wrote;
                    }
                }
            }
            // Nothing of ours outstanding (RC order holds): the request may execute directly.
            if st.pushed == 0 && st.inflight.is_empty() && self.try_direct(st, &link) {
                continue;
            }
            // A stream of one-sided requests that went to the ring (the grant came after its
            // first requests) would never find the ring empty again: the next one waits for
            // the ring to drain, then goes direct, and so do the ones after it.
            if st.pushed == 0 && self.direct_after_drain(st, &link) {
                return wrote;
            }
            let w = st.sq.front().expect("front exists");
            // At most max_rd_atomic READ/atomic requests outstanding: later ones wait, as on
            // real hardware (the post does not fail).
            if w.awaits_response() && st.pushed == 0 {
                let outstanding = st.inflight.iter().filter(|f| f.awaits_response).count();
                if outstanding >= st.attr.max_rd_atomic.max(1) as usize {
                    return wrote;
                }
            }
            let op = match w.opcode {
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV => OP_SEND,
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => OP_WRITE,
                IBV_WR_RDMA_READ => OP_READ_REQ,
                IBV_WR_ATOMIC_CMP_AND_SWP => OP_CMP_SWAP,
                _ => OP_FETCH_ADD,
            };
            // READ and atomic requests carry no payload: one segment.
            let data_len = if w.awaits_response() { 0 } else { w.len };
            loop {
                if ring.free() == 0 {
                    return wrote;
                }
                let off = st.pushed;
                let n = (data_len - off).min(SEG_DATA as u64);
                let mut flags = 0;
                if off == 0 {
                    flags |= SEG_FIRST;
                }
                if off + n == data_len {
                    flags |= SEG_LAST;
                }
                if w.imm.is_some() {
                    flags |= SEG_IMM;
                }
                let inv = w.opcode == IBV_WR_SEND_WITH_INV;
                if inv {
                    flags |= SEG_INV;
                }
                // Only requests that consume a receive carry the solicited event.
                if w.solicited && (op == OP_SEND || w.imm.is_some()) {
                    flags |= SEG_SOLICITED;
                }
                let h = SegHdr {
                    msg_len: w.len as u32,
                    seg_len: n as u32,
                    flags,
                    opcode: op,
                    // SEND with invalidate: the rkey to invalidate rides where an immediate would.
                    imm: if inv { w.rkey } else { w.imm.unwrap_or(0) },
                    rkey: w.rkey,
                    remote_addr: w.remote_addr.wrapping_add(off),
                    compare_add: w.compare_add,
                    swap: w.swap,
                    req_seq: 0,
                    xrc_srqn: w.xrc_srqn,
                    seal: 0,
                };
                let (hp, data) = ring.slot(ring.head());
                // SAFETY: the producer owns the free slot at head; SEG_DATA bytes follow the
                // header, and n <= SEG_DATA of the payload remain from off.
                let taken = unsafe {
                    hp.write_volatile(h);
                    super::sgl_copy::take_out(&*self.keys, &w.payload, off, data, n as usize)
                };
                if taken.is_err() {
                    // Its MR is not registered (a bad key, or deregistered since the request
                    // started): the slot is not published, the request fails and the QP with
                    // it (a receiver that has the message's first segments keeps its receive
                    // until the connection ends, as on an InfiniBand link whose requester
                    // stops mid-message).
                    self.fail_front(st, IBV_WC_LOC_PROT_ERR);
                    return wrote;
                }
                ring.seal_and_publish();
                wrote = true;
                st.pushed = off + n;
                if st.pushed == data_len {
                    break;
                }
            }
            st.pushed = 0;
            let end = ring.head();
            let start = end.wrapping_sub(message_slots(data_len as u32));
            let mut f = self.retire_front(st, data_len, start, end);
            f.done = self.uc; // UC: complete once sent, acknowledged by nobody
            st.inflight.push_back(f);
        }
        wrote
    }

    /// Fails the front request of the send queue (none of it, or only its first segments,
    /// pushed) with `status`; the QP goes to ERR.
    fn fail_front(&self, st: &mut Inner, status: u32) {
        let w = st.sq.pop_front().expect("front exists");
        st.pushed = 0;
        self.error_completion(st, w.wr_id, w.seq, status, w.wc_opcode());
    }

    /// The record of a request written to the ring as slots `[start_seq, end_seq)`.
    pub(super) fn inflight(&self, mut w: SendWqe, start_seq: u64, end_seq: u64) -> Inflight {
        self.record(&mut w, start_seq, end_seq)
    }

    /// [`SoftQp::inflight`] for the front of the send queue, which it leaves, with its capture
    /// if one is written (`data_len`: the bytes it carried). Built in place on the fast path:
    /// a `SendWqe` is large (its inline data), and moving it out of the queue costs a copy and
    /// a read stalled behind it, on every message.
    pub(super) fn retire_front(
        &self,
        st: &mut Inner,
        data_len: u64,
        start_seq: u64,
        end_seq: u64,
    ) -> Inflight {
        if super::ring_capture::on() {
            let w = st.sq.pop_front().expect("front exists");
            let captured = self.capture(st, &w, data_len);
            let mut f = self.inflight(w, start_seq, end_seq);
            f.captured = captured;
            return f;
        }
        let f = self.record(st.sq.front_mut().expect("front exists"), start_seq, end_seq);
        st.sq.drain(..1); // dropped where it lies
        f
    }

    /// The record of request `w`; a READ's or atomic's scatter list moves into it.
    fn record(&self, w: &mut SendWqe, start_seq: u64, end_seq: u64) -> Inflight {
        let awaits = w.awaits_response();
        Inflight {
            wr_id: w.wr_id,
            seq: w.seq,
            signaled: w.signaled || self.sq_sig_all,
            wc_opcode: w.wc_opcode(),
            len: w.len as u32,
            start_seq,
            end_seq,
            rnr_deadline: None,
            awaits_response: awaits,
            done: false,
            error: None,
            local: match &mut w.payload {
                Payload::Sges(s) if awaits => Some(std::mem::replace(s, Sgl::empty())),
                _ => None,
            },
            local_error: None,
            resp_off: 0,
            captured: None,
        }
    }

    /// Writes queued READ and atomic responses and NAKs; after a NAK the QP is in ERR.
    pub(super) fn push_responses(&self, st: &mut Inner, link: &Link) -> bool {
        let ring = &link.out;
        let mut wrote = false;
        let mut nak = None;
        while let Some(job) = st.responses.front_mut() {
            if ring.free() == 0 {
                break;
            }
            let (hp, data) = ring.slot(ring.head());
            // A READ's region: its bytes are copied inside the gate, or, deregistered since the
            // request was checked, the rest of the response is refused.
            let gate = match job {
                RespJob::Read { gate, .. } => gate.clone(),
                _ => None,
            };
            let Ok(_inside) = crate::provider::gate::enter_if(gate.as_deref()) else {
                if let RespJob::Read { req_seq, .. } = *job {
                    *job = RespJob::Nak { req_seq, status: IBV_WC_REM_ACCESS_ERR };
                }
                continue;
            };
            match job {
                RespJob::Read { req_seq, addr, len, off, .. } => {
                    let n = (*len - *off).min(SEG_DATA as u64);
                    let mut flags = 0;
                    if *off == 0 {
                        flags |= SEG_FIRST;
                    }
                    if *off + n == *len {
                        flags |= SEG_LAST;
                    }
                    let h = SegHdr {
                        msg_len: *len as u32,
                        seg_len: n as u32,
                        flags,
                        opcode: OP_READ_RESP,
                        req_seq: *req_seq,
                        ..SegHdr::default()
                    };
                    // SAFETY: free slot owned by the producer; the source range was checked
                    // against the region when the request arrived, and the region stays
                    // registered until we leave its gate (`_inside`).
                    unsafe {
                        hp.write_volatile(h);
                        std::ptr::copy_nonoverlapping(
                            (*addr + *off) as *const u8,
                            data,
                            n as usize,
                        );
                    }
                    *off += n;
                    ring.seal_and_publish();
                    wrote = true;
                    if *off < *len {
                        continue;
                    }
                }
                RespJob::Atomic { req_seq, value } => {
                    let h = SegHdr {
                        msg_len: 8,
                        seg_len: 8,
                        flags: SEG_FIRST | SEG_LAST,
                        opcode: OP_ATOMIC_RESP,
                        req_seq: *req_seq,
                        ..SegHdr::default()
                    };
                    // SAFETY: free slot owned by the producer, at least 8 payload bytes.
                    unsafe {
                        hp.write_volatile(h);
                        data.cast::<u64>().write_unaligned(*value);
                    }
                    ring.seal_and_publish();
                    wrote = true;
                }
                RespJob::Nak { req_seq, status } => {
                    let h = SegHdr {
                        flags: SEG_FIRST | SEG_LAST,
                        opcode: OP_NAK,
                        req_seq: *req_seq,
                        imm: *status, // a NAK carries its status where a request's immediate is
                        ..SegHdr::default()
                    };
                    // SAFETY: free slot owned by the producer.
                    unsafe { hp.write_volatile(h) };
                    ring.seal_and_publish();
                    wrote = true;
                    nak = Some(*status);
                    st.responses.pop_front();
                    break;
                }
            }
            st.responses.pop_front();
        }
        if let Some(status) = nak {
            link.notify_peer();
            self.responder_error(st, status);
        }
        wrote
    }

    /// Checks that every entry lies in a region of our PD with `need` rights.
    pub(super) fn check_local(&self, sgl: &Sgl, need: u32) -> Result<(), AccessError> {
        check_local(&*self.keys, sgl, need)
    }

    /// Completes requests in posting order: acknowledged ones up to `tail`, READ and atomics
    /// once their response is in, a NAKed one with its error (and the QP goes to ERR).
    pub(super) fn reap(&self, st: &mut Inner, tail: u64) -> bool {
        let mut did = false;
        while let Some(f) = st.inflight.front() {
            if let Some(status) = f.error {
                let f = st.inflight.pop_front().expect("front exists");
                self.capture_response(st, &f, Some(status));
                self.error_completion(st, f.wr_id, f.seq, status, f.wc_opcode);
                return true;
            }
            let complete = f.done || (!f.awaits_response && f.end_seq <= tail);
            if !complete {
                break;
            }
            let f = st.inflight.pop_front().expect("front exists");
            self.capture_response(st, &f, None);
            did = true;
            if f.signaled {
                self.send_cq.push(Completion {
                    wr_id: f.wr_id,
                    status: IBV_WC_SUCCESS,
                    opcode: f.wc_opcode,
                    byte_len: f.len,
                    qp_num: self.qpn,
                    sq_seq: f.seq,
                    ..Completion::default()
                });
            }
        }
        did
    }

    /// The peer's QP is gone: requests it never took fail as a real RC QP does after retries.
    fn fail_unreachable(&self, st: &mut Inner) {
        if st.state == QpState::Err {
            return;
        }
        let (wr_id, op, seq) = if let Some(f) = st.inflight.pop_front() {
            (f.wr_id, f.wc_opcode, f.seq)
        } else if let Some(w) = st.sq.pop_front() {
            (w.wr_id, w.wc_opcode(), w.seq)
        } else {
            return;
        };
        st.pushed = 0;
        self.error_completion(st, wr_id, seq, IBV_WC_RETRY_EXC_ERR, op);
    }

    /// One pass of the data path for this QP. Callable from any thread.
    pub fn progress_now(&self) -> bool {
        self.note_app_progress();
        if self.ud {
            return self.progress_ud();
        }
        let mut st = self.lock_state();
        if st.net.is_some() {
            // A polling application reads the socket itself (no wait for the progress thread);
            // packets go to QPs under their locks, so ours is not held meanwhile.
            drop(st);
            let got = super::net::recv::drain_for_app(&self.udp);
            let mut st = self.lock_state();
            let moved = self.progress_net(&mut st) | got;
            // An application with nothing left to complete here that polls no more (it may
            // wait for an RDMA WRITE by spinning on memory, as ib_write_lat does) must have
            // its packets read by the progress thread at once.
            let expects = self.srq.is_some()
                || !st.rq.is_empty()
                || st.net.as_ref().is_some_and(|n| n.busy());
            // ACKs it kept back wait for its answer still; the progress thread sends them when
            // they are due (`acks_due`).
            drop(st);
            if !expects {
                super::net::recv::app_done(&self.udp);
            }
            return moved;
        }
        let tail = st.link.as_ref().map_or(0, |l| l.out.tail());
        let mut did = self.consume(&mut st);
        did |= self.reap(&mut st, tail);
        let wrote = self.push_sends(&mut st);
        if wrote {
            if let Some(l) = &st.link {
                l.notify_peer();
            }
        }
        did |= wrote;
        did |= self.run_timers(&mut st);
        did
    }

    /// RNR retries and transport retries against a peer that is gone, in virtual time: the
    /// deadlines the IB timers would reach (`min_rnr_timer` × (`rnr_retry` + 1), 7 = forever;
    /// 4.096 µs × 2^`timeout` × (`retry_cnt` + 1), timeout 0 = forever).
    fn run_timers(&self, st: &mut Inner) -> bool {
        if st.state != QpState::Rts {
            return false;
        }
        if self.uc {
            // No retries on UC: what a gone peer cannot take is sent into the void.
            let gone = st.peer_gone || st.link.as_ref().is_some_and(|l| l.inn.is_closed());
            return gone && self.drop_unsent(st);
        }
        let Some(link) = st.link.as_ref() else {
            // Not connected (the peer QP is gone, or never reached RTR): queued requests time out
            // as unanswered packets would.
            return !st.sq.is_empty() && self.retry_expired(st);
        };
        let rnr = link.out.rnr();
        if rnr.is_none() && !st.peer_gone && !link.inn.is_closed() {
            return false; // the common poll: no hold taken on the link
        }
        let link = link.clone();
        if let Some((seq, timer)) = rnr {
            let now = Instant::now(); // only here: a clock read per poll costs message rate
            let rnr_retry = st.attr.rnr_retry;
            if let Some(f) =
                st.inflight.iter_mut().find(|f| f.start_seq == seq && f.error.is_none())
            {
                if rnr_retry < 7 {
                    let deadline = *f
                        .rnr_deadline
                        .get_or_insert_with(|| now + rnr_delay(timer) * (rnr_retry as u32 + 1));
                    if now >= deadline {
                        f.error = Some(IBV_WC_RNR_RETRY_EXC_ERR);
                        let t = link.out.tail();
                        return self.reap(st, t);
                    }
                    if let Ok(e) = engine() {
                        e.wake_at(deadline);
                    }
                }
            }
        }
        let peer_closed = link.inn.is_closed();
        if st.peer_gone || peer_closed {
            let tail = link.out.tail();
            let settled = st.sq.is_empty()
                && st.inflight.iter().all(|f| !f.awaits_response && f.end_seq <= tail);
            if !settled {
                return self.retry_expired(st);
            }
        }
        false
    }

    /// UC towards a peer that is gone: the requests not yet written complete as sent.
    fn drop_unsent(&self, st: &mut Inner) -> bool {
        if st.sq.is_empty() {
            return false;
        }
        st.pushed = 0;
        while let Some(w) = st.sq.pop_front() {
            let mut f = self.inflight(w, 0, 0);
            f.done = true;
            st.inflight.push_back(f);
        }
        self.reap(st, 0)
    }

    /// The peer stopped answering: fails the oldest request once the transport retries are
    /// used up.
    fn retry_expired(&self, st: &mut Inner) -> bool {
        let timeout = st.attr.timeout;
        if timeout == 0 {
            return false; // infinite
        }
        let budget =
            Duration::from_nanos(4096u64 << timeout.min(31)) * (st.attr.retry_cnt as u32 + 1);
        let deadline = *st.retry_deadline.get_or_insert_with(|| Instant::now() + budget);
        if Instant::now() >= deadline {
            st.retry_deadline = None;
            self.fail_unreachable(st);
            return true;
        }
        if let Ok(e) = engine() {
            e.wake_at(deadline);
        }
        false
    }
}

/// The RNR NAK delay of an encoded `min_rnr_timer` (IBA table 45).
/// Checks that every entry lies in a region of `keys` with `need` rights.
pub(super) fn check_local(keys: &dyn MemoryKeys, sgl: &Sgl, need: u32) -> Result<(), AccessError> {
    for s in sgl.as_slice() {
        if s.length == 0 {
            continue;
        }
        keys.access(s.lkey, s.addr, s.length as usize, need, KeySpace::Local, &mut |_| ())?;
    }
    Ok(())
}

pub fn rnr_delay(timer: u8) -> Duration {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    Duration::from_micros(US[(timer & 31) as usize] as u64)
}

/// Number of ring slots a message of `len` payload bytes takes.
pub fn message_slots(len: u32) -> u64 {
    (len as u64).div_ceil(SEG_DATA as u64).max(1)
}
