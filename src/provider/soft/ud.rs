//! The UD data path: datagrams of at most one MTU to a QPN (or to every QP attached to a
//! multicast group), a 40-byte GRH in front of every received message, qkey matching, and
//! silent drops where InfiniBand drops (no receive posted, wrong qkey, unknown QP).

use super::datagram::{self, UdHdr, HDR_LEN, MCAST_QPN, UD_IMM, UD_MTU, UD_SOLICITED};
use super::qp::{Inner, SoftQp};
use super::sgl_copy::{place_in, take_out};
use super::ud_backlog::{Held, DROPPED_FULL, GRACE};
use crate::errno::{Errno, Result};
use crate::provider::{
    AccessError, Completion, QpState, SendWqe, Sgl, ACCESS_LOCAL_WRITE, GRH_LEN,
};
use crate::runtime::access;
use crate::runtime::engine::{engine, on_progress_thread};
use crate::runtime::unix::{self, Pod};
use crate::sys::*;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Datagrams taken per readiness event of a UD QP's socket.
const MAX_BATCH: usize = 64;

use ibv_wc_opcode::*;
use ibv_wc_status::*;

fn grh(h: &UdHdr) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[0] = 0x60; // IP version 6, traffic class 0, flow label 0
    g[4..6].copy_from_slice(&(h.len as u16).to_be_bytes());
    g[6] = 0x1b; // next header: IB BTH (RoCEv2 style)
    g[7] = 64; // hop limit
    g[8..24].copy_from_slice(&h.sgid);
    g[24..40].copy_from_slice(&h.dgid);
    g
}

impl SoftQp {
    /// What a UD send request must satisfy to be accepted at post time.
    pub(super) fn check_ud(w: &SendWqe) -> Result<()> {
        let ok_op =
            matches!(w.opcode, ibv_wr_opcode::IBV_WR_SEND | ibv_wr_opcode::IBV_WR_SEND_WITH_IMM);
        if w.ud.is_none() || !ok_op || w.len as usize > UD_MTU {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// Sends one UD request (UD has no acknowledgements: it completes when sent, or when a full
    /// destination's grace runs out: `ud_backlog`).
    pub(super) fn post_send_ud(&self, st: &mut Inner, w: SendWqe) -> Result<()> {
        Self::check_ud(&w)?;
        let ud = w.ud.as_ref().ok_or(Errno::EINVAL)?;
        let mut buf = [0u8; UD_MTU];
        let n = w.len as usize;
        // Each entry is looked up and read while it stays registered (a whole-message check:
        // the entries together hold exactly `n` bytes), so a region another thread deregisters
        // meanwhile is not read.
        // SAFETY: n <= UD_MTU (check_ud), so buf holds it; n is the payload's length.
        if unsafe { take_out(&*self.keys, &w.payload, 0, buf.as_mut_ptr(), n) }.is_err() {
            self.error_completion(st, w.wr_id, w.seq, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND);
            return Ok(());
        }
        // A qkey with the high bit set means "use the QP's own qkey" (IBA 10.2.5).
        let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { st.attr.qkey } else { ud.remote_qkey };
        let (sgid, dgid) = (ud.sgid, ud.dgid);
        let mut h = UdHdr::new(self.qpn, ud.remote_qpn, qkey, sgid, dgid);
        h.len = n as u32;
        if let Some(imm) = w.imm {
            h.imm = imm;
            h.flags |= UD_IMM;
        }
        if w.solicited {
            h.flags |= UD_SOLICITED;
        }
        let payload = &buf[..n];
        // Destinations on this host: the QPN, or the group's members here (listed into the
        // QP's own buffer, put back below).
        let mut members = std::mem::take(&mut st.mcast_members);
        let local: &[u32] = if ud.remote_qpn == MCAST_QPN {
            super::groups::members_into(&dgid, &mut members);
            &members
        } else if self.is_remote(st, &dgid) {
            self.send_ud_net(&h, sgid, dgid, payload);
            &[]
        } else {
            std::slice::from_ref(&ud.remote_qpn)
        };
        let local_is_empty = local.is_empty();
        let skip_self = ud.remote_qpn == MCAST_QPN && self.block_self_mcast();
        let local = local.iter().copied().filter(|&m| !(skip_self && m == self.qpn));
        // Behind a held request everything waits its turn (completions keep send-queue order);
        // otherwise each destination is offered the datagram now, and the full ones are held.
        let sock = self.socket().as_raw_fd();
        let parts = [h.as_bytes(), payload];
        let full: Vec<u32> = if !st.ud_backlog.is_empty() {
            local.collect()
        } else {
            // A member's copy goes by its ring as a unicast one does (the header names the
            // group); a member found gone leaves this process's list of the group.
            let msgs = [(h, payload)];
            let rings = &mut st.ud_rings;
            local
                .filter(|&m| {
                    let t = rings.offer(sock, self.qpn, m, &msgs, &parts);
                    if t.gone && h.dst_qpn == MCAST_QPN {
                        super::groups::gone(&dgid, m);
                    }
                    t.count == 0
                })
                .collect()
        };
        st.mcast_members = members;
        let mut on_net = false;
        if ud.remote_qpn == MCAST_QPN {
            // Members in other namespaces: one RoCEv2 datagram to the IP group.
            let from = crate::provider::soft::net::route::ip_of_gid(&sgid);
            if super::net::mcast::group_of(&dgid).is_some()
                && !from.is_loopback()
                && !from.is_unspecified()
            {
                self.send_ud_net(&h, sgid, dgid, payload);
                on_net = true;
            }
        } else {
            on_net = local_is_empty;
        }
        // The network datagram is in the capture already; a same-host one stands for one.
        if !on_net && super::ring_capture::on() {
            super::ring_capture::datagram(&sgid, &dgid, &super::ud_net::ud_packet(&h, payload));
        }
        let signaled = w.signaled || self.sq_sig_all;
        if full.is_empty() && st.ud_backlog.is_empty() {
            if signaled {
                self.send_cq.push(sent(w.wr_id, w.seq, n as u32, self.qpn));
            }
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(HDR_LEN + n);
        bytes.extend_from_slice(h.as_bytes());
        bytes.extend_from_slice(payload);
        st.ud_backlog.hold(Held {
            wr_id: w.wr_id,
            seq: w.seq,
            signaled,
            byte_len: n as u32,
            dsts: full,
            bytes,
            deadline: Instant::now() + GRACE,
        });
        self.arm_ud_retry(st, Duration::ZERO);
        Ok(())
    }

    /// Schedules a retry of the held datagrams on the progress thread, unless one is scheduled.
    fn arm_ud_retry(&self, st: &mut Inner, after: Duration) {
        if st.ud_backlog.armed {
            return;
        }
        let Ok(e) = engine() else { return };
        st.ud_backlog.armed = true;
        let me = self.me.clone();
        e.after(
            after,
            Box::new(move || {
                if let Some(qp) = me.upgrade() {
                    qp.retry_ud_backlog(true);
                }
            }),
        );
    }

    /// A UD QP's part of a CQ poll, on the polling thread: datagrams waiting at our socket are
    /// delivered, and held ones offered again (the poll comes round far sooner than the
    /// progress thread's retry timer, whose epoll timeout counts in milliseconds). Whether
    /// anything moved.
    pub(super) fn progress_ud(&self) -> bool {
        let (expects, held) = {
            let st = self.lock_state();
            (self.has_recv(&st), !st.ud_backlog.is_empty())
        };
        // What same-host senders wrote into their rings is taken here, with no system call
        // (dropped if no receive is posted, as InfiniBand drops it on arrival). The socket is
        // read too while datagrams come that way (`Receivers::socket_due`), so a polling
        // receiver need not wait for the progress thread to wake for each; only by a QP with a
        // receive posted (without one, what waits there would be dropped anyway, and the
        // progress thread, which watches the socket, does that).
        let mut did = self.receive(expects && on_progress_thread(), expects);
        if held {
            self.retry_ud_backlog(false);
            did = true;
        }
        did
    }

    /// A retry (`timer`: the progress thread's scheduled one): held datagrams that find room
    /// go, those past their grace are dropped, and either way their requests complete in
    /// order; a retry is scheduled while anything is still held.
    fn retry_ud_backlog(&self, timer: bool) {
        let mut st = self.lock_state();
        if timer {
            st.ud_backlog.armed = false;
        }
        let sock = self.socket().as_raw_fd();
        let (cq, qpn) = (&self.send_cq, self.qpn);
        let Inner { ud_backlog, ud_rings, .. } = &mut *st;
        let next = ud_backlog.retry(
            Instant::now(),
            |d, parts| {
                // Each part is one whole message (header and payload).
                let msgs: Vec<(UdHdr, &[u8])> = parts
                    .iter()
                    .filter_map(|p| Some((UdHdr::from_bytes(p)?, p.get(HDR_LEN..)?)))
                    .collect();
                let t = ud_rings.offer(sock, qpn, d, &msgs, parts);
                if t.gone {
                    for (h, _) in msgs.iter().filter(|(h, _)| h.dst_qpn == MCAST_QPN) {
                        super::groups::gone(&h.dgid, d);
                    }
                }
                t.count
            },
            |h| {
                for d in &h.dsts {
                    crate::trace::note(format_args!(
                        "ud: qpn {qpn:#x}: datagram to qpn {d:#x} dropped (its queue stayed full \
                         for {GRACE:?}; {} dropped so far)",
                        DROPPED_FULL.load(Ordering::Relaxed)
                    ));
                }
                if h.signaled {
                    cq.push(sent(h.wr_id, h.seq, h.byte_len, qpn));
                }
            },
        );
        if let Some(after) = next {
            self.arm_ud_retry(&mut st, after);
        }
    }

    /// The move to ERR: held requests complete with `IBV_WC_WR_FLUSH_ERR`, in order.
    pub(super) fn flush_ud_backlog(&self, st: &mut Inner) {
        for h in st.ud_backlog.take_all() {
            self.flush(&*self.send_cq, h.wr_id, IBV_WC_SEND, h.seq);
        }
    }

    /// Takes the datagrams waiting at our socket and delivers them into posted receives;
    /// whether any came. Nothing if another thread is reading them (it delivers in order).
    pub(super) fn receive_datagrams(&self) -> bool {
        self.receive(true, true)
    }

    /// [`Self::receive_datagrams`]; the socket is read if `socket`, or if `may_read` and a
    /// polling application's turn comes (`ud_ring::Receivers::socket_due`).
    fn receive(&self, socket: bool, may_read: bool) -> bool {
        let Ok(mut r) = self.ud_reading.try_lock() else { return false };
        let r = &mut *r;
        if r.buf.len() < datagram::COALESCE_BYTES {
            r.buf.resize(datagram::COALESCE_BYTES, 0);
        }
        let sock = self.socket().as_raw_fd();
        let mut got = false;
        let batch = if socket || (may_read && r.socket_due()) { MAX_BATCH } else { 0 };
        // At most a bounded batch per readiness event: a sender flooding this QP cannot keep
        // the progress thread here (the socket stays readable and is served again next round).
        for _ in 0..batch {
            let (n, fds) = match unix::recv_dgram_fds(sock, &mut r.buf) {
                Ok(Some((n, Some(uid), fds))) if access::allowed(uid) => (n, fds),
                Ok(Some(_)) => continue, // from a user we do not accept: dropped
                _ => break,
            };
            got = true;
            let b = &r.buf[..n.min(r.buf.len())];
            if super::ud_ring::is_setup(b) {
                let b = b.to_vec();
                if let Some((from, bell)) = r.setup(sock, self.qpn, &b, fds) {
                    self.lock_state().ud_rings.accepted(sock, self.qpn, from, bell);
                }
                continue;
            }
            // Datagrams, not ring setup, keep the socket warm (after setup they use the ring).
            r.socket_had_data();
            for (h, payload) in datagram::messages(&r.buf[..n.min(r.buf.len())]) {
                self.receive_one(&h, payload);
            }
        }
        // The rings, after the socket: what a sender sent by the socket before its ring
        // started has been read (see `ud_ring`).
        got |= r.drain(self.qpn, |h, payload| self.receive_one(h, payload));
        got
    }

    /// One message of a datagram: into the next posted receive, or dropped. A multicast one
    /// is taken only while this QP is attached to its group (a sender's list of members may
    /// lag a detach).
    fn receive_one(&self, h: &UdHdr, payload: &[u8]) {
        if h.dst_qpn == MCAST_QPN && !self.attached(&h.dgid) {
            return;
        }
        let d = UdIn {
            qkey: h.qkey,
            src_qpn: h.src_qpn,
            imm: (h.flags & UD_IMM != 0).then_some(h.imm),
            solicited: h.flags & UD_SOLICITED != 0,
        };
        self.deliver_ud(&d, &grh(h), payload);
    }

    /// Delivers one datagram into the next posted receive (GRH area first), or drops it as
    /// InfiniBand does (not ready, qkey mismatch, no receive posted). Whether it was taken.
    pub(super) fn deliver_ud(&self, d: &UdIn, grh: &[u8; GRH_LEN], payload: &[u8]) -> bool {
        let mut st = self.lock_state();
        if !matches!(st.state, QpState::Rtr | QpState::Rts) || d.qkey != st.attr.qkey {
            return false; // not ready, or a qkey mismatch: silently dropped
        }
        let Some(wqe) = self.next_recv(&mut st) else { return false }; // no receive: dropped
        let total = (GRH_LEN + payload.len()) as u64;
        let status = if total > wqe.sges.total() {
            IBV_WC_LOC_LEN_ERR
        } else if self.check_local(&wqe.sges, ACCESS_LOCAL_WRITE).is_err()
            || self.place_datagram(&wqe.sges, grh, payload).is_err()
        {
            IBV_WC_LOC_PROT_ERR
        } else {
            IBV_WC_SUCCESS
        };
        let mut wc = Completion {
            wr_id: wqe.wr_id,
            status,
            opcode: IBV_WC_RECV,
            byte_len: total as u32,
            qp_num: self.qpn,
            src_qp: d.src_qpn,
            wc_flags: ibv_wc_flags::IBV_WC_GRH.0,
            solicited: d.solicited,
            ..Completion::default()
        };
        if let Some(imm) = d.imm {
            wc.imm = imm;
            wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_IMM.0;
        }
        drop(st);
        self.recv_cq.push(wc);
        true
    }

    /// Writes a datagram (GRH area, then payload) into a receive's buffers, each piece while
    /// its region stays registered: one deregistered since the receive was checked is left
    /// alone.
    fn place_datagram(
        &self,
        sges: &Sgl,
        grh: &[u8; GRH_LEN],
        payload: &[u8],
    ) -> std::result::Result<(), AccessError> {
        let keys = &*self.keys;
        // SAFETY: both sources are valid for their lengths.
        unsafe {
            place_in(keys, sges, 0, grh.as_ptr(), GRH_LEN)?;
            place_in(keys, sges, GRH_LEN as u64, payload.as_ptr(), payload.len())
        }
    }
}

/// The successful completion of a UD send.
fn sent(wr_id: u64, sq_seq: u64, byte_len: u32, qp_num: u32) -> Completion {
    Completion {
        wr_id,
        status: IBV_WC_SUCCESS,
        opcode: IBV_WC_SEND,
        byte_len,
        qp_num,
        sq_seq,
        ..Completion::default()
    }
}

/// What a received datagram says besides its payload.
pub(super) struct UdIn {
    pub qkey: u32,
    pub src_qpn: u32,
    pub imm: Option<u32>,
    pub solicited: bool,
}
