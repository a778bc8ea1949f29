//! A UD QP: SEND only, one packet per message (at most the path MTU), a DETH carrying the
//! Q_Key and the source QP, no acknowledgement and no retransmission. Received packets whose
//! Q_Key is not the QP's are dropped silently, as are packets with no receive posted.

use super::api::*;
use super::psn;
use crate::provider::soft::roce::opcode::op;
use crate::provider::soft::roce::packet::DEFAULT_PKEY;
use crate::provider::soft::roce::{Deth, ImmDt, Packet};

/// The multicast destination QPN.
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;

/// Where a UD send goes (from the address handle and the work request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    pub qpn: u32,
    /// The WR's remote Q_Key; with the high bit set, the sending QP's own Q_Key is used.
    pub qkey: u32,
}

pub struct UdQp {
    qpn: u32,
    qkey: u32,
    mtu: u32,
    psn: u32,
    scratch: Vec<u8>,
}

impl UdQp {
    pub fn new(qpn: u32, qkey: u32, mtu: u32) -> Self {
        let mtu = mtu.clamp(256, 4096);
        UdQp { qpn: qpn & psn::PSN_MASK, qkey, mtu, psn: 0, scratch: vec![0; mtu as usize] }
    }

    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    /// Sends one datagram of `wr.len` bytes from `wr.sgl` (only `WrOp::Send`/`SendImm`); it
    /// completes at once (UD has no acknowledgement).
    pub fn post_send(
        &mut self,
        wr: &SendWr,
        dest: UdDest,
        mem: &mut impl Memory,
        out: &mut impl Sink,
    ) -> Result<(), PostError> {
        let (code, imm) = match wr.op {
            WrOp::Send => (op::UD | op::SEND_ONLY, None),
            WrOp::SendImm(i) => (op::UD | op::SEND_ONLY_IMM, Some(i)),
            _ => return Err(PostError::Invalid),
        };
        if wr.len > self.mtu {
            return Err(PostError::Invalid);
        }
        let n = wr.len as usize;
        let status = if mem.read_local(wr.sgl, 0, &mut self.scratch[..n]).is_err() {
            Status::LocProtErr
        } else {
            let qkey = if dest.qkey & 0x8000_0000 != 0 { self.qkey } else { dest.qkey };
            let mut pkt = Packet::new(code, dest.qpn, self.psn, &self.scratch[..n]);
            pkt.ext.deth = Some(Deth::new(qkey, self.qpn));
            pkt.ext.imm = imm.map(ImmDt::new);
            pkt.bth.set_se(wr.solicited);
            self.psn = psn::add(self.psn, 1);
            out.packet(&pkt);
            Status::Success
        };
        if wr.signaled || status != Status::Success {
            out.completion(Completion::send(wr.wr_id, status, WcOpcode::Send, wr.len));
        }
        Ok(())
    }

    /// A datagram from the network. The first [`GRH_LEN`] bytes of the receive buffer are left
    /// for the caller, which knows the IP header, to fill.
    pub fn on_packet(
        &mut self,
        pkt: &Packet<'_>,
        mem: &mut impl Memory,
        rq: &mut impl RecvQueue,
        out: &mut impl Sink,
    ) {
        let code = pkt.bth.opcode();
        if code != op::UD | op::SEND_ONLY && code != op::UD | op::SEND_ONLY_IMM {
            return;
        }
        let dest = pkt.bth.dest_qp();
        if (dest != self.qpn && dest != MULTICAST_QPN) || pkt.bth.pkey() != DEFAULT_PKEY {
            return;
        }
        let Some(deth) = pkt.ext.deth else { return };
        if deth.qkey() != self.qkey || pkt.payload.len() > self.mtu as usize {
            return;
        }
        let Some(recv) = rq.pop() else { return };
        let n = pkt.payload.len() as u32;
        let opc = WcOpcode::Recv;
        let mut c = if u64::from(n) + u64::from(GRH_LEN) > u64::from(recv.len) {
            Completion::recv(recv.wr_id, Status::LocLenErr, opc, 0)
        } else if mem.write_local(recv.sgl, GRH_LEN.into(), pkt.payload).is_err() {
            Completion::recv(recv.wr_id, Status::LocProtErr, opc, 0)
        } else {
            Completion::recv(recv.wr_id, Status::Success, opc, n + GRH_LEN)
        };
        if c.status == Status::Success {
            c.imm = pkt.ext.imm.map(|i| i.imm());
            c.src_qp = deth.src_qp();
            c.solicited = pkt.bth.se();
            c.grh = true;
        }
        out.completion(c);
    }
}
