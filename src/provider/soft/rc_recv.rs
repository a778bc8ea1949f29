//! The receive side of the RC data path: the segments the peer wrote into our ring, executed
//! (requests against our receives and memory regions; responses and NAKs to our requests).
//!
//! The peer writes every header field and the ring's `head`. Each segment is validated by
//! [`segcheck::check`] against state kept here before anything is touched: a WRITE's
//! destination and a SEND's offset come from the message recorded at its first segment, a
//! response's length from our own request. A segment that fails is a protocol violation and
//! breaks the link (the QP goes to ERR). A request refused by the rules of RC (rkey, bounds,
//! access, length) gets a NAK and then moves this responder QP to ERR with an affiliated async
//! event, as InfiniBand does for class C errors.

use super::direct::share::SharedMem;
use super::link::Link;
use super::qp::{Inner, SoftQp};
use super::rc::{message_slots, status_of, InMsg, Inflight, RespJob};
use super::ring::*;
use super::segcheck::{self, Awaits, Open, Outstanding, Step};
use crate::provider::gate;
use crate::provider::{
    Completion, CompletionSink, KeySpace, MemoryKeys, QpEvent, QpState, RecvWqe, Region,
    SharedRecvQueue, Xrc, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use crate::sys::*;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use ibv_wc_opcode::*;
use ibv_wc_status::*;

/// What the consume loop does after a segment.
enum Flow {
    /// The segment is done: release its slot.
    Next,
    /// Keep the segment in the ring and stop (waiting for a receive, for room, or the QP left
    /// RTR/RTS).
    Stop,
}

/// READ and atomic responses waiting to be written, beyond which requests for more wait in
/// the ring: a peer that never reads its responses cannot make us queue without bound.
const MAX_QUEUED_RESPONSES: usize = SLOTS as usize;

impl SoftQp {
    /// Executes incoming segments; returns whether anything was consumed.
    pub(super) fn consume(&self, st: &mut Inner) -> bool {
        let Some(link) = st.link.as_ref() else { return false };
        if !link.inn.sealed(link.inn.tail()) {
            return false; // the common poll: no hold taken on the link
        }
        let link = link.clone();
        if !matches!(st.state, QpState::Rtr | QpState::Rts) || nak_pending(st) {
            return false;
        }
        let ring = &link.inn;
        let mut consumed = false;
        // One ring's worth per pass: a peer refilling its ring as fast as we drain it cannot
        // keep this QP's lock and the progress thread to itself.
        for _ in 0..SLOTS {
            // The peer's `head` is not read: a slot is ours to read once sealed for our tail.
            let seq = ring.tail();
            if !ring.sealed(seq) {
                break;
            }
            let (hp, data) = ring.slot(seq);
            // SAFETY: the slot lies in the mapping and is sealed for `seq`; it is read once, so
            // the checks below and the use of the header see the same values.
            let h = unsafe { hp.read_volatile() };
            let open = st.cur_in.as_ref().map(InMsg::open);
            let request = !matches!(h.opcode, OP_READ_RESP | OP_ATOMIC_RESP | OP_NAK);
            if request && open.is_none() && ring.is_closed() && !self.uc {
                // The requester moved to error or is gone: it reported these requests as
                // flushed, so they must not take effect here either. (A UC requester reported
                // what it wrote as sent: that is delivered.)
                ring.consume(1);
                consumed = true;
                continue;
            }
            let step = match segcheck::check(open, &h, |s| self.outstanding(st, &link, s)) {
                Ok(step) => step,
                Err(_) => {
                    self.fail(st);
                    break;
                }
            };
            if let Xrc::Recv(domain) = &self.xrc {
                if let Some(end) = request_start(&step, seq) {
                    // Every XRC request names its SRQ: it must be one of our domain's.
                    st.xrc_cur = domain.target(h.xrc_srqn);
                    if st.xrc_cur.is_none() {
                        self.nak(st, &link, end, IBV_WC_REM_INV_REQ_ERR);
                        break;
                    }
                }
            }
            match self.execute(st, &link, seq, &h, data, step) {
                Flow::Next => {
                    ring.consume(1);
                    consumed = true;
                }
                Flow::Stop => break,
            }
        }
        if consumed {
            link.notify_peer();
        }
        consumed
    }

    /// Applies one validated segment.
    fn execute(
        &self,
        st: &mut Inner,
        link: &Link,
        seq: u64,
        h: &SegHdr,
        data: *const u8,
        step: Step,
    ) -> Flow {
        match step {
            Step::Data { .. } if matches!(st.cur_in, Some(InMsg::Discard { .. })) => {
                discard(st, step)
            }
            Step::Data { opcode: OP_SEND, .. } => self.send_segment(st, link, seq, h, data, step),
            Step::Data { .. } => self.write_segment(st, link, seq, h, data, step),
            Step::Single { opcode } => self.single(st, link, seq, h, opcode),
            Step::Response { off, n, last } => {
                if let Some(f) = find_inflight(st, h.req_seq) {
                    if let (Some(local), None) = (&f.local, f.local_error) {
                        // SAFETY: data holds n published bytes (the local buffers hold f.len
                        // bytes, off + n <= f.len: checked).
                        let placed = unsafe {
                            super::sgl_copy::place_in(
                                &*self.keys,
                                local,
                                off as u64,
                                data,
                                n as usize,
                            )
                        };
                        if placed.is_err() {
                            // Deregistered since the request was posted: the rest of the
                            // response is taken but not placed, and the request fails.
                            f.local_error = Some(IBV_WC_LOC_PROT_ERR);
                        }
                    }
                    f.resp_off = (off + n) as u64;
                    if last && f.local_error.is_some() {
                        f.error = f.local_error;
                    }
                    f.done = last;
                }
                Flow::Next
            }
            Step::Nak { status } => {
                match find_inflight(st, h.req_seq) {
                    Some(f) => f.error = Some(status),
                    None => self.nak_front(st, link, status),
                }
                Flow::Next
            }
        }
    }

    fn send_segment(
        &self,
        st: &mut Inner,
        link: &Link,
        seq: u64,
        h: &SegHdr,
        data: *const u8,
        step: Step,
    ) -> Flow {
        let Step::Data { opcode, len, off, n, first, last, imm } = step else { return Flow::Stop };
        if first {
            if !self.has_recv(st) && self.uc {
                return discard(st, step); // UC has no RNR: the message is dropped
            }
            if !self.has_recv(st) {
                if let Some(srq) = self.rx_srq(st) {
                    srq.set_starved();
                }
                // Receiver not ready: the message waits, and the requester sees an RNR NAK
                // (it retries per its rnr_retry, 7 = forever).
                link.inn.set_rnr(seq, st.attr.min_rnr_timer);
                return Flow::Stop;
            }
            let Some(wqe) = self.next_recv(st) else { return Flow::Stop };
            let status = if len as u64 > wqe.sges.total() {
                IBV_WC_LOC_LEN_ERR
            } else if super::rc::check_local(self.rx_keys(st), &wqe.sges, ACCESS_LOCAL_WRITE)
                .is_err()
            {
                IBV_WC_LOC_PROT_ERR
            } else {
                IBV_WC_SUCCESS
            };
            if status != IBV_WC_SUCCESS && self.uc {
                // UC drops what does not fit, as rxe does: the receive stays posted, or, taken
                // from an SRQ, completes with the error.
                match self.rx_srq(st) {
                    None => st.rq.push_front(wqe),
                    Some(_) => {
                        let wc =
                            self.recv_wc(st, &wqe, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, len, h);
                        self.rx_cq(st).push(wc);
                    }
                }
                return discard(st, step);
            }
            let open = Open { opcode, len, got: 0, imm };
            st.cur_in = Some(InMsg::Recv { wqe, status, open });
        }
        let keys = self.keys_of(&st.xrc_cur);
        let Some(InMsg::Recv { wqe, status, open }) = st.cur_in.as_mut() else { return Flow::Stop };
        if *status == IBV_WC_SUCCESS {
            // SAFETY: data holds n published bytes (the receive has room for the whole message
            // of `len` bytes, off + n <= len: checked).
            let placed =
                unsafe { super::sgl_copy::place_in(keys, &wqe.sges, off as u64, data, n as usize) };
            if placed.is_err() {
                *status = IBV_WC_LOC_PROT_ERR; // deregistered since the first segment
            }
        }
        open.got = off + n;
        if !last {
            return Flow::Next;
        }
        let Some(InMsg::Recv { wqe, mut status, .. }) = st.cur_in.take() else {
            return Flow::Stop;
        };
        // SEND with invalidate: the responder invalidates the window the peer names, if it is
        // one of ours it may invalidate (checked by the key table, the peer is not trusted).
        let inv = h.flags & SEG_INV != 0 && !imm;
        if inv && status == IBV_WC_SUCCESS && self.rx_keys(st).invalidate(h.imm).is_err() {
            status = IBV_WC_REM_INV_REQ_ERR;
        }
        let mut wc = self.recv_wc(st, &wqe, status, IBV_WC_RECV, len, h);
        if imm {
            wc.imm = h.imm;
            wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_IMM.0;
        } else if inv && status == IBV_WC_SUCCESS {
            wc.imm = h.imm;
            wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_INV.0;
        }
        self.rx_cq(st).push(wc);
        if status != IBV_WC_SUCCESS {
            let remote = if status == IBV_WC_LOC_LEN_ERR || status == IBV_WC_REM_INV_REQ_ERR {
                IBV_WC_REM_INV_REQ_ERR
            } else {
                IBV_WC_REM_OP_ERR
            };
            // The NAK goes before the segment is released, so the requester sees it first.
            self.nak(st, link, seq.wrapping_add(1), remote);
            return Flow::Stop;
        }
        Flow::Next
    }

    fn write_segment(
        &self,
        st: &mut Inner,
        link: &Link,
        seq: u64,
        h: &SegHdr,
        data: *const u8,
        step: Step,
    ) -> Flow {
        let Step::Data { opcode, len, off, n, first, last, imm } = step else { return Flow::Stop };
        if last && imm && !self.has_recv(st) && !self.uc {
            link.inn.set_rnr(seq, st.attr.min_rnr_timer); // WRITE with immediate needs a receive
            return Flow::Stop;
        }
        if first {
            match self.check_remote(st, h.rkey, h.remote_addr, len as u64, ACCESS_REMOTE_WRITE) {
                Ok((mr, base)) => {
                    st.cur_in = Some(InMsg::Write {
                        base,
                        gate: mr,
                        open: Open { opcode, len, got: 0, imm },
                    })
                }
                Err(_) if self.uc => return discard(st, step), // UC: dropped, no NAK
                Err(status) => {
                    self.nak(st, link, seq.wrapping_add(message_slots(len)), status);
                    return Flow::Stop;
                }
            }
        }
        let Some(InMsg::Write { base, gate, open }) = st.cur_in.as_mut() else { return Flow::Stop };
        if let Some(gate) = gate {
            let Some(_inside) = gate.enter() else {
                // Deregistered since the first segment: the rest of the message is refused.
                st.cur_in = None;
                // The NAK names the message's last slot; this segment is its (off / SEG_DATA)th.
                let end = seq
                    .wrapping_add(message_slots(len))
                    .wrapping_sub(u64::from(off) / SEG_DATA as u64);
                self.nak(st, link, end, IBV_WC_REM_ACCESS_ERR);
                return Flow::Stop;
            };
            // SAFETY: [base, base + len) was checked for remote write at the first segment, in
            // a region registered until we leave its gate; off + n <= len (checked), so the
            // destination lies in it whatever this segment's header says; data holds n
            // published bytes.
            unsafe { copy_last_byte_last(data, (*base + off as u64) as *mut u8, n as usize) };
        }
        open.got = off + n;
        if last {
            st.cur_in = None;
            if imm {
                // UC without a receive: the immediate is dropped (the data has landed).
                let Some(wqe) = self.next_recv(st) else {
                    return if self.uc { Flow::Next } else { Flow::Stop };
                };
                let mut wc =
                    self.recv_wc(st, &wqe, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, len, h);
                wc.imm = h.imm;
                wc.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
                self.rx_cq(st).push(wc);
            }
        }
        Flow::Next
    }

    /// A READ request or an atomic: executed (READ: its response queued) or NAKed.
    fn single(&self, st: &mut Inner, link: &Link, seq: u64, h: &SegHdr, opcode: u32) -> Flow {
        if st.responses.len() >= MAX_QUEUED_RESPONSES {
            return Flow::Stop; // the peer reads its responses first
        }
        let r = if opcode == OP_READ_REQ {
            let len = h.msg_len as u64;
            self.check_remote(st, h.rkey, h.remote_addr, len, ACCESS_REMOTE_READ).map(
                |(mr, addr)| RespJob::Read {
                    req_seq: seq.wrapping_add(1),
                    addr,
                    len,
                    off: 0,
                    gate: mr,
                },
            )
        } else if h.remote_addr % 8 != 0 {
            Err(IBV_WC_REM_INV_REQ_ERR)
        } else {
            self.check_remote(st, h.rkey, h.remote_addr, 8, ACCESS_REMOTE_ATOMIC).and_then(|c| {
                let (mr, addr) = c;
                if addr % 8 != 0 {
                    return Err(IBV_WC_REM_INV_REQ_ERR); // an aligned iova, its address not
                }
                let _inside = gate::enter_if(mr.as_deref()).map_err(|_| IBV_WC_REM_ACCESS_ERR)?;
                // SAFETY: 8 aligned bytes (checked just above) inside a region with atomic
                // access, registered until we leave its gate.
                let cell = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                let value = if opcode == OP_CMP_SWAP {
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
                Ok(RespJob::Atomic { req_seq: seq.wrapping_add(1), value })
            })
        };
        match r {
            Ok(job) => {
                st.responses.push_back(job);
                Flow::Next
            }
            Err(status) => {
                self.nak(st, link, seq.wrapping_add(1), status);
                Flow::Stop
            }
        }
    }

    fn recv_wc(
        &self,
        st: &Inner,
        wqe: &RecvWqe,
        status: u32,
        opcode: u32,
        len: u32,
        h: &SegHdr,
    ) -> Completion {
        Completion {
            wr_id: wqe.wr_id,
            status,
            opcode,
            byte_len: len,
            qp_num: self.qpn,
            src_qp: st.attr.dest_qp_num,
            solicited: h.flags & SEG_SOLICITED != 0,
            ..Completion::default()
        }
    }

    /// Refuses a request: the NAK is written before the request's slots are released (now, or
    /// once the ring has room; nothing more is consumed meanwhile), then the QP goes to ERR.
    fn nak(&self, st: &mut Inner, link: &Link, req_seq: u64, status: u32) {
        st.responses.push_back(RespJob::Nak { req_seq, status });
        self.push_responses(st, link);
    }

    /// The responder refused a request with `status` and told the requester: like an IB
    /// responder after a class C error, the QP moves to ERR with an affiliated async event.
    pub(super) fn responder_error(&self, st: &mut Inner, status: u32) {
        let event = match status {
            IBV_WC_REM_ACCESS_ERR => QpEvent::AccessError,
            IBV_WC_REM_INV_REQ_ERR => QpEvent::RequestError,
            _ => QpEvent::Fatal,
        };
        self.to_error(st);
        self.events.qp_event(event);
    }

    /// A NAK for the request still being written (longer than the ring): it fails now, in
    /// posting order after the requests before it.
    fn nak_front(&self, st: &mut Inner, link: &Link, status: u32) {
        if st.pushed == 0 {
            return;
        }
        let Some(w) = st.sq.pop_front() else { return };
        let written = st.pushed.div_ceil(SEG_DATA as u64);
        let start = link.out.head().wrapping_sub(written);
        let end = start.wrapping_add(message_slots(w.len as u32));
        st.pushed = 0;
        let mut f = self.inflight(w, start, end);
        f.error = Some(status);
        st.inflight.push_back(f);
    }

    /// Our own record of the request a response or NAK names, if there is one.
    fn outstanding(&self, st: &Inner, link: &Link, req_seq: u64) -> Option<Outstanding> {
        if let Some(f) = st.inflight.iter().find(|f| f.end_seq == req_seq) {
            let awaits = match f.wc_opcode {
                IBV_WC_RDMA_READ => Awaits::Read,
                IBV_WC_COMP_SWAP | IBV_WC_FETCH_ADD => Awaits::Atomic,
                _ => Awaits::Ack,
            };
            let settled = f.done || f.error.is_some();
            return Some(Outstanding { awaits, len: f.len, got: f.resp_off as u32, settled });
        }
        // The request still being written: a NAK may refuse it at its first segment.
        let w = st.sq.front().filter(|_| st.pushed > 0)?;
        let written = st.pushed.div_ceil(SEG_DATA as u64);
        let end = link.out.head().wrapping_sub(written).wrapping_add(message_slots(w.len as u32));
        (end == req_seq).then_some(Outstanding {
            awaits: Awaits::Ack,
            len: w.len as u32,
            got: 0,
            settled: false,
        })
    }

    /// A remote access: the QP must allow it and the region must cover it with `need`. The
    /// region (`None` for an empty range) and the local address of `addr` (an iova).
    fn check_remote(
        &self,
        st: &Inner,
        rkey: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(Option<Region>, u64), u32> {
        if st.attr.qp_access_flags & need != need {
            return Err(IBV_WC_REM_INV_REQ_ERR);
        }
        if len == 0 {
            return Ok((None, addr));
        }
        let len = usize::try_from(len).map_err(|_| IBV_WC_REM_ACCESS_ERR)?;
        let c = self.rx_keys(st).lookup(rkey, addr, len, need, KeySpace::Remote);
        let c = c.map_err(status_of)?;
        self.offer_direct(st, rkey);
        Ok((Some(c.region), c.addr))
    }

    /// The peer just passed our checks on region `rkey`: if the region is on a memfd, the peer
    /// may reach it directly from now on (`direct`), within what our QP allows.
    fn offer_direct(&self, st: &Inner, rkey: u32) {
        if self.uc || !matches!(self.xrc, Xrc::None) {
            return; // UC and XRC take no direct path (see try_direct)
        }
        let (Some(link), Some(shared)) = (&st.link, self.keys.shared(rkey)) else { return };
        if let Some(s) = shared.as_any().downcast_ref::<SharedMem>() {
            link.offer(rkey, s, st.attr.qp_access_flags);
        }
    }

    pub(super) fn next_recv(&self, st: &mut Inner) -> Option<RecvWqe> {
        match self.rx_srq(st) {
            Some(s) => s.pop(),
            None => st.rq.pop_front(),
        }
    }

    pub(super) fn has_recv(&self, st: &Inner) -> bool {
        match self.rx_srq(st) {
            Some(s) => !s.is_empty(),
            None => !st.rq.is_empty(),
        }
    }

    /// The receive side of the request being executed: the QP's own, or for an XRC target
    /// that of the SRQ the request named (its keys, CQ and queue).
    fn rx_keys<'a>(&'a self, st: &'a Inner) -> &'a dyn MemoryKeys {
        self.keys_of(&st.xrc_cur)
    }

    /// [`SoftQp::rx_keys`] from the one field it reads (beside a borrow of another).
    fn keys_of<'a>(
        &'a self,
        xrc_cur: &'a Option<crate::provider::XrcTarget>,
    ) -> &'a dyn MemoryKeys {
        match xrc_cur {
            Some(t) => &*t.keys,
            None => &*self.keys,
        }
    }

    fn rx_cq(&self, st: &Inner) -> Arc<dyn CompletionSink> {
        match &st.xrc_cur {
            Some(t) => t.cq.clone(),
            None => self.recv_cq.clone(),
        }
    }

    fn rx_srq(&self, st: &Inner) -> Option<Arc<dyn SharedRecvQueue>> {
        match &st.xrc_cur {
            Some(t) => Some(t.srq.clone()),
            None => self.srq.clone(),
        }
    }
}

/// A segment that starts a request: the ring sequence just past the whole request (what its
/// NAK names).
fn request_start(step: &Step, seq: u64) -> Option<u64> {
    match *step {
        Step::Data { first: true, len, .. } => Some(seq.wrapping_add(message_slots(len))),
        Step::Single { .. } => Some(seq.wrapping_add(1)),
        _ => None,
    }
}

/// A refused request's NAK still waits for room: nothing more is taken from the ring.
fn nak_pending(st: &Inner) -> bool {
    matches!(st.responses.back(), Some(RespJob::Nak { .. }))
}

fn find_inflight(st: &mut Inner, req_seq: u64) -> Option<&mut Inflight> {
    st.inflight.iter_mut().find(|f| f.end_seq == req_seq)
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

/// UC: drops one data segment of a message (the first one opens the discard), consuming it.
fn discard(st: &mut Inner, step: Step) -> Flow {
    let Step::Data { opcode, len, off, n, last, imm, .. } = step else { return Flow::Stop };
    st.cur_in = (!last).then_some(InMsg::Discard { open: Open { opcode, len, got: off + n, imm } });
    Flow::Next
}
