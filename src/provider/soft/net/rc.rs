//! An RC or UC QP's network path: the transport engine ([`RcQp`]) joined to what the QP owns.
//!
//! * `Memory` (`rc_mem.rs`): local lists are the SGLs (or inline data) of the requests and
//!   receives the engine holds, named by a handle; every access is checked against the PD's MR
//!   table (`MemoryKeys`) piece by piece, remote ones also against the QP's access flags.
//! * `RecvQueue`: the QP's receive queue or its SRQ.
//! * `Sink`: packets are encoded (`roce::encode`, ICRC over the flow) and sent from the QP's UDP
//!   socket with the QP's GID as source address; completions go to the CQs with the send queue
//!   position verbs needs to retire entries; async events are returned to the QP.
//!
//! Every request is posted to the engine as signaled (its completions come strictly in posting
//! order, so the front of `sends` is the one completing); unsignaled successes are not reported.

use super::endpoint;
use super::io::Io;
use super::rc_mem::Mem;
use crate::provider::soft::roce::{Flow, Packet, ROCE_UDP_PORT};
use crate::provider::soft::transport::{self as t, RcConfig, RcQp};
use crate::provider::{
    Completion, CompletionSink, MemoryKeys, Payload, QpEvent, RecvWqe, SendWqe, Sgl,
    SharedRecvQueue,
};
use crate::sys::*;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ibv_wc_opcode::*;
use ibv_wc_status::*;
use ibv_wr_opcode::*;

/// A local list the engine names by handle.
// Small inline sends stay unboxed, as in the request itself (`Payload`).
#[allow(clippy::large_enum_variant)]
pub(super) enum List {
    Send(Payload),
    Recv(Sgl),
}

struct Posted {
    wr_id: u64,
    seq: u64,
    signaled: bool,
}

/// A receive the engine took: (wr_id, list handle, the CQ it completes on if not the QP's: an
/// XRC target's receives belong to the SRQ each request named).
type Taken = (u64, u64, Option<Arc<dyn CompletionSink>>);

/// What the engine's lists and completions are matched against.
#[derive(Default)]
pub(super) struct Book {
    /// Looked up for every packet in and out; the handles are ours, so a fast hash is safe.
    pub(super) lists: FxHashMap<u64, List>,
    next: u64,
    /// Requests in the engine, oldest first: (request, its list handle).
    sends: VecDeque<(Posted, u64)>,
    /// Receives the engine took, oldest first.
    recvs: VecDeque<Taken>,
}

impl Book {
    pub(super) fn add(&mut self, l: List) -> u64 {
        self.next += 1;
        self.lists.insert(self.next, l);
        self.next
    }
}

/// The QP's parts the engine's adapters use.
pub struct Ctx<'a> {
    pub qpn: u32,
    pub keys: &'a dyn MemoryKeys,
    pub srq: Option<&'a dyn SharedRecvQueue>,
    pub send_cq: &'a dyn CompletionSink,
    pub recv_cq: &'a dyn CompletionSink,
    pub sig_all: bool,
    pub access: u32,
    /// XRC target: `recv_cq` owned (the CQ of the SRQ the request names), so that receives
    /// taken now can be flushed there later.
    pub xrc_cq: Option<Arc<dyn CompletionSink>>,
}

/// What a call into the engine led to.
#[derive(Default)]
pub struct Outcome {
    /// Packets or completions came out.
    pub moved: bool,
    pub events: Vec<QpEvent>,
    /// The engine is in error: the QP must move to ERR.
    pub error: bool,
    /// When the engine wants to be polled again (engine time, see `net::now_ns`).
    pub deadline: Option<u64>,
    /// When the ACKs kept back for the application's answer are to go if it has not answered
    /// (engine time; see `Io::flush_or_hold`): the next call after it sends them.
    pub acks_due: Option<u64>,
}

pub struct NetRc {
    rc: RcQp,
    cfg: RcConfig,
    book: RefCell<Book>,
    io: Io,
    /// Requests the engine's queue had no room for yet (posting order).
    pending: VecDeque<t::SendWr>,
    /// `RDMASHIM_NET_DEBUG`: the last packets in and out, dumped with the engine's state.
    trace: Option<super::trace::Trace>,
}

impl NetRc {
    /// The path to `dst_ip` for a QP whose socket is `sock` (the responder starts at RTR).
    pub fn new(
        cfg: RcConfig,
        sock: Arc<endpoint::Sock>,
        src_ip: IpAddr,
        dst_ip: IpAddr,
    ) -> Option<NetRc> {
        let my_port = endpoint::port_of(cfg.qpn);
        let dst = SocketAddr::new(dst_ip, endpoint::dest_port(cfg.dest_qpn));
        let flow = Flow::new(SocketAddr::new(src_ip, my_port), dst)?;
        let mtu = cfg.mtu();
        Some(NetRc {
            rc: RcQp::new(&cfg),
            cfg,
            book: RefCell::new(Book::default()),
            io: Io::new(sock, src_ip, dst, flow, mtu as usize + 256),
            pending: VecDeque::new(),
            trace: super::trace::Trace::from_env(),
        })
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> RcConfig {
        self.cfg
    }

    /// RTR → RTS: the requester starts with the attributes given for RTS (sq_psn, timers).
    pub fn start_requester(&mut self, cfg: RcConfig) {
        self.cfg = cfg;
        self.rc.req = t::Requester::new(&cfg);
    }

    /// Whether a packet from `from` comes from our peer: the address and port of its QP's
    /// socket, or for another stack's QP (reached at port 4791) its address and any port (a
    /// RoCEv2 source port is the sender's entropy).
    pub fn is_peer(&self, from: &SocketAddr) -> bool {
        let ip = match from.ip() {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
            v4 => v4,
        };
        let port = self.io.dst().port();
        ip == self.io.dst().ip() && (from.port() == port || port == ROCE_UDP_PORT)
    }

    /// A packet from the peer, read at engine time `now`.
    pub fn on_packet(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        pkt: &Packet<'_>,
        now: u64,
    ) -> Outcome {
        self.note("in", pkt);
        let ahead = self.rc.resp.stats.ahead;
        // What the packet leads to waits for the end of the socket read's batch (`flush_out`).
        let o = self.run_deferred(ctx, rq, |rc, mem, q, out| rc.on_packet(pkt, now, mem, q, out));
        if lands_write(pkt) {
            // The application may be spinning on that memory, and answer.
            self.io.note_answerable();
        }
        let a = self.rc.resp.stats.ahead;
        if self.trace.is_some() && a != ahead && a.is_power_of_two() && a >= 64 {
            self.dump("packets ahead dropped");
        }
        o
    }

    /// A request packet the QP cannot take (see `RcQp::refuse`).
    pub fn refuse(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        pkt: &Packet<'_>,
    ) -> Outcome {
        self.note("in (refused)", pkt);
        self.run_deferred(ctx, rq, |rc, mem, _q, out| rc.refuse(pkt, mem, out))
    }

    fn note(&mut self, dir: &str, p: &Packet<'_>) {
        if let Some(t) = self.trace.as_mut() {
            t.note(dir, p);
        }
    }

    /// `RDMASHIM_NET_DEBUG`: the engine's state and the last packets (see `net::trace`).
    fn dump(&self, why: &str) {
        if let Some(t) = self.trace.as_ref() {
            t.dump(self.cfg.qpn, why, &(&self.rc.req, &self.rc.resp));
        }
    }

    /// Queues a send request (its local buffers were checked by the caller) and transmits.
    /// `Err` with an `ibv_wc_status` if the engine refuses it.
    pub fn post(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        w: SendWqe,
    ) -> Result<Outcome, u32> {
        let op = match w.opcode {
            IBV_WR_SEND => t::WrOp::Send,
            IBV_WR_SEND_WITH_IMM => t::WrOp::SendImm(w.imm.unwrap_or(0)),
            IBV_WR_SEND_WITH_INV => t::WrOp::SendInv(w.rkey),
            IBV_WR_RDMA_WRITE => t::WrOp::Write,
            IBV_WR_RDMA_WRITE_WITH_IMM => t::WrOp::WriteImm(w.imm.unwrap_or(0)),
            IBV_WR_RDMA_READ => t::WrOp::Read,
            IBV_WR_ATOMIC_CMP_AND_SWP => t::WrOp::CmpSwap { compare: w.compare_add, swap: w.swap },
            IBV_WR_ATOMIC_FETCH_AND_ADD => t::WrOp::FetchAdd { add: w.compare_add },
            _ => return Err(IBV_WC_LOC_QP_OP_ERR),
        };
        let len = u32::try_from(w.len).map_err(|_| IBV_WC_LOC_LEN_ERR)?;
        if op.is_atomic() && len != 8 {
            return Err(IBV_WC_LOC_LEN_ERR);
        }
        let uc = self.cfg.transport == t::Transport::Uc;
        if uc && matches!(op, t::WrOp::SendInv(_)) {
            return Err(IBV_WC_LOC_QP_OP_ERR); // UC has no SEND with invalidate on the wire
        }
        let handle = self.book.get_mut().add(List::Send(w.payload));
        let wr = t::SendWr {
            wr_id: w.wr_id,
            op,
            sgl: t::Sgl(handle),
            len,
            remote_va: w.remote_addr,
            rkey: w.rkey,
            signaled: true,
            solicited: w.solicited,
            xrc_srqn: w.xrc_srqn,
        };
        let posted = Posted { wr_id: w.wr_id, seq: w.seq, signaled: w.signaled || ctx.sig_all };
        self.book.get_mut().sends.push_back((posted, handle));
        self.pending.push_back(wr);
        // With requests outstanding, an ACK (or the retransmission timer) is due, and what it
        // brings sends the packets waiting in the slots (`flush_out`, `poll`): posts in a
        // stream leave together, as runs, instead of one system call each. A post onto an
        // idle QP goes at once (latency), and so does every UC post: nothing answers UC.
        let send_now = uc || self.rc.req.outstanding() == 0;
        // No timers here: ACKs may wait unread at the socket (the progress path reads first).
        Ok(self.push(ctx, rq, false, send_now))
    }

    /// Timers and transmission; call after reading the socket.
    pub fn poll(&mut self, ctx: &Ctx<'_>, rq: &mut VecDeque<RecvWqe>) -> Outcome {
        self.push(ctx, rq, true, true)
    }

    fn push(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        timers: bool,
        send_now: bool,
    ) -> Outcome {
        let now = super::now_ns();
        let timeouts = self.rc.req.stats.timeouts;
        let mut pending = std::mem::take(&mut self.pending);
        let step = |rc: &mut RcQp, mem: &mut Mem<'_>, _q: &mut Rq<'_>, out: &mut Out<'_>| {
            while let Some(wr) = pending.front() {
                match rc.post(*wr, out) {
                    Err(t::PostError::QueueFull) => break,
                    // Checked before queueing (atomic length); cannot happen.
                    Err(t::PostError::Invalid) | Ok(()) => {
                        pending.pop_front();
                    }
                }
            }
            if timers {
                rc.poll(now, mem, out)
            } else {
                rc.send_more(now, mem, out)
            }
        };
        let o = if send_now { self.run(ctx, rq, step) } else { self.run_deferred(ctx, rq, step) };
        self.pending = pending;
        if self.rc.req.stats.timeouts != timeouts {
            self.dump("IB timeout");
        }
        o
    }

    /// The QP moves to ERR (or RESET): every request and taken receive completes flushed.
    pub fn flush(&mut self, ctx: &Ctx<'_>, rq: &mut VecDeque<RecvWqe>) {
        self.dump("flush");
        let pending = std::mem::take(&mut self.pending);
        self.run_deferred(ctx, rq, |rc, _mem, _q, out| {
            rc.req.flush(out);
            rc.resp.stop();
            for wr in pending {
                let _ = rc.post(wr, out); // the engine is stopped: flushed at once
            }
        });
        self.io.flush();
        let book = self.book.get_mut();
        for (wr_id, h, cq) in book.recvs.drain(..) {
            book.lists.remove(&h);
            cq.as_deref().unwrap_or(ctx.recv_cq).push(Completion {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: IBV_WC_RECV,
                qp_num: ctx.qpn,
                ..Completion::default()
            });
        }
    }

    /// Whether requests or taken receives wait for completions.
    pub fn busy(&self) -> bool {
        let book = self.book.borrow();
        !book.sends.is_empty() || !book.recvs.is_empty() || !self.pending.is_empty()
    }

    /// Sends the packets a batch of received ones led to (see `on_packet`), ACKs perhaps
    /// kept back (see `Io::flush_or_hold`): when those are due.
    pub fn flush_out(&mut self) -> Option<u64> {
        self.io.flush_or_hold();
        self.io.acks_due()
    }

    /// Sends what is waiting, ACKs kept back included: for an application that will not call
    /// again soon.
    pub fn send_waiting(&mut self) {
        self.io.flush();
    }

    fn run(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        f: impl FnOnce(&mut RcQp, &mut Mem<'_>, &mut Rq<'_>, &mut Out<'_>),
    ) -> Outcome {
        let mut o = self.run_deferred(ctx, rq, f);
        self.io.flush_or_hold();
        o.acks_due = self.io.acks_due();
        o
    }

    /// [`NetRc::run`] leaving the packets produced in their slots.
    fn run_deferred(
        &mut self,
        ctx: &Ctx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        f: impl FnOnce(&mut RcQp, &mut Mem<'_>, &mut Rq<'_>, &mut Out<'_>),
    ) -> Outcome {
        let book = &self.book;
        let mut mem = Mem { keys: ctx.keys, book, access: ctx.access };
        let mut q = Rq { rq, srq: ctx.srq, cq: ctx.xrc_cq.as_ref(), book };
        let mut out = Out {
            io: &mut self.io,
            book,
            ctx,
            moved: false,
            events: Vec::new(),
            trace: self.trace.as_mut(),
        };
        f(&mut self.rc, &mut mem, &mut q, &mut out);
        let (moved, events) = (out.moved, out.events);
        if self.rc.is_error() {
            self.dump("engine error");
        }
        Outcome {
            moved,
            events: events.into_iter().map(event_of).collect(),
            error: self.rc.is_error(),
            deadline: self.rc.next_deadline(),
            acks_due: None,
        }
    }
}

impl Drop for NetRc {
    fn drop(&mut self) {
        self.dump("destroyed");
        // ACKs kept back for the application's next call: a NIC would have sent them.
        self.io.flush();
    }
}

/// Whether `pkt` is the last packet of an RDMA WRITE (a request; the responder checks it).
fn lands_write(pkt: &Packet<'_>) -> bool {
    use crate::provider::soft::roce::opcode::op;
    matches!(pkt.bth.opcode() & op::OPERATION, op::WRITE_LAST | op::WRITE_ONLY)
}

fn event_of(e: t::QpEvent) -> QpEvent {
    match e {
        t::QpEvent::QpAccessErr => QpEvent::AccessError,
        t::QpEvent::QpReqErr => QpEvent::RequestError,
        t::QpEvent::QpFatal => QpEvent::Fatal,
    }
}

fn status_of(s: t::Status) -> u32 {
    match s {
        t::Status::Success => IBV_WC_SUCCESS,
        t::Status::LocLenErr => IBV_WC_LOC_LEN_ERR,
        t::Status::LocProtErr => IBV_WC_LOC_PROT_ERR,
        t::Status::WrFlushErr => IBV_WC_WR_FLUSH_ERR,
        t::Status::RemInvReqErr => IBV_WC_REM_INV_REQ_ERR,
        t::Status::RemAccessErr => IBV_WC_REM_ACCESS_ERR,
        t::Status::RemOpErr => IBV_WC_REM_OP_ERR,
        t::Status::RetryExcErr => IBV_WC_RETRY_EXC_ERR,
        t::Status::RnrRetryExcErr => IBV_WC_RNR_RETRY_EXC_ERR,
    }
}

fn opcode_of(o: t::WcOpcode) -> u32 {
    match o {
        t::WcOpcode::Send => IBV_WC_SEND,
        t::WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        t::WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        t::WcOpcode::CmpSwap => IBV_WC_COMP_SWAP,
        t::WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        t::WcOpcode::Recv => IBV_WC_RECV,
        t::WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

struct Rq<'a> {
    rq: &'a mut VecDeque<RecvWqe>,
    srq: Option<&'a dyn SharedRecvQueue>,
    /// Where the receives taken complete if not on the QP's CQ (`Ctx::xrc_cq`).
    cq: Option<&'a Arc<dyn CompletionSink>>,
    book: &'a RefCell<Book>,
}

impl t::RecvQueue for Rq<'_> {
    fn pop(&mut self) -> Option<t::Recv> {
        let w = match self.srq {
            Some(s) => s.pop()?,
            None => self.rq.pop_front()?,
        };
        let len = u32::try_from(w.sges.total()).unwrap_or(u32::MAX);
        let mut book = self.book.borrow_mut();
        let h = book.add(List::Recv(w.sges));
        book.recvs.push_back((w.wr_id, h, self.cq.cloned()));
        Some(t::Recv { wr_id: w.wr_id, sgl: t::Sgl(h), len })
    }
}

struct Out<'a> {
    io: &'a mut Io,
    trace: Option<&'a mut super::trace::Trace>,
    book: &'a RefCell<Book>,
    ctx: &'a Ctx<'a>,
    moved: bool,
    events: Vec<t::QpEvent>,
}

impl t::Sink for Out<'_> {
    fn packet(&mut self, pkt: &Packet<'_>) {
        self.moved = true;
        if let Some(t) = self.trace.as_mut() {
            t.note("out", pkt);
        }
        self.io.push(pkt);
    }

    fn completion(&mut self, c: t::Completion) {
        self.moved = true;
        self.io.note_answerable();
        let mut book = self.book.borrow_mut();
        let mut wc = Completion {
            wr_id: c.wr_id,
            status: status_of(c.status),
            opcode: opcode_of(c.opcode),
            byte_len: c.byte_len,
            qp_num: self.ctx.qpn,
            solicited: c.solicited,
            ..Completion::default()
        };
        if c.is_recv {
            if let Some((_, h, _)) = book.recvs.pop_front() {
                book.lists.remove(&h);
            }
            if let Some(imm) = c.imm {
                wc.imm = imm;
                wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_IMM.0;
            } else if let Some(rkey) = c.invalidated {
                wc.imm = rkey; // ibv_wc.invalidated_rkey shares the union with imm_data
                wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_INV.0;
            }
            drop(book);
            self.ctx.recv_cq.push(wc);
        } else {
            let Some((p, h)) = book.sends.pop_front() else { return };
            book.lists.remove(&h);
            drop(book);
            wc.sq_seq = p.seq;
            wc.wr_id = p.wr_id;
            if p.signaled || c.status != t::Status::Success {
                self.ctx.send_cq.push(wc);
            }
        }
    }

    fn event(&mut self, e: t::QpEvent) {
        self.events.push(e);
    }
}
