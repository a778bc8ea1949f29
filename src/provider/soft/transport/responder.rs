//! The responder half of an RC QP: executes the peer's requests in PSN order exactly once,
//! answers duplicates (re-ACK; READ again from memory; atomics from a saved-result cache),
//! NAKs the first packet of a gap once, RNR-NAKs when no receive is posted, and on a class C
//! error NAKs and moves the QP to error with an async event. Every field of every packet is
//! checked before use; memory is reached only through [`Memory`], which checks rkeys itself.
//!
//! A UC responder places SENDs and WRITEs the same way but answers nothing: a message it cannot
//! take whole (a PSN gap, no receive posted, a bad key or length) is dropped up to the next
//! message's first packet, which also resynchronizes the PSN, and the QP stays up (IBA 9.9.4).

use super::api::*;
use super::psn;
use crate::provider::soft::roce::opcode::{self, op, Position};
use crate::provider::soft::roce::{Aeth, AtomicAckEth, NakCode, Packet, Syndrome};

/// The largest message IB allows (2^31 bytes).
const MAX_MSG: u32 = 1 << 31;
/// PSNs one READ may take: keeps the expected PSN within the comparable half of the space
/// (the requester refuses longer ones too).
const MAX_READ_PKTS: u32 = 1 << 22;
/// "No end-to-end credits" in an ACK syndrome.
const NO_CREDITS: u8 = 31;

/// The message being received across packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cur {
    Idle,
    Send { recv: Recv, off: u32 },
    Write { rkey: u32, va: u64, len: u32, off: u32 },
}

/// A READ or atomic already executed, kept to answer its duplicates.
#[derive(Clone, Copy, Debug)]
struct RdRec {
    psn: u32,
    npkts: u32,
    kind: RdKind,
}

#[derive(Clone, Copy, Debug)]
enum RdKind {
    Read { rkey: u32, va: u64, len: u32 },
    Atomic { orig: u64 },
}

/// Why a request failed (class C): the NAK code and the async event.
#[derive(Clone, Copy, Debug)]
enum ClassC {
    InvalidRequest,
    Access,
    Operational,
}

pub struct Responder {
    qpn: u32,
    dest_qpn: u32,
    mtu: u32,
    /// Expected PSN.
    epsn: u32,
    /// Message sequence number: messages completed.
    msn: u32,
    cur: Cur,
    /// A NAK (sequence or RNR) went out for the gap at `epsn`; no other until it is filled.
    nak_sent: bool,
    /// Packets accepted since the last ACK.
    since_ack: u32,
    ack_every: u32,
    min_rnr_timer: u8,
    cache: Vec<Option<RdRec>>,
    cache_next: usize,
    error: bool,
    scratch: Vec<u8>,
    /// The transport's opcode bits, for what we send (RC or XRC).
    base: u8,
    /// XRC: the SRQ the message in progress is for; its later packets must name the same.
    msg_srqn: Option<u32>,
    /// UC: no replies; see [`Responder::on_uc_request`].
    uc: bool,
    /// UC: the message in progress is being dropped, up to the next first packet.
    uc_drop: bool,
    /// UC: the receive of a dropped SEND, taken again by the next one (it was never completed).
    reuse: Option<Recv>,
    pub stats: RespStats,
}

/// What the responder has seen (for diagnostics: `RDMASHIM_NET_DEBUG`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RespStats {
    pub executed: u64,
    pub ahead: u64,
    pub duplicates: u64,
    pub acks: u64,
    pub seq_naks: u64,
    pub rnr_naks: u64,
    /// UC packets dropped (a gap, or the rest of a message that could not be taken).
    pub uc_dropped: u64,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("epsn", &self.epsn)
            .field("msn", &self.msn)
            .field("cur", &self.cur)
            .field("nak_sent", &self.nak_sent)
            .field("since_ack", &self.since_ack)
            .field("error", &self.error)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Responder {
    pub fn new(cfg: &RcConfig) -> Self {
        Responder {
            qpn: cfg.qpn,
            dest_qpn: cfg.dest_qpn,
            mtu: cfg.mtu(),
            epsn: cfg.rq_psn & psn::PSN_MASK,
            msn: 0,
            cur: Cur::Idle,
            nak_sent: false,
            since_ack: 0,
            ack_every: cfg.ack_every.max(1),
            min_rnr_timer: cfg.min_rnr_timer & 31,
            cache: vec![None; usize::from(cfg.max_dest_rd_atomic.max(1))],
            cache_next: 0,
            error: false,
            scratch: vec![0; cfg.mtu() as usize],
            base: cfg.transport.base(),
            msg_srqn: None,
            uc: cfg.transport == Transport::Uc,
            uc_drop: false,
            reuse: None,
            stats: RespStats::default(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.error
    }
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The PSN expected next.
    pub fn expected_psn(&self) -> u32 {
        self.epsn
    }
    pub fn msn(&self) -> u32 {
        self.msn
    }
    pub(crate) fn stop(&mut self) {
        self.error = true;
    }

    /// A request packet (SEND, WRITE, READ request, atomic) from the peer.
    pub fn on_request(
        &mut self,
        pkt: &Packet<'_>,
        mem: &mut impl Memory,
        rq: &mut impl RecvQueue,
        out: &mut impl Sink,
    ) {
        if self.error {
            return;
        }
        if self.uc {
            return self.on_uc_request(pkt, mem, rq, out);
        }
        let p = pkt.bth.psn();
        let d = psn::diff(p, self.epsn);
        if d < 0 {
            self.stats.duplicates += 1;
            self.duplicate(pkt, mem, out);
        } else if d > 0 {
            self.stats.ahead += 1;
            if !self.nak_sent {
                self.stats.seq_naks += 1;
                self.nak_sent = true;
                self.reply(op::ACK, self.epsn, Syndrome::Nak(NakCode::PsnSequenceError), out);
            }
        } else {
            self.nak_sent = false;
            self.stats.executed += 1;
            if let Err(c) = self.execute(pkt, mem, rq, out) {
                self.class_c(c, out);
            }
        }
    }

    /// A UC packet. One behind the expected PSN was seen already (the network duplicated or
    /// reordered it): ignored, so nothing is placed twice and messages complete in order. A
    /// first (or only) packet at or beyond it starts a message there, abandoning one in
    /// progress; a later packet must come at the expected PSN, or the rest of its message is
    /// dropped. A message that fails is dropped the same way, with no reply and no QP error.
    fn on_uc_request(
        &mut self,
        pkt: &Packet<'_>,
        mem: &mut impl Memory,
        rq: &mut impl RecvQueue,
        out: &mut impl Sink,
    ) {
        let p = pkt.bth.psn();
        let d = psn::diff(p, self.epsn);
        if d < 0 {
            self.stats.duplicates += 1;
            return;
        }
        let pos = position(operation(pkt.bth.opcode()));
        if matches!(pos, Some(Position::First | Position::Only)) {
            self.abandon();
            self.epsn = p;
        } else if self.uc_drop || d > 0 {
            self.stats.uc_dropped += 1;
            self.abandon();
            self.uc_drop = true;
            return;
        }
        self.uc_drop = false;
        self.stats.executed += 1;
        if self.execute(pkt, mem, rq, out).is_err() {
            self.stats.uc_dropped += 1;
            self.abandon();
            self.uc_drop = true;
        }
    }

    /// A request the layer above cannot take (XRC: one naming no SRQ of the target's domain,
    /// or any request to an initiator): at the expected PSN an invalid request (NAK, then the
    /// QP is in error); anywhere else ignored, as a stray packet.
    pub fn refuse(&mut self, pkt: &Packet<'_>, out: &mut impl Sink) {
        if !self.error && pkt.bth.psn() == self.epsn {
            self.class_c(ClassC::InvalidRequest, out);
        }
    }

    /// The next receive: one a dropped UC message left (it was never completed), or the queue's.
    fn take_recv(&mut self, rq: &mut impl RecvQueue) -> Option<Recv> {
        self.reuse.take().or_else(|| rq.pop())
    }

    /// UC: the message in progress is given up; a SEND's receive is kept for the next one.
    fn abandon(&mut self) {
        if let Cur::Send { recv, .. } = self.cur {
            self.reuse = Some(recv);
        }
        self.cur = Cur::Idle;
    }

    /// An ACK/NAK (no payload) for `psn`; UC answers nothing.
    fn reply(&mut self, code: u8, p: u32, syn: Syndrome, out: &mut impl Sink) {
        if self.uc {
            return;
        }
        let mut r = Packet::new(self.base | code, self.dest_qpn, p, &[]);
        r.ext.aeth = Some(Aeth::new(syn, self.msn));
        out.packet(&r);
    }

    fn ack(&mut self, p: u32, out: &mut impl Sink) {
        self.since_ack = 0;
        self.stats.acks += 1;
        self.reply(op::ACK, p, Syndrome::Ack { credits: NO_CREDITS }, out);
    }

    /// A packet behind the expected PSN: already executed; answer, never execute again.
    fn duplicate(&mut self, pkt: &Packet<'_>, mem: &mut impl Memory, out: &mut impl Sink) {
        let p = pkt.bth.psn();
        match operation(pkt.bth.opcode()) {
            op::READ_REQUEST => {
                let Some(reth) = pkt.ext.reth else { return };
                let hit = self.cache.iter().flatten().find(|r| {
                    matches!(r.kind, RdKind::Read { .. }) && psn::in_range(p, r.psn, r.npkts)
                });
                let Some(&RdRec { psn: first, kind: RdKind::Read { rkey, va, len }, .. }) = hit
                else {
                    return;
                };
                // A retransmitted READ asks for what is missing from packet k on; the request
                // must say exactly that, and is answered from the original (checked) range.
                let off = psn::diff(p, first) as u32 * self.mtu;
                if reth.rkey() != rkey
                    || reth.va() != va.wrapping_add(u64::from(off))
                    || reth.len() != len - off
                {
                    return;
                }
                let _ = self.read_responses(rkey, va, len, first, p, mem, out);
            }
            op::CMP_SWAP | op::FETCH_ADD => {
                let hit = self.cache.iter().flatten().find(|r| r.psn == p);
                if let Some(&RdRec { kind: RdKind::Atomic { orig }, .. }) = hit {
                    self.atomic_ack(p, orig, out);
                }
            }
            _ => {
                if pkt.bth.ack_req() {
                    self.ack(psn::prev(self.epsn), out);
                }
            }
        }
    }

    /// The packet at the expected PSN. `Ok` covers RNR (nothing consumed, PSN not advanced).
    fn execute(
        &mut self,
        pkt: &Packet<'_>,
        mem: &mut impl Memory,
        rq: &mut impl RecvQueue,
        out: &mut impl Sink,
    ) -> Result<(), ClassC> {
        let code = operation(pkt.bth.opcode());
        let p = pkt.bth.psn();
        let n = pkt.payload.len();
        let mtu = self.mtu as usize;
        let pos = position(code).ok_or(ClassC::InvalidRequest)?;
        let size_ok = match pos {
            Position::First | Position::Middle => n == mtu,
            Position::Last => (1..=mtu).contains(&n),
            Position::Only => n <= mtu,
        };
        if !size_ok {
            return Err(ClassC::InvalidRequest);
        }
        // XRC: one message, one SRQ (the layer above took this packet's receive, keys and CQ
        // from the SRQ it names).
        let srqn = pkt.ext.xrc.map(|x| x.srqn());
        match pos {
            Position::First | Position::Only => self.msg_srqn = srqn,
            Position::Middle | Position::Last if self.msg_srqn != srqn => {
                return Err(ClassC::InvalidRequest)
            }
            _ => {}
        }
        let n = n as u32;
        match code {
            op::SEND_FIRST
            | op::SEND_ONLY
            | op::SEND_ONLY_IMM
            | op::SEND_ONLY_INV
            | op::SEND_MIDDLE
            | op::SEND_LAST
            | op::SEND_LAST_IMM
            | op::SEND_LAST_INV => {
                let (recv, off) = match (self.cur, pos) {
                    (Cur::Idle, Position::First | Position::Only) => match self.take_recv(rq) {
                        Some(r) => (r, 0),
                        None => {
                            self.rnr(out);
                            return Ok(());
                        }
                    },
                    (Cur::Send { recv, off }, Position::Middle | Position::Last) => (recv, off),
                    _ => return Err(ClassC::InvalidRequest),
                };
                self.cur = Cur::Send { recv, off };
                if u64::from(off) + u64::from(n) > u64::from(recv.len) {
                    self.cur = Cur::Idle;
                    if self.uc {
                        // The message is dropped; the receive stays posted (as on the rings).
                        self.reuse = Some(recv);
                        return Err(ClassC::InvalidRequest);
                    }
                    out.completion(Completion::recv(
                        recv.wr_id,
                        Status::LocLenErr,
                        WcOpcode::Recv,
                        0,
                    ));
                    return Err(ClassC::InvalidRequest);
                }
                if mem.write_local(recv.sgl, u64::from(off), pkt.payload).is_err() {
                    self.cur = Cur::Idle;
                    out.completion(Completion::recv(
                        recv.wr_id,
                        Status::LocProtErr,
                        WcOpcode::Recv,
                        0,
                    ));
                    return Err(ClassC::Operational);
                }
                let off = off + n;
                if matches!(pos, Position::Last | Position::Only) {
                    self.cur = Cur::Idle;
                    let mut c = Completion::recv(recv.wr_id, Status::Success, WcOpcode::Recv, off);
                    c.imm = pkt.ext.imm.map(|i| i.imm());
                    c.solicited = pkt.bth.se();
                    if let Some(ieth) = pkt.ext.ieth {
                        if mem.invalidate(ieth.rkey()).is_err() {
                            c.status = Status::LocProtErr;
                            out.completion(c);
                            return Err(ClassC::Operational);
                        }
                        c.invalidated = Some(ieth.rkey());
                    }
                    self.msn = psn::add(self.msn, 1);
                    out.completion(c);
                } else {
                    self.cur = Cur::Send { recv, off };
                }
                self.accepted(pkt, out);
            }
            op::WRITE_FIRST
            | op::WRITE_ONLY
            | op::WRITE_ONLY_IMM
            | op::WRITE_MIDDLE
            | op::WRITE_LAST
            | op::WRITE_LAST_IMM => {
                let (rkey, va, len, off) = match (self.cur, pos) {
                    (Cur::Idle, Position::First | Position::Only) => {
                        let reth = pkt.ext.reth.ok_or(ClassC::InvalidRequest)?;
                        let len = reth.len();
                        let fits = if pos == Position::Only { len == n } else { len > n };
                        if !fits || len > MAX_MSG {
                            return Err(ClassC::InvalidRequest);
                        }
                        if len > 0 {
                            mem.check_remote(
                                reth.rkey(),
                                reth.va(),
                                len.into(),
                                Access::RemoteWrite,
                            )
                            .map_err(|_| ClassC::Access)?;
                        }
                        (reth.rkey(), reth.va(), len, 0)
                    }
                    (Cur::Write { rkey, va, len, off }, Position::Middle) if off + n < len => {
                        (rkey, va, len, off)
                    }
                    (Cur::Write { rkey, va, len, off }, Position::Last) if off + n == len => {
                        (rkey, va, len, off)
                    }
                    _ => return Err(ClassC::InvalidRequest),
                };
                let ends = matches!(pos, Position::Last | Position::Only);
                // WRITE with immediate consumes a receive; RNR before anything is written.
                let recv = match (ends, pkt.ext.imm) {
                    (true, Some(_)) => match self.take_recv(rq) {
                        Some(r) => Some(r),
                        None => {
                            self.cur = if pos == Position::Last {
                                Cur::Write { rkey, va, len, off }
                            } else {
                                Cur::Idle
                            };
                            self.rnr(out);
                            return Ok(());
                        }
                    },
                    _ => None,
                };
                if n > 0 {
                    mem.write_remote(rkey, va.wrapping_add(off.into()), pkt.payload)
                        .map_err(|_| ClassC::Access)?;
                }
                if ends {
                    self.cur = Cur::Idle;
                    self.msn = psn::add(self.msn, 1);
                    if let (Some(r), Some(imm)) = (recv, pkt.ext.imm) {
                        let mut c = Completion::recv(
                            r.wr_id,
                            Status::Success,
                            WcOpcode::RecvRdmaWithImm,
                            len,
                        );
                        c.imm = Some(imm.imm());
                        c.solicited = pkt.bth.se();
                        out.completion(c);
                    }
                } else {
                    self.cur = Cur::Write { rkey, va, len, off: off + n };
                }
                self.accepted(pkt, out);
            }
            op::READ_REQUEST => {
                if self.cur != Cur::Idle {
                    return Err(ClassC::InvalidRequest);
                }
                let reth = pkt.ext.reth.ok_or(ClassC::InvalidRequest)?;
                let len = reth.len();
                let npkts = len.div_ceil(self.mtu).max(1);
                if len > MAX_MSG || npkts > MAX_READ_PKTS {
                    return Err(ClassC::InvalidRequest);
                }
                if len > 0 {
                    mem.check_remote(reth.rkey(), reth.va(), len.into(), Access::RemoteRead)
                        .map_err(|_| ClassC::Access)?;
                }
                self.remember(RdRec {
                    psn: p,
                    npkts,
                    kind: RdKind::Read { rkey: reth.rkey(), va: reth.va(), len },
                });
                self.epsn = psn::add(p, npkts);
                self.msn = psn::add(self.msn, 1);
                self.since_ack = 0;
                self.read_responses(reth.rkey(), reth.va(), len, p, p, mem, out)?;
            }
            op::CMP_SWAP | op::FETCH_ADD => {
                if self.cur != Cur::Idle {
                    return Err(ClassC::InvalidRequest);
                }
                let a = pkt.ext.atomic.ok_or(ClassC::InvalidRequest)?;
                let aop = if code == op::CMP_SWAP {
                    AtomicOp::CmpSwap { compare: a.compare(), swap: a.swap_add() }
                } else {
                    AtomicOp::FetchAdd { add: a.swap_add() }
                };
                let orig = mem.atomic(a.rkey(), a.va(), aop).map_err(|_| ClassC::Access)?;
                self.remember(RdRec { psn: p, npkts: 1, kind: RdKind::Atomic { orig } });
                self.epsn = psn::add(p, 1);
                self.msn = psn::add(self.msn, 1);
                self.since_ack = 0;
                self.atomic_ack(p, orig, out);
            }
            _ => return Err(ClassC::InvalidRequest),
        }
        Ok(())
    }

    /// A SEND/WRITE packet was executed: advance, and ACK when asked or every `ack_every`.
    fn accepted(&mut self, pkt: &Packet<'_>, out: &mut impl Sink) {
        let p = pkt.bth.psn();
        self.epsn = psn::add(p, 1);
        self.since_ack += 1;
        if pkt.bth.ack_req() || self.since_ack >= self.ack_every {
            self.ack(p, out);
        }
    }

    /// No receive posted: RNR NAK for the expected PSN (not an error; later packets of the
    /// message are dropped silently until it comes again).
    fn rnr(&mut self, out: &mut impl Sink) {
        if self.uc {
            self.uc_drop = true; // no RNR in UC: the message is dropped
            return;
        }
        self.nak_sent = true;
        self.stats.rnr_naks += 1;
        self.reply(op::ACK, self.epsn, Syndrome::RnrNak { timer: self.min_rnr_timer }, out);
    }

    fn remember(&mut self, r: RdRec) {
        let n = self.cache.len();
        self.cache[self.cache_next % n] = Some(r);
        self.cache_next = (self.cache_next + 1) % n;
    }

    fn atomic_ack(&mut self, p: u32, orig: u64, out: &mut impl Sink) {
        let mut r = Packet::new(self.base | op::ATOMIC_ACK, self.dest_qpn, p, &[]);
        r.ext.aeth = Some(Aeth::new(Syndrome::Ack { credits: NO_CREDITS }, self.msn));
        r.ext.atomic_ack = Some(AtomicAckEth::new(orig));
        out.packet(&r);
    }

    /// READ response packets for `[va, va + len)` (first PSN `first`), from packet `from` on.
    fn read_responses(
        &mut self,
        rkey: u32,
        va: u64,
        len: u32,
        first: u32,
        from: u32,
        mem: &mut impl Memory,
        out: &mut impl Sink,
    ) -> Result<(), ClassC> {
        let npkts = len.div_ceil(self.mtu).max(1);
        let k0 = psn::diff(from, first).max(0) as u32;
        for k in k0..npkts {
            let off = k * self.mtu;
            let n = (len - off).min(self.mtu) as usize;
            // A zero-length READ names no memory (its rkey is not even checked).
            if n > 0 {
                mem.read_remote(rkey, va.wrapping_add(off.into()), &mut self.scratch[..n])
                    .map_err(|_| ClassC::Access)?;
            }
            let pos = match (k == 0, k + 1 == npkts) {
                (true, true) => Position::Only,
                (true, false) => Position::First,
                (false, true) => Position::Last,
                (false, false) => Position::Middle,
            };
            let mut r = Packet::new(
                self.base | opcode::read_response_opcode(pos),
                self.dest_qpn,
                psn::add(first, k),
                &self.scratch[..n],
            );
            if pos != Position::Middle {
                r.ext.aeth = Some(Aeth::new(Syndrome::Ack { credits: NO_CREDITS }, self.msn));
            }
            out.packet(&r);
        }
        Ok(())
    }

    /// Class C error: NAK the expected PSN, then the QP is in error with its async event.
    fn class_c(&mut self, c: ClassC, out: &mut impl Sink) {
        let (nak, ev) = match c {
            ClassC::InvalidRequest => (NakCode::InvalidRequest, QpEvent::QpReqErr),
            ClassC::Access => (NakCode::RemoteAccessError, QpEvent::QpAccessErr),
            ClassC::Operational => (NakCode::RemoteOperationalError, QpEvent::QpFatal),
        };
        self.reply(op::ACK, self.epsn, Syndrome::Nak(nak), out);
        if let Cur::Send { recv, .. } = self.cur {
            out.completion(Completion::recv(recv.wr_id, Status::WrFlushErr, WcOpcode::Recv, 0));
        }
        self.cur = Cur::Idle;
        self.error = true;
        out.event(ev);
    }
}

/// The operation of an opcode: UC's and XRC's opcodes are RC's with the transport bits set
/// (the packet's transport was checked against the QP's before it got here).
fn operation(code: u8) -> u8 {
    code & op::OPERATION
}

/// Where a request opcode sits in its message; `None` for anything that is not an RC request.
fn position(code: u8) -> Option<Position> {
    Some(match code {
        op::SEND_FIRST | op::WRITE_FIRST => Position::First,
        op::SEND_MIDDLE | op::WRITE_MIDDLE => Position::Middle,
        op::SEND_LAST
        | op::SEND_LAST_IMM
        | op::SEND_LAST_INV
        | op::WRITE_LAST
        | op::WRITE_LAST_IMM => Position::Last,
        op::SEND_ONLY
        | op::SEND_ONLY_IMM
        | op::SEND_ONLY_INV
        | op::WRITE_ONLY
        | op::WRITE_ONLY_IMM
        | op::READ_REQUEST
        | op::CMP_SWAP
        | op::FETCH_ADD => Position::Only,
        _ => return None,
    })
}
