//! The RC data path over a provider link: segmenting requests into the ring, executing incoming
//! requests (SEND into posted receives, RDMA WRITE/READ and atomics against our memory regions,
//! checked by rkey, bounds and access), responses and NAKs, and completions in posting order.
//!
//! Acknowledgement is the ring itself: a request is acknowledged once the responder has consumed
//! its last segment (the ring tail passed it). A responder that refuses a request writes the NAK
//! *before* consuming it, so a requester never sees the tail pass a failed request without its
//! NAK already in the opposite ring.

use super::cq::Wc;
use super::mr::{self, AccessError, Mr};
use super::qp::{Qp, QpState, RecvWqe, Sgl};
use crate::provider::soft::link::Link;
use crate::provider::soft::ring::*;
use crate::sys::*;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ibv_qp_state::*;
use ibv_wc_opcode::*;
use ibv_wc_status::*;
use ibv_wr_opcode::*;

/// What a send carries.
// The inline variant is large on purpose: small inline sends are posted without allocating.
#[allow(clippy::large_enum_variant)]
pub enum Payload {
    /// Registered memory, read when the request executes (or, for READ and atomics, written).
    Sges(Sgl),
    /// Copied at post time (`IBV_SEND_INLINE`).
    Inline(InlineData),
}

/// Inline data up to this size stays inside the request: posting it allocates nothing.
const INLINE_SMALL: usize = 256;

/// The bytes of an inline send.
#[allow(clippy::large_enum_variant)] // see `Payload`
pub enum InlineData {
    Small(usize, [u8; INLINE_SMALL]),
    Large(Vec<u8>),
}

impl InlineData {
    /// Concatenates caller buffers (`EINVAL` for a NULL buffer of non-zero length or a total
    /// beyond the largest message).
    ///
    /// # Safety
    /// Every buffer is readable for its length.
    pub unsafe fn gather(
        bufs: impl Iterator<Item = (*const u8, usize)> + Clone,
    ) -> crate::Result<InlineData> {
        let total: usize = bufs.clone().map(|b| b.1).sum();
        if total > super::device::MAX_MSG as usize {
            return Err(crate::Errno::EINVAL);
        }
        let mut d = if total <= INLINE_SMALL {
            InlineData::Small(0, [0; INLINE_SMALL])
        } else {
            InlineData::Large(Vec::with_capacity(total))
        };
        for (p, n) in bufs {
            if n == 0 {
                continue;
            }
            if p.is_null() {
                return Err(crate::Errno::EINVAL);
            }
            // SAFETY: per the function's contract.
            let src = unsafe { std::slice::from_raw_parts(p, n) };
            match &mut d {
                InlineData::Small(len, buf) => {
                    buf[*len..*len + n].copy_from_slice(src);
                    *len += n;
                }
                InlineData::Large(v) => v.extend_from_slice(src),
            }
        }
        Ok(d)
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            InlineData::Small(len, buf) => &buf[..*len],
            InlineData::Large(v) => v,
        }
    }
}

/// A posted send-queue request.
pub struct SendWqe {
    pub wr_id: u64,
    pub opcode: u32,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: Option<u32>,
    pub payload: Payload,
    pub len: u64,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// UD destination (`wr.ud`).
    pub ud: Option<super::ud::UdDest>,
    /// Send queue position, assigned by `Qp::post_send`.
    pub seq: u64,
}

impl SendWqe {
    pub fn wc_opcode(&self) -> u32 {
        match self.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
            IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
            IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
            IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
            _ => IBV_WC_SEND,
        }
    }

    fn awaits_response(&self) -> bool {
        matches!(
            self.opcode,
            IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        )
    }

    /// Rights the local buffers need: READ and atomics write their result there.
    fn local_access(&self) -> u32 {
        if self.awaits_response() {
            mr::ACCESS_LOCAL_WRITE
        } else {
            0
        }
    }
}

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
    pub resp_off: u64,
}

/// A message being received across several segments.
pub enum InMsg {
    Recv {
        wqe: RecvWqe,
        off: u64,
        status: u32,
    },
    /// `mr` is None for a zero-length write; `refused` writes are skipped (already NAKed).
    Write {
        base: u64,
        mr: Option<Arc<Mr>>,
        refused: bool,
    },
}

/// Responses the responder still has to write (the ring was full).
pub enum RespJob {
    Read { req_seq: u64, addr: u64, len: u64, off: u64, _mr: Option<Arc<Mr>> },
    Atomic { req_seq: u64, value: u64 },
}

fn status_of(e: AccessError) -> u32 {
    match e {
        AccessError::Protection | AccessError::Access => IBV_WC_REM_ACCESS_ERR,
    }
}

impl Qp {
    /// Writes queued responses, then queued requests, while the ring has room.
    pub(super) fn push_sends(&self, st: &mut QpState) -> bool {
        let Some(link) = st.link.clone() else { return false };
        let mut wrote = self.push_responses(st, &link);
        if st.state != IBV_QPS_RTS || !st.responses.is_empty() {
            return wrote;
        }
        let ring = link.out;
        while let Some(w) = st.sq.front() {
            if st.pushed == 0 {
                if let Payload::Sges(sgl) = &w.payload {
                    if self.check_local(sgl, w.local_access()).is_err() {
                        let (wr_id, op, seq) = (w.wr_id, w.wc_opcode(), w.seq);
                        st.sq.pop_front();
                        self.error_completion(st, wr_id, seq, IBV_WC_LOC_PROT_ERR, op);
                        return wrote;
                    }
                }
            }
            // At most max_rd_atomic READ/atomic requests outstanding: later ones wait, as on
            // real hardware (the post does not fail).
            if w.awaits_response() && st.pushed == 0 {
                let outstanding = st.inflight.iter().filter(|f| f.awaits_response).count();
                if outstanding >= st.attr.max_rd_atomic.max(1) as usize {
                    return wrote;
                }
            }
            let op = match w.opcode {
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => OP_SEND,
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
                let h = SegHdr {
                    msg_len: w.len as u32,
                    seg_len: n as u32,
                    flags,
                    opcode: op,
                    imm: w.imm.unwrap_or(0),
                    rkey: w.rkey,
                    remote_addr: w.remote_addr.wrapping_add(off),
                    compare_add: w.compare_add,
                    swap: w.swap,
                    req_seq: 0,
                    status: 0,
                    solicited: w.solicited as u32,
                };
                let (hp, data) = ring.slot(ring.head());
                // SAFETY: the producer owns the free slot at head; SEG_DATA bytes follow the
                // header; the payload's regions were checked above.
                unsafe {
                    hp.write_volatile(h);
                    copy_out(&w.payload, off, data, n as usize);
                }
                ring.publish(1);
                wrote = true;
                st.pushed = off + n;
                if st.pushed == data_len {
                    break;
                }
            }
            let w = st.sq.pop_front().expect("front exists");
            st.pushed = 0;
            let awaits = w.awaits_response();
            st.inflight.push_back(Inflight {
                wr_id: w.wr_id,
                seq: w.seq,
                signaled: w.signaled || self.sq_sig_all,
                wc_opcode: w.wc_opcode(),
                len: w.len as u32,
                start_seq: ring.head() - message_slots(data_len as u32),
                end_seq: ring.head(),
                rnr_deadline: None,
                awaits_response: awaits,
                done: false,
                error: None,
                local: match w.payload {
                    Payload::Sges(s) if awaits => Some(s),
                    _ => None,
                },
                resp_off: 0,
            });
        }
        wrote
    }

    /// Writes queued READ and atomic responses.
    fn push_responses(&self, st: &mut QpState, link: &Link) -> bool {
        let ring = link.out;
        let mut wrote = false;
        while let Some(job) = st.responses.front_mut() {
            if ring.free() == 0 {
                break;
            }
            let (hp, data) = ring.slot(ring.head());
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
                    // against the region (kept alive by the job) when the request arrived.
                    unsafe {
                        hp.write_volatile(h);
                        std::ptr::copy_nonoverlapping(
                            (*addr + *off) as *const u8,
                            data,
                            n as usize,
                        );
                    }
                    *off += n;
                    ring.publish(1);
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
                    ring.publish(1);
                    wrote = true;
                }
            }
            st.responses.pop_front();
        }
        wrote
    }

    /// Writes a NAK now (after any queued responses); false if the ring has no room yet.
    fn nak(&self, st: &mut QpState, link: &Link, req_seq: u64, status: u32) -> bool {
        self.push_responses(st, link);
        let ring = link.out;
        if !st.responses.is_empty() || ring.free() == 0 {
            return false;
        }
        let (hp, _) = ring.slot(ring.head());
        let h = SegHdr {
            flags: SEG_FIRST | SEG_LAST,
            opcode: OP_NAK,
            req_seq,
            status,
            ..SegHdr::default()
        };
        // SAFETY: free slot owned by the producer.
        unsafe { hp.write_volatile(h) };
        ring.publish(1);
        link.notify_peer();
        true
    }

    /// Checks that every entry lies in a region of our PD with `need` rights.
    pub(super) fn check_local(&self, sgl: &Sgl, need: u32) -> Result<(), AccessError> {
        for s in sgl.as_slice() {
            if s.length == 0 {
                continue;
            }
            mr::lookup(s.lkey, &self.pd, s.addr, s.length as usize, need)?;
        }
        Ok(())
    }

    /// A remote access: the QP must allow it and the region must cover it with `need`.
    fn check_remote(
        &self,
        st: &QpState,
        rkey: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Option<Arc<Mr>>, u32> {
        if st.attr.qp_access_flags & need != need {
            return Err(IBV_WC_REM_INV_REQ_ERR);
        }
        if len == 0 {
            return Ok(None);
        }
        mr::lookup(rkey, &self.pd, addr, len as usize, need).map(Some).map_err(status_of)
    }

    pub(super) fn next_recv(&self, st: &mut QpState) -> Option<RecvWqe> {
        match &self.srq {
            Some(s) => s.pop(),
            None => st.rq.pop_front(),
        }
    }

    fn has_recv(&self, st: &QpState) -> bool {
        match &self.srq {
            Some(s) => !s.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
            None => !st.rq.is_empty(),
        }
    }

    fn find_inflight(st: &mut QpState, req_seq: u64) -> Option<&mut Inflight> {
        st.inflight.iter_mut().find(|f| f.end_seq == req_seq)
    }

    /// Executes incoming segments; returns whether anything was consumed.
    pub(super) fn consume(&self, st: &mut QpState) -> bool {
        let Some(link) = st.link.clone() else { return false };
        if !matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS) {
            return false;
        }
        let ring = link.inn;
        let mut consumed = false;
        while ring.available() > 0 {
            let seq = ring.tail();
            let (hp, data) = ring.slot(seq);
            // SAFETY: the slot is published (available > 0) and ours until consume().
            let h = unsafe { hp.read_volatile() };
            let n = (h.seg_len as usize).min(SEG_DATA);
            let last = h.flags & SEG_LAST != 0;
            let request = !matches!(h.opcode, OP_READ_RESP | OP_ATOMIC_RESP | OP_NAK);
            if request && st.cur_in.is_none() && ring.is_closed() {
                // The requester moved to error or is gone: it reported these requests as
                // flushed, so they must not take effect here either.
                ring.consume(1);
                consumed = true;
                continue;
            }
            match h.opcode {
                OP_SEND => {
                    if st.cur_in.is_none() {
                        if !self.has_recv(st) {
                            if let Some(srq) = &self.srq {
                                srq.starved.store(true, Ordering::Release);
                            }
                            // Receiver not ready: the message waits, and the requester sees an
                            // RNR NAK (it retries per its rnr_retry, 7 = forever).
                            ring.set_rnr(seq, st.attr.min_rnr_timer);
                            break;
                        }
                        let wqe = self.next_recv(st).expect("checked");
                        let status = if (h.msg_len as u64) > wqe.sges.total() {
                            IBV_WC_LOC_LEN_ERR
                        } else if self.check_local(&wqe.sges, mr::ACCESS_LOCAL_WRITE).is_err() {
                            IBV_WC_LOC_PROT_ERR
                        } else {
                            IBV_WC_SUCCESS
                        };
                        st.cur_in = Some(InMsg::Recv { wqe, off: 0, status });
                    }
                    let Some(InMsg::Recv { wqe, off, status }) = st.cur_in.as_mut() else { break };
                    if *status == IBV_WC_SUCCESS {
                        // SAFETY: the receive's regions were checked (local write, in bounds,
                        // room for the whole message); data holds n published bytes.
                        unsafe { copy_in(&wqe.sges, *off, data, n) };
                    }
                    *off += n as u64;
                    if last {
                        let status = *status;
                        if status != IBV_WC_SUCCESS {
                            let remote = if status == IBV_WC_LOC_LEN_ERR {
                                IBV_WC_REM_INV_REQ_ERR
                            } else {
                                IBV_WC_REM_OP_ERR
                            };
                            if !self.nak(st, &link, seq + 1, remote) {
                                break;
                            }
                        }
                        let Some(InMsg::Recv { wqe, .. }) = st.cur_in.take() else { break };
                        let mut wc = Wc {
                            wr_id: wqe.wr_id,
                            status,
                            opcode: IBV_WC_RECV,
                            byte_len: h.msg_len,
                            qp_num: self.qpn,
                            src_qp: st.attr.dest_qp_num,
                            solicited: h.solicited != 0,
                            ..Wc::default()
                        };
                        if h.flags & SEG_IMM != 0 {
                            wc.imm = h.imm;
                            wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_IMM.0;
                        }
                        ring.consume(1);
                        consumed = true;
                        self.recv_cq.push(wc);
                        if status != IBV_WC_SUCCESS {
                            self.fail(st);
                            break;
                        }
                        continue;
                    }
                }
                OP_WRITE => {
                    if h.flags & SEG_FIRST != 0 {
                        let base = h.remote_addr;
                        match self.check_remote(
                            st,
                            h.rkey,
                            base,
                            h.msg_len as u64,
                            mr::ACCESS_REMOTE_WRITE,
                        ) {
                            Ok(mr) => st.cur_in = Some(InMsg::Write { base, mr, refused: false }),
                            Err(status) => {
                                // Refused: NAK before consuming anything of it, then skip it.
                                if !self.nak(st, &link, seq + message_slots(h.msg_len), status) {
                                    break;
                                }
                                st.cur_in = Some(InMsg::Write { base, mr: None, refused: true });
                            }
                        }
                    }
                    let refused = matches!(st.cur_in, Some(InMsg::Write { refused: true, .. }));
                    if last && !refused && h.flags & SEG_IMM != 0 && !self.has_recv(st) {
                        ring.set_rnr(seq, st.attr.min_rnr_timer); // WRITE with immediate needs a receive
                        break;
                    }
                    if let Some(InMsg::Write { base, mr: Some(_), .. }) = &st.cur_in {
                        let dst = h.remote_addr;
                        debug_assert!(dst >= *base);
                        // SAFETY: [base, base+msg_len) was checked for remote write in a live
                        // region (held in cur_in); this segment lies within it.
                        unsafe { copy_last_byte_last(data, dst as *mut u8, n) };
                    }
                    if last {
                        st.cur_in = None;
                        if h.flags & SEG_IMM != 0 && !refused {
                            let wqe = self.next_recv(st).expect("checked");
                            self.recv_cq.push(Wc {
                                wr_id: wqe.wr_id,
                                status: IBV_WC_SUCCESS,
                                opcode: IBV_WC_RECV_RDMA_WITH_IMM,
                                byte_len: h.msg_len,
                                imm: h.imm,
                                wc_flags: ibv_wc_flags::IBV_WC_WITH_IMM.0,
                                qp_num: self.qpn,
                                src_qp: st.attr.dest_qp_num,
                                solicited: h.solicited != 0,
                                sq_seq: 0,
                            });
                        }
                    }
                }
                OP_READ_REQ => {
                    let len = h.msg_len as u64;
                    match self.check_remote(st, h.rkey, h.remote_addr, len, mr::ACCESS_REMOTE_READ)
                    {
                        Ok(mr) => {
                            st.responses.push_back(RespJob::Read {
                                req_seq: seq + 1,
                                addr: h.remote_addr,
                                len,
                                off: 0,
                                _mr: mr,
                            });
                        }
                        Err(status) => {
                            if !self.nak(st, &link, seq + 1, status) {
                                break;
                            }
                        }
                    }
                }
                OP_CMP_SWAP | OP_FETCH_ADD => {
                    let r = if h.remote_addr % 8 != 0 {
                        Err(IBV_WC_REM_INV_REQ_ERR)
                    } else {
                        self.check_remote(st, h.rkey, h.remote_addr, 8, mr::ACCESS_REMOTE_ATOMIC)
                    };
                    match r {
                        Ok(_mr) => {
                            // SAFETY: 8 aligned bytes inside a live region with atomic access.
                            let cell = unsafe { AtomicU64::from_ptr(h.remote_addr as *mut u64) };
                            let value = if h.opcode == OP_CMP_SWAP {
                                match cell.compare_exchange(
                                    h.compare_add,
                                    h.swap,
                                    Ordering::SeqCst,
                                    Ordering::SeqCst,
                                ) {
                                    Ok(v) | Err(v) => v,
                                }
                            } else {
                                cell.fetch_add(h.compare_add, Ordering::SeqCst)
                            };
                            st.responses.push_back(RespJob::Atomic { req_seq: seq + 1, value });
                        }
                        Err(status) => {
                            if !self.nak(st, &link, seq + 1, status) {
                                break;
                            }
                        }
                    }
                }
                OP_READ_RESP | OP_ATOMIC_RESP => {
                    if let Some(f) = Self::find_inflight(st, h.req_seq) {
                        if let Some(local) = &f.local {
                            // SAFETY: the local buffers were checked for local write when the
                            // request was sent; the response never exceeds the request length.
                            unsafe {
                                copy_in(
                                    local,
                                    f.resp_off,
                                    data,
                                    n.min((f.len as u64 - f.resp_off.min(f.len as u64)) as usize),
                                )
                            };
                        }
                        f.resp_off += n as u64;
                        if last {
                            f.done = true;
                        }
                    }
                }
                OP_NAK => {
                    if let Some(f) = Self::find_inflight(st, h.req_seq) {
                        f.error = Some(h.status);
                    }
                }
                _ => {}
            }
            ring.consume(1);
            consumed = true;
        }
        if consumed {
            link.notify_peer();
        }
        consumed
    }

    /// Completes requests in posting order: acknowledged ones up to `tail`, READ and atomics
    /// once their response is in, a NAKed one with its error (and the QP goes to ERR).
    pub(super) fn reap(&self, st: &mut QpState, tail: u64) -> bool {
        let mut did = false;
        while let Some(f) = st.inflight.front() {
            if let Some(status) = f.error {
                let (wr_id, op, seq) = (f.wr_id, f.wc_opcode, f.seq);
                st.inflight.pop_front();
                self.error_completion(st, wr_id, seq, status, op);
                return true;
            }
            let complete = if f.awaits_response { f.done } else { f.end_seq <= tail };
            if !complete {
                break;
            }
            let f = st.inflight.pop_front().expect("front exists");
            did = true;
            if f.signaled {
                self.send_cq.push(Wc {
                    wr_id: f.wr_id,
                    status: IBV_WC_SUCCESS,
                    opcode: f.wc_opcode,
                    byte_len: f.len,
                    qp_num: self.qpn,
                    sq_seq: f.seq,
                    ..Wc::default()
                });
            }
        }
        did
    }

    /// The peer's QP is gone: requests it never took fail as a real RC QP does after retries.
    fn fail_unreachable(&self, st: &mut QpState) {
        if st.state == IBV_QPS_ERR {
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
        let mut st = self.lock_state();
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
    fn run_timers(&self, st: &mut QpState) -> bool {
        if st.state != IBV_QPS_RTS {
            return false;
        }
        let Some(link) = st.link.clone() else {
            // Not connected (the peer QP is gone, or never reached RTR): queued requests time out
            // as unanswered packets would.
            return !st.sq.is_empty() && self.retry_expired(st);
        };
        let now = Instant::now();
        if let Some((seq, timer)) = link.out.rnr() {
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
                    if let Ok(e) = crate::provider::soft::engine::engine() {
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

    /// The peer stopped answering: fails the oldest request once the transport retries are
    /// used up.
    fn retry_expired(&self, st: &mut QpState) -> bool {
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
        if let Ok(e) = crate::provider::soft::engine::engine() {
            e.wake_at(deadline);
        }
        false
    }
}

/// The RNR NAK delay of an encoded `min_rnr_timer` (IBA table 45).
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

/// Copies `n` bytes of a send's payload, starting at message offset `off`, to `dst`.
///
/// # Safety
/// `dst` is valid for `n` bytes; SGE ranges were checked against registered regions.
unsafe fn copy_out(p: &Payload, off: u64, dst: *mut u8, n: usize) {
    match p {
        Payload::Inline(d) => {
            let v = d.as_slice();
            // SAFETY: off + n <= v.len() (the message length); dst valid per contract.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().add(off as usize), dst, n) }
        }
        Payload::Sges(sgl) => walk(sgl, off, n, |addr, at, len| {
            // SAFETY: the piece lies in a checked registered region; dst has n bytes.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.add(at), len) }
        }),
    }
}

/// Copies `n` bytes from `src` into a scatter list at message offset `off`.
///
/// # Safety
/// `src` is valid for `n` bytes; the SGEs were checked for local write within their regions.
pub(super) unsafe fn copy_in(sgl: &Sgl, off: u64, src: *const u8, n: usize) {
    walk(sgl, off, n, |addr, at, len| {
        // SAFETY: per the function's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), addr as *mut u8, len) }
    })
}

/// Walks bytes `[off, off+n)` of the message a scatter/gather list describes: `f(address, offset
/// within those n bytes, length)` for each contiguous piece.
fn walk(sgl: &Sgl, off: u64, n: usize, mut f: impl FnMut(u64, usize, usize)) {
    let mut skip = off;
    let mut done = 0usize;
    for s in sgl.as_slice() {
        if done == n {
            break;
        }
        let l = s.length as u64;
        if skip >= l {
            skip -= l;
            continue;
        }
        let take = ((l - skip) as usize).min(n - done);
        f(s.addr + skip, done, take);
        done += take;
        skip = 0;
    }
}

/// Copies a one-sided payload so that the last byte lands last: a target spinning on its
/// buffer's last byte sees the whole payload once that byte changes.
///
/// # Safety
/// `src` and `dst` are valid for `n` bytes and do not overlap.
unsafe fn copy_last_byte_last(src: *const u8, dst: *mut u8, n: usize) {
    if n == 0 {
        return;
    }
    // SAFETY: per the function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n - 1);
        fence(Ordering::Release);
        dst.add(n - 1).write_volatile(*src.add(n - 1));
    }
}
