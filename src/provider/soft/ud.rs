//! The UD data path: datagrams of at most one MTU to a QPN (or to every QP attached to a
//! multicast group), a 40-byte GRH in front of every received message, qkey matching, and
//! silent drops where InfiniBand drops (no receive posted, wrong qkey, unknown QP).

use super::datagram::{self, UdHdr, HDR_LEN, MCAST_QPN, UD_IMM, UD_MTU, UD_SOLICITED};
use super::qp::{Inner, SoftQp};
use super::rc::copy_in;
use crate::errno::{Errno, Result};
use crate::provider::{Completion, Payload, QpState, SendWqe, ACCESS_LOCAL_WRITE, GRH_LEN};
use crate::runtime::access;
use crate::runtime::unix::{self, Pod};
use crate::sys::*;
use std::os::fd::AsRawFd;

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

    /// Sends one UD request at once (UD has no acknowledgements: it completes when sent).
    pub(super) fn post_send_ud(&self, st: &mut Inner, w: SendWqe) -> Result<()> {
        Self::check_ud(&w)?;
        let ud = w.ud.as_ref().ok_or(Errno::EINVAL)?;
        let mut buf = [0u8; UD_MTU];
        let n = w.len as usize;
        match &w.payload {
            Payload::Inline(d) => buf[..n].copy_from_slice(d.as_slice()),
            Payload::Sges(sgl) => {
                if self.check_local(sgl, 0).is_err() {
                    self.error_completion(st, w.wr_id, w.seq, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND);
                    return Ok(());
                }
                let mut off = 0;
                for s in sgl.as_slice() {
                    // SAFETY: the entry lies in a registered region (checked above); the total
                    // is at most UD_MTU (checked above), so it fits in buf.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            s.addr as *const u8,
                            buf.as_mut_ptr().add(off),
                            s.length as usize,
                        )
                    };
                    off += s.length as usize;
                }
            }
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
        let sock = self.socket().as_raw_fd();
        if ud.remote_qpn != MCAST_QPN && self.is_remote(st, &dgid) {
            self.send_ud_net(&h, sgid, dgid, &buf[..n]);
        } else if ud.remote_qpn == MCAST_QPN {
            for member in datagram::members(&dgid) {
                if member == self.qpn && self.block_self_mcast() {
                    continue;
                }
                datagram::send(sock, member, &h, &buf[..n]);
            }
            // Members in other namespaces: one RoCEv2 datagram to the IP group.
            let from = crate::provider::soft::net::route::ip_of_gid(&sgid);
            if super::net::mcast::group_of(&dgid).is_some()
                && !from.is_loopback()
                && !from.is_unspecified()
            {
                self.send_ud_net(&h, sgid, dgid, &buf[..n]);
            }
        } else {
            datagram::send(sock, ud.remote_qpn, &h, &buf[..n]);
        }
        if w.signaled || self.sq_sig_all {
            self.send_cq.push(Completion {
                wr_id: w.wr_id,
                status: IBV_WC_SUCCESS,
                opcode: IBV_WC_SEND,
                byte_len: n as u32,
                qp_num: self.qpn,
                sq_seq: w.seq,
                ..Completion::default()
            });
        }
        Ok(())
    }

    /// Takes the datagrams waiting at our socket and delivers them into posted receives.
    pub(super) fn receive_datagrams(&self) {
        let mut buf = vec![0u8; HDR_LEN + UD_MTU];
        // At most a bounded batch per readiness event: a sender flooding this QP cannot keep
        // the progress thread here (the socket stays readable and is served again next round).
        for _ in 0..MAX_BATCH {
            let n = match unix::recv_dgram(self.socket().as_raw_fd(), &mut buf) {
                Ok(Some((n, Some(uid)))) if access::allowed(uid) => n,
                Ok(Some(_)) => continue, // from a user we do not accept: dropped
                _ => return,
            };
            let Some(h) = UdHdr::from_bytes(&buf[..n.min(buf.len())]) else { continue };
            if !h.valid(n) {
                continue;
            }
            let payload = &buf[HDR_LEN..HDR_LEN + h.len as usize];
            let imm = (h.flags & UD_IMM != 0).then_some(h.imm);
            let d = UdIn {
                qkey: h.qkey,
                src_qpn: h.src_qpn,
                imm,
                solicited: h.flags & UD_SOLICITED != 0,
            };
            self.deliver_ud(&d, &grh(&h), payload);
        }
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
        } else if self.check_local(&wqe.sges, ACCESS_LOCAL_WRITE).is_err() {
            IBV_WC_LOC_PROT_ERR
        } else {
            // SAFETY: the receive's regions were checked for local write and hold `total`
            // bytes; both sources are valid for their lengths.
            unsafe {
                copy_in(&wqe.sges, 0, grh.as_ptr(), GRH_LEN);
                copy_in(&wqe.sges, GRH_LEN as u64, payload.as_ptr(), payload.len());
            }
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
}

/// What a received datagram says besides its payload.
pub(super) struct UdIn {
    pub qkey: u32,
    pub src_qpn: u32,
    pub imm: Option<u32>,
    pub solicited: bool,
}
