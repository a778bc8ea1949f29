//! An RC, UC or XRC QP whose peer is behind the network (another namespace or host): the choice of the
//! link at RTR and the calls into its network path ([`super::net::rc::NetRc`]) from the QP's
//! operations, under the QP's lock.

use super::net::rc::{Ctx, NetRc, Outcome};
use super::net::{self, route};
use super::qp::{Inner, SoftQp};
use crate::provider::soft::roce::Packet;
use crate::provider::soft::transport::{RcConfig, Transport};
use crate::provider::{QpAttrs, QpEvent, QpState, SendWqe, Xrc};
use crate::runtime::engine::engine;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::sys::ibv_wc_status::*;

/// Unacknowledged packets in flight at most, and how often the responder ACKs unasked. A
/// 1 MiB message is 1024 packets at a 1024-byte path MTU, and an ACK comes back only after the
/// receiver has worked through the packets ahead of it: 128 in flight was too few for that
/// round trip (1 MiB `ib_send_bw` and `ib_write_bw` across a veth 15-25% slower than with
/// 512, medians of interleaved runs), as root and as a user whose socket buffers Debian's
/// default `rmem_max` caps at 416 KiB. Loss shrinks the window (the engine's cwnd).
const WINDOW: u32 = 512;
const ACK_EVERY: u32 = 16;
/// The engine's send queue: the device's `max_qp_wr` (verbs admits no more).
const SQ_DEPTH: u32 = 16384;
/// READ/atomic requests outstanding at once on the network path, at most. A responder answers
/// a READ with all its response packets at once, and our socket's receive buffer must hold
/// what is outstanding (two 8 MiB READs), or the bursts drop each other's packets.
const NET_RD_ATOMIC: u8 = 2;

impl SoftQp {
    fn net_ctx(&self, access: u32) -> Ctx<'_> {
        Ctx {
            qpn: self.qpn,
            keys: &*self.keys,
            srq: self.srq.as_deref(),
            send_cq: &*self.send_cq,
            recv_cq: &*self.recv_cq,
            sig_all: self.sq_sig_all,
            access,
            xrc_cq: None,
        }
    }

    fn rc_config(&self, a: &QpAttrs, mtu: u32) -> RcConfig {
        RcConfig {
            transport: match (self.uc, &self.xrc) {
                (true, _) => Transport::Uc,
                (false, Xrc::None) => Transport::Rc,
                (false, _) => Transport::Xrc,
            },
            qpn: self.qpn,
            dest_qpn: a.dest_qp_num,
            sq_psn: a.sq_psn,
            rq_psn: a.rq_psn,
            mtu,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt.min(7),
            rnr_retry: a.rnr_retry.min(7),
            min_rnr_timer: a.min_rnr_timer & 31,
            max_rd_atomic: a.max_rd_atomic.clamp(1, NET_RD_ATOMIC),
            max_dest_rd_atomic: a.max_dest_rd_atomic.max(1),
            sq_depth: SQ_DEPTH,
            window: WINDOW,
            ack_every: ACK_EVERY,
        }
    }

    /// At INIT → RTR: if the destination GID is not an address of our network namespace, the
    /// QP talks RoCEv2 over UDP (returns `true`); otherwise the shared-memory link is used.
    pub(super) fn connect_net(&self, st: &mut Inner) -> bool {
        let a = st.attr;
        if !peer_is_remote(&a) {
            return false;
        }
        let dst = route::ip_of_gid(&a.dgid);
        let src = route::ip_of_gid(&a.sgid);
        let route_mtu = route::path_mtu(dst).unwrap_or(1024);
        let mtu = if a.path_mtu == 0 { route_mtu } else { a.path_mtu.min(route_mtu) };
        let cfg = self.rc_config(&a, mtu);
        match NetRc::new(cfg, self.udp.clone(), src, dst) {
            Some(n) => {
                st.net = Some(Box::new(n));
                super::qp::send_kept_acks_at_exit();
                true
            }
            None => false, // GIDs of two families: no path (sends will time out)
        }
    }

    /// At RTR → RTS: the requester starts with the attributes given now (sq_psn, timers).
    pub(super) fn net_rts(&self, st: &mut Inner) {
        let a = st.attr;
        if let Some(n) = st.net.as_mut() {
            let mtu = n.config().mtu;
            n.start_requester(self.rc_config(&a, mtu));
        }
    }

    /// Posts a send request on the network path (the QP is not in ERR).
    pub(super) fn post_send_net(&self, st: &mut Inner, w: SendWqe) {
        if w.is_local() {
            // Executed by verbs when posted; on this path its completion does not wait for
            // earlier requests still outstanding (docs/DESIGN-NOTES.md, memory windows).
            let (wr_id, op, seq, status) = (w.wr_id, w.wc_opcode(), w.seq, w.local_status);
            if status != IBV_WC_SUCCESS {
                self.error_completion(st, wr_id, seq, status, op);
            } else if w.signaled || self.sq_sig_all {
                self.send_cq.push(crate::provider::Completion {
                    wr_id,
                    status,
                    opcode: op,
                    qp_num: self.qpn,
                    sq_seq: seq,
                    ..Default::default()
                });
            }
            return;
        }
        if let crate::provider::Payload::Sges(sgl) = &w.payload {
            if self.check_local(sgl, w.local_access()).is_err() {
                let (wr_id, op, seq) = (w.wr_id, w.wc_opcode(), w.seq);
                self.error_completion(st, wr_id, seq, IBV_WC_LOC_PROT_ERR, op);
                return;
            }
        }
        let (wr_id, op, seq) = (w.wr_id, w.wc_opcode(), w.seq);
        let ctx = self.net_ctx(st.attr.qp_access_flags);
        let Some(n) = st.net.as_mut() else { return };
        match n.post(&ctx, &mut st.rq, w) {
            Ok(o) => {
                self.net_after(st, o);
            }
            Err(status) => self.error_completion(st, wr_id, seq, status, op),
        }
    }

    /// Timers and transmission of the network path; whether anything moved.
    pub(super) fn progress_net(&self, st: &mut Inner) -> bool {
        if !matches!(st.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return false;
        }
        let ctx = self.net_ctx(st.attr.qp_access_flags);
        let Some(n) = st.net.as_mut() else { return false };
        let o = n.poll(&ctx, &mut st.rq);
        self.net_after(st, o)
    }

    /// A packet for this QP (its ICRC checked) from `from`.
    pub(super) fn on_net_packet(&self, pkt: &Packet<'_>, from: &SocketAddr, now: u64) -> bool {
        let mut g = self.lock_state();
        let st = &mut *g;
        if !matches!(st.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return false;
        }
        // XRC: a request's receive, keys and CQ are those of the SRQ it names in our domain;
        // one naming none, or one to an initiator (which has no responder), is refused.
        let target = match (&self.xrc, pkt.ext.xrc) {
            (Xrc::Recv(domain), Some(x)) => Some(domain.target(x.srqn())),
            (Xrc::Send, Some(_)) => Some(None),
            _ => None,
        };
        let mut ctx = self.net_ctx(st.attr.qp_access_flags);
        if let Some(Some(t)) = &target {
            ctx.srq = Some(&*t.srq);
            ctx.keys = &*t.keys;
            ctx.recv_cq = &*t.cq;
            ctx.xrc_cq = Some(t.cq.clone());
        }
        let Some(n) = st.net.as_mut() else { return false };
        if !n.is_peer(from) {
            return false; // a connected QP hears only its peer
        }
        let o = if matches!(target, Some(None)) {
            n.refuse(&ctx, &mut st.rq, pkt)
        } else {
            n.on_packet(&ctx, &mut st.rq, pkt, now)
        };
        self.net_after(st, o);
        true
    }

    /// Sends what the packets delivered since the last call led to (see `qp::Delivered`).
    pub(super) fn flush_net_out(&self) {
        let mut g = self.lock_state();
        if let Some(n) = g.net.as_mut() {
            let due = n.flush_out();
            self.note_acks_due(due);
        }
    }

    /// ACKs kept back for the application's answer (see `net::io`) go when `due` passes, if no
    /// call sends them first: the progress thread runs by then (or a nap later: see
    /// `Engine::wake_by`), and its routine pass does not leave this QP out.
    fn note_acks_due(&self, due: Option<u64>) {
        let was = self.acks_due.swap(due.unwrap_or(0), Ordering::Relaxed);
        if let (Some(d), Ok(e)) = (due, engine()) {
            if was != d {
                e.wake_by(net::instant_of(d));
            }
        }
    }

    /// Whether ACKs kept back are due.
    pub(super) fn acks_overdue(&self) -> bool {
        let due = self.acks_due.load(Ordering::Relaxed);
        due != 0 && net::now_ns() >= due
    }

    /// The move to ERR or RESET: the network path's requests and taken receives flush.
    pub(super) fn net_flush(&self, st: &mut Inner) {
        let ctx = self.net_ctx(st.attr.qp_access_flags);
        if let Some(mut n) = st.net.take() {
            n.flush(&ctx, &mut st.rq);
        }
    }

    /// After a call into the engine: its error moves the QP to ERR with its async events, and
    /// its next timer is armed.
    fn net_after(&self, st: &mut Inner, o: Outcome) -> bool {
        if o.error && st.state != QpState::Err {
            self.to_error(st);
            if o.events.is_empty() {
                self.events.qp_event(QpEvent::Fatal);
            }
            for e in o.events {
                self.events.qp_event(e);
            }
            return true;
        }
        if let (Some(d), Ok(e)) = (o.deadline, engine()) {
            e.wake_at(net::instant_of(d));
        }
        self.note_acks_due(o.acks_due);
        o.moved
    }
}

/// Whether the address vector leads to another network namespace or host (the UDP path).
pub(super) fn peer_is_remote(a: &QpAttrs) -> bool {
    a.has_grh
        && a.dgid != [0; 16]
        && a.sgid != [0; 16]
        && !route::is_local(route::ip_of_gid(&a.dgid))
}
