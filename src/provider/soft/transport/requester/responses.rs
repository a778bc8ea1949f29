//! The requester's response half: ACKs, NAKs, READ responses and atomic ACKs turned into
//! window progress and completions (in posting order), and the error paths that flush.

use super::*;

impl Requester {
    /// A response from the peer's responder (READ response, ACK/NAK, atomic ACK). Anything that
    /// does not fit what is outstanding is dropped.
    pub fn on_response(
        &mut self,
        pkt: &Packet<'_>,
        now: u64,
        mem: &mut impl Memory,
        out: &mut impl Sink,
    ) {
        if self.error {
            return;
        }
        self.heard = true;
        let p = pkt.bth.psn();
        let d = psn::diff(p, self.una);
        if d < 0 || d >= psn::diff(self.sent_hi, self.una) {
            self.stats.stale += 1;
            return; // stale, or a PSN we never sent
        }
        // The operation (the packet's transport was checked against ours).
        let code = pkt.bth.opcode() & op::OPERATION;
        if code == op::ACK {
            let Some(aeth) = pkt.ext.aeth else { return };
            match aeth.syndrome() {
                Syndrome::Ack { .. } => {
                    self.stats.acks += 1;
                    self.ack_through(p, now, out)
                }
                Syndrome::RnrNak { timer } => {
                    self.stats.rnr_naks += 1;
                    self.ack_through(psn::prev(p), now, out);
                    if self.una != p || self.error {
                        return;
                    }
                    if self.cfg.rnr_retry != 7 {
                        if self.rnr_left == 0 {
                            self.fail(Status::RnrRetryExcErr, out);
                            return;
                        }
                        self.rnr_left -= 1;
                    }
                    self.timer = None;
                    self.snd = p;
                    self.rnr_wait = Some(now.saturating_add(rnr_delay_ns(timer)));
                }
                Syndrome::Nak(NakCode::PsnSequenceError) => {
                    self.stats.seq_naks += 1;
                    self.ack_through(psn::prev(p), now, out);
                    if self.una == p && self.rnr_wait.is_none() {
                        self.snd = p;
                        self.timed = None;
                        self.ssthresh = (self.limit() / 2).max(MIN_CWND);
                        self.cwnd = self.ssthresh;
                    }
                }
                Syndrome::Nak(
                    c @ (NakCode::InvalidRequest
                    | NakCode::RemoteAccessError
                    | NakCode::RemoteOperationalError),
                ) => {
                    self.ack_through(psn::prev(p), now, out);
                    let status = match c {
                        NakCode::InvalidRequest => Status::RemInvReqErr,
                        NakCode::RemoteAccessError => Status::RemAccessErr,
                        _ => Status::RemOpErr,
                    };
                    self.fail(status, out);
                }
                Syndrome::Nak(_) | Syndrome::Reserved(_) => {}
            }
            return;
        }
        // A READ response or atomic ACK acknowledges every request before it.
        if d > 0 {
            self.ack_through(psn::prev(p), now, out);
        }
        if self.una != p {
            self.answer_lost();
            return;
        }
        if pkt.ext.aeth.is_some_and(|a| !matches!(a.syndrome(), Syndrome::Ack { .. })) {
            return;
        }
        let Some(w) = self.sq.iter_mut().find(|w| !w.done()) else { return };
        if psn::add(w.first, w.acked) != p {
            return;
        }
        let k = w.acked;
        let wr = w.wr;
        let npkts = w.npkts;
        if code == op::ATOMIC_ACK {
            let Some(ack) = pkt.ext.atomic_ack else { return };
            if !wr.op.is_atomic() {
                return;
            }
            if mem.write_local(wr.sgl, 0, &ack.orig().to_ne_bytes()).is_err() {
                self.fail(Status::LocProtErr, out);
                return;
            }
        } else {
            if wr.op != WrOp::Read {
                return;
            }
            let pos = match (k == 0, k + 1 == npkts) {
                (true, true) => Position::Only,
                (true, false) => Position::First,
                (false, true) => Position::Last,
                (false, false) => Position::Middle,
            };
            let off = u64::from(k) * u64::from(self.mtu);
            let want = (u64::from(wr.len) - off).min(u64::from(self.mtu));
            if code != opcode::read_response_opcode(pos) || pkt.payload.len() as u64 != want {
                return;
            }
            if !pkt.payload.is_empty() && mem.write_local(wr.sgl, off, pkt.payload).is_err() {
                self.fail(Status::LocProtErr, out);
                return;
            }
        }
        if let Some(w) = self.sq.iter_mut().find(|w| !w.done()) {
            w.acked += 1;
        }
        self.una = psn::add(p, 1);
        self.progress(now, out);
    }

    /// A response arrived beyond `una`: the answer at `una` was lost. Go back once per loss.
    fn answer_lost(&mut self) {
        if !self.rewound && self.rnr_wait.is_none() {
            self.rewound = true;
            self.snd = self.una;
        }
    }

    /// Everything up to and including PSN `p` was received by the peer. Stops at a READ or
    /// atomic whose answer has not come (the ACK proves the answer lost: go back for it).
    pub(super) fn ack_through(&mut self, p: u32, now: u64, out: &mut impl Sink) {
        if psn::before(p, self.una) {
            return;
        }
        let mut moved = false;
        for w in self.sq.iter_mut().filter(|w| !w.done()) {
            if psn::before(p, w.first) {
                break;
            }
            let covered = !psn::before(p, w.last());
            if w.wr.op.is_rd_atomic() {
                break; // needs its own answer; whether it was lost is checked below
            }
            if covered {
                w.acked = w.npkts;
                self.una = psn::add(w.first, w.npkts);
            } else {
                w.acked = psn::diff(p, w.first) as u32 + 1;
                self.una = psn::add(p, 1);
            }
            moved = true;
            if !covered {
                break;
            }
        }
        let lost = self
            .sq
            .iter()
            .find(|w| !w.done())
            .is_some_and(|w| w.wr.op.is_rd_atomic() && !psn::before(p, w.last()));
        if moved {
            self.progress(now, out);
        }
        if lost {
            self.answer_lost();
        }
    }

    /// `una` advanced: reset the retry budgets and the timer, and complete what is done.
    fn progress(&mut self, now: u64, out: &mut impl Sink) {
        if let Some((psn, at)) = self.timed {
            if psn::before(psn, self.una) {
                let sample = now.saturating_sub(at);
                self.srtt = Some(self.srtt.map_or(sample, |s| (s * 7 + sample) / 8));
                self.timed = None;
            }
        }
        self.fast_backoff = 0;
        self.cwnd = if self.cwnd < self.ssthresh {
            self.cwnd.saturating_mul(2).min(self.ssthresh)
        } else {
            self.cwnd.saturating_add(1)
        }
        .min(self.cfg.window.max(1));
        if let Some(probe) = self.probe.take() {
            if psn::diff(self.una, probe.psn) > 1 {
                self.cwnd = probe.cwnd;
                self.ssthresh = probe.ssthresh;
                self.snd = self.sent_hi;
            }
        }
        self.retries = self.cfg.retry_cnt;
        self.waited = 0;
        self.heard = false;
        self.rnr_left = self.cfg.rnr_retry;
        self.rewound = false;
        if psn::before(self.snd, self.una) {
            self.snd = self.una;
        }
        self.timer = if self.una == self.sent_hi {
            None
        } else {
            ack_timeout_ns(self.cfg.timeout).map(|t| now.saturating_add(t))
        };
        self.fast = if self.una == self.sent_hi || !self.fast_applies() {
            None
        } else {
            self.fast_interval().map(|i| now.saturating_add(i))
        };
        while self.sq.front().is_some_and(|w| w.done()) {
            let Some(w) = self.sq.pop_front() else { break };
            succeeded(&w, out);
        }
    }

    /// The oldest incomplete request fails with `status`, the rest flush; the QP is in error.
    pub(crate) fn fail(&mut self, status: Status, out: &mut impl Sink) {
        self.error = true;
        self.timer = None;
        self.rnr_wait = None;
        let mut first = true;
        while let Some(w) = self.sq.pop_front() {
            if w.done() {
                succeeded(&w, out);
                continue;
            }
            let s = if first { status } else { Status::WrFlushErr };
            first = false;
            out.completion(Completion::send(w.wr.wr_id, s, w.wr.op.wc_opcode(), 0));
        }
    }

    /// The QP went to error elsewhere (the responder half): every request flushes.
    pub(crate) fn flush(&mut self, out: &mut impl Sink) {
        self.fail(Status::WrFlushErr, out);
    }
}

/// The completion of a request the peer acknowledged in full (none if it was unsignaled).
fn succeeded(w: &Wqe, out: &mut impl Sink) {
    if w.wr.signaled {
        out.completion(Completion::send(
            w.wr.wr_id,
            Status::Success,
            w.wr.op.wc_opcode(),
            w.wr.len,
        ));
    }
}
