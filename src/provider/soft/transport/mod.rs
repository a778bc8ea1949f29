//! The InfiniBand transport engine (RC, UC, XRC and UD over RoCEv2 packets) as a deterministic state
//! machine: no I/O, no threads, no clock (time is a `now` in nanoseconds the caller passes), no
//! allocation per packet (each QP owns one MTU-sized scratch buffer and bounded queues).
//!
//! It consumes decoded packets ([`crate::provider::soft::roce::Packet`]) and work requests, and
//! produces packets to send, memory operations and completions through the small traits in
//! [`api`]. [`requester`] and [`responder`] are the two halves of an RC QP, joined in [`RcQp`];
//! [`ud`] is the datagram QP. See docs/DESIGN-NOTES.md, "The transport engine".

pub mod api;
pub mod psn;
pub mod requester;
pub mod responder;
pub mod ud;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests_bulk;
#[cfg(test)]
mod tests_fuzz;
#[cfg(test)]
mod tests_rc;
#[cfg(test)]
mod tests_resp;
#[cfg(test)]
mod tests_stream;
#[cfg(test)]
mod tests_uc;
#[cfg(test)]
mod tests_ud;
#[cfg(test)]
mod tests_xrc;

pub use api::*;
pub use requester::Requester;
pub use responder::Responder;
pub use ud::UdQp;

use super::roce::opcode::op;
use super::roce::Packet;

/// One RC QP: the requester half (our requests, their responses) and the responder half (their
/// requests, our responses). An error in either half is an error of the QP.
pub struct RcQp {
    pub req: Requester,
    pub resp: Responder,
}

impl RcQp {
    pub fn new(cfg: &RcConfig) -> Self {
        RcQp { req: Requester::new(cfg), resp: Responder::new(cfg) }
    }

    /// A packet from the peer (then transmits what the window allows): responses (READ
    /// response, ACK, atomic ACK) go to the requester,
    /// everything else to the responder. Packets for another QP, another partition, or of
    /// another transport are dropped.
    pub fn on_packet(
        &mut self,
        pkt: &Packet<'_>,
        now: u64,
        mem: &mut impl Memory,
        rq: &mut impl RecvQueue,
        out: &mut impl Sink,
    ) {
        if self.is_error() {
            return;
        }
        let Some(info) = pkt.info() else { return };
        if info.transport != self.req.transport()
            || pkt.bth.dest_qp() != self.req.qpn()
            || pkt.bth.pkey() != super::roce::packet::DEFAULT_PKEY
        {
            return;
        }
        let code = pkt.bth.opcode() & op::OPERATION;
        if (op::READ_RESPONSE_FIRST..=op::ATOMIC_ACK).contains(&code) {
            self.req.on_response(pkt, now, mem, out);
        } else {
            self.resp.on_request(pkt, mem, rq, out);
        }
        self.propagate_error(mem, out);
        // An ACK may have opened the window, a NAK asked for a resend: transmit now. Timers
        // are not run here: responses behind this one may still wait unread.
        if !self.is_error() {
            self.req.send_more(now, mem, out);
            self.propagate_error(mem, out);
        }
    }

    /// A request packet the layer above refuses (see [`Responder::refuse`]).
    pub fn refuse(&mut self, pkt: &Packet<'_>, mem: &mut impl Memory, out: &mut impl Sink) {
        if self.is_error() || pkt.bth.dest_qp() != self.req.qpn() {
            return;
        }
        self.resp.refuse(pkt, out);
        self.propagate_error(mem, out);
    }

    /// Posts a send work request (see [`Requester::post`]).
    pub fn post(&mut self, wr: SendWr, out: &mut impl Sink) -> Result<(), PostError> {
        self.req.post(wr, out)
    }

    /// Transmits what the window allows, without running the timers (after a post).
    pub fn send_more(&mut self, now: u64, mem: &mut impl Memory, out: &mut impl Sink) {
        if self.is_error() {
            return;
        }
        self.req.send_more(now, mem, out);
        self.propagate_error(mem, out);
    }

    /// Timers and transmission: call when [`RcQp::next_deadline`] passes (after reading what
    /// has arrived: a response waiting unread would otherwise look lost).
    pub fn poll(&mut self, now: u64, mem: &mut impl Memory, out: &mut impl Sink) {
        if self.is_error() {
            return;
        }
        self.req.poll(now, mem, out);
        self.propagate_error(mem, out);
    }

    /// When [`RcQp::poll`] next has something to do by itself (a retransmission or RNR timer).
    pub fn next_deadline(&self) -> Option<u64> {
        self.req.next_deadline()
    }

    pub fn is_error(&self) -> bool {
        self.req.is_error() || self.resp.is_error()
    }

    /// A responder error stops the requester too (its requests flush), and the reverse.
    fn propagate_error(&mut self, _mem: &mut impl Memory, out: &mut impl Sink) {
        if self.resp.is_error() && !self.req.is_error() {
            self.req.flush(out);
        }
        if self.req.is_error() && !self.resp.is_error() {
            self.resp.stop();
        }
    }
}
