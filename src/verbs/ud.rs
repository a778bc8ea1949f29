//! The UD data path: datagrams of at most one MTU to a QPN (or to every QP attached to a
//! multicast group), a 40-byte GRH in front of every received message, qkey matching, and
//! silent drops where InfiniBand drops (no receive posted, wrong qkey, unknown QP).

use super::ah::Ah;
use super::cq::Wc;
use super::device;
use super::mr;
use super::qp::{Qp, QpState};
use super::rc::{copy_in, Payload, SendWqe};
use crate::errno::{Errno, Result};
use crate::provider::soft::datagram::{
    self, UdHdr, HDR_LEN, MCAST_QPN, UD_IMM, UD_MTU, UD_SOLICITED,
};
use crate::runtime::access;
use crate::runtime::unix::{self, Pod};
use crate::sys::*;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use ibv_qp_state::*;
use ibv_wc_opcode::*;
use ibv_wc_status::*;

/// Where a UD send goes (`wr.ud`).
pub struct UdDest {
    pub ah: Arc<Ah>,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The size of the Global Routing Header at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

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

impl Qp {
    /// Sends one UD request at once (UD has no acknowledgements: it completes when sent).
    /// What a UD send request must satisfy to be accepted at post time.
    pub(super) fn check_ud(w: &SendWqe) -> Result<()> {
        let ok_op =
            matches!(w.opcode, ibv_wr_opcode::IBV_WR_SEND | ibv_wr_opcode::IBV_WR_SEND_WITH_IMM);
        if w.ud.is_none() || !ok_op || w.len as usize > UD_MTU {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    pub(super) fn post_send_ud(&self, st: &mut QpState, w: SendWqe) -> Result<()> {
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
        let table = device::gid_table();
        let attr = &ud.ah.attr;
        let sgid =
            table.get(attr.grh.sgid_index as usize).or(table.first()).copied().unwrap_or([0; 16]);
        // SAFETY: ibv_gid is a union of byte views; raw is always valid.
        let dgid = if attr.is_global != 0 { unsafe { attr.grh.dgid.raw } } else { sgid };
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
        if ud.remote_qpn == MCAST_QPN {
            for member in datagram::members(&dgid) {
                if member == self.qpn && self.block_self_mcast() {
                    continue;
                }
                datagram::send(sock, member, &h, &buf[..n]);
            }
        } else {
            datagram::send(sock, ud.remote_qpn, &h, &buf[..n]);
        }
        if w.signaled || self.sq_sig_all {
            self.send_cq.push(Wc {
                wr_id: w.wr_id,
                status: IBV_WC_SUCCESS,
                opcode: IBV_WC_SEND,
                byte_len: n as u32,
                qp_num: self.qpn,
                sq_seq: w.seq,
                ..Wc::default()
            });
        }
        Ok(())
    }

    /// Takes the datagrams waiting at our socket and delivers them into posted receives.
    pub(super) fn receive_datagrams(&self) {
        let mut buf = vec![0u8; HDR_LEN + UD_MTU];
        loop {
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
            let mut st = self.lock_state();
            if !matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS) || h.qkey != st.attr.qkey {
                continue; // not ready, or a qkey mismatch: silently dropped
            }
            let Some(wqe) = self.next_recv(&mut st) else { continue }; // no receive: dropped
            let total = (GRH_LEN + payload.len()) as u64;
            let status = if total > wqe.sges.total() {
                IBV_WC_LOC_LEN_ERR
            } else if self.check_local(&wqe.sges, mr::ACCESS_LOCAL_WRITE).is_err() {
                IBV_WC_LOC_PROT_ERR
            } else {
                let g = grh(&h);
                // SAFETY: the receive's regions were checked for local write and hold `total`
                // bytes; both sources are valid for their lengths.
                unsafe {
                    copy_in(&wqe.sges, 0, g.as_ptr(), GRH_LEN);
                    copy_in(&wqe.sges, GRH_LEN as u64, payload.as_ptr(), payload.len());
                }
                IBV_WC_SUCCESS
            };
            let mut wc = Wc {
                wr_id: wqe.wr_id,
                status,
                opcode: IBV_WC_RECV,
                byte_len: total as u32,
                qp_num: self.qpn,
                src_qp: h.src_qpn,
                wc_flags: ibv_wc_flags::IBV_WC_GRH.0,
                solicited: h.flags & UD_SOLICITED != 0,
                ..Wc::default()
            };
            if h.flags & UD_IMM != 0 {
                wc.imm = h.imm;
                wc.wc_flags |= ibv_wc_flags::IBV_WC_WITH_IMM.0;
            }
            drop(st);
            self.recv_cq.push(wc);
        }
    }
}

/// `ibv_init_ah_from_wc`: the address that answers the sender of a received UD message.
pub fn ah_attr_from_wc(
    port: u8,
    wc: &ibv_wc,
    grh: Option<&[u8; GRH_LEN]>,
    out: &mut ibv_ah_attr,
) -> Result<()> {
    // SAFETY: all-zero is a valid ibv_ah_attr.
    *out = unsafe { std::mem::zeroed() };
    out.dlid = wc.slid;
    out.sl = wc.sl;
    out.src_path_bits = wc.dlid_path_bits;
    out.port_num = port;
    if wc.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0 {
        let g = grh.ok_or(Errno::EINVAL)?;
        if g[0] >> 4 != 6 {
            return Err(Errno::EINVAL);
        }
        let mut sgid = [0u8; 16];
        let mut dgid = [0u8; 16];
        sgid.copy_from_slice(&g[8..24]);
        dgid.copy_from_slice(&g[24..40]);
        out.is_global = 1;
        out.grh.dgid.raw = sgid;
        out.grh.sgid_index = device::gid_table().iter().position(|x| *x == dgid).unwrap_or(0) as u8;
        out.grh.hop_limit = 0xff;
        out.grh.traffic_class = ((u32::from_be_bytes([g[0], g[1], g[2], g[3]]) >> 20) & 0xff) as u8;
        out.grh.flow_label = u32::from_be_bytes([g[0], g[1], g[2], g[3]]) & 0xfffff;
    }
    Ok(())
}
