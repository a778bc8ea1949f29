//! `RDMASHIM_PCAP` for the same-host path: the rings carry no packets, so each request a QP
//! starts there (or executes directly in the peer's memory) is written to the capture as the
//! RoCEv2 packets it stands for, from the QP's GID to the peer's, UDP port 4791 both ways: the
//! opcodes of its transport for its position in the message, PSNs from the QP's `sq_psn` on,
//! the RETH, AtomicETH, ImmDt and IETH its opcode calls for, the payload cut at 4096 bytes (the
//! largest path MTU), and a correct ICRC. The requester writes both sides of its RC
//! conversation: its requests as it starts them, and, as each completes, the response that
//! completion stands for (an ACK, the READ response with the data now in the local buffer, the
//! atomic ACK with the original value, or the NAK of a remote error), from the peer's GID to
//! its own, on the request's PSNs, with the responder's MSN counted as it would count it. A UD
//! datagram to a QP of this host (or to a group's members here) is written as its UD SEND.

use super::roce::headers::{Aeth, AtomicAckEth, NakCode, Syndrome};
use super::roce::opcode::{self, op, Extra, Position, Transport};
use super::roce::{self, AtomicEth, Flow, Ieth, ImmDt, Packet, Reth, ROCE_UDP_PORT};
use crate::provider::SendWqe;
use crate::runtime::{pcap, udp};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::sys::ibv_wr_opcode::*;

/// The packet size messages are cut into.
const MTU: usize = 4096;

/// Whether a capture is being written (then the path gathers what [`request`] needs).
pub fn on() -> bool {
    pcap::on()
}

fn addr(gid: &[u8; 16]) -> SocketAddr {
    SocketAddr::new(udp::unmapped(Ipv6Addr::from(*gid)), ROCE_UDP_PORT)
}

/// What completed a captured request, as the responder would have answered it.
pub enum Response<'a> {
    /// SEND, RDMA WRITE: an ACK of the request's last PSN.
    Ack,
    /// RDMA READ: the data read (now in the requester's buffer).
    Read(&'a [u8]),
    /// An atomic: the original value at the target.
    Atomic(u64),
    /// A remote error: the NAK on the request's first PSN.
    Nak(NakCode),
}

/// Writes `r`, the response to a request of the QP `qpn` (GIDs `sgid`, ours, and `dgid`, the
/// peer's) whose packets had PSNs `psns` (first, last); `msn` is the responder's message
/// count after it.
pub fn response(
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    qpn: u32,
    psns: (u32, u32),
    msn: u32,
    r: Response<'_>,
) {
    let Some(mut out) = Out::new(dgid, sgid, psns.0) else { return };
    let ack = Aeth::new(Syndrome::Ack { credits: 31 }, msn);
    match r {
        Response::Ack => {
            let mut p = Packet::new(op::ACK, qpn, 0, &[]);
            p.ext.aeth = Some(ack);
            out.psn = psns.1;
            out.emit(&mut p);
        }
        Response::Nak(code) => {
            let mut p = Packet::new(op::ACK, qpn, 0, &[]);
            p.ext.aeth = Some(Aeth::new(Syndrome::Nak(code), msn));
            out.emit(&mut p);
        }
        Response::Atomic(orig) => {
            let mut p = Packet::new(op::ATOMIC_ACK, qpn, 0, &[]);
            p.ext.aeth = Some(ack);
            p.ext.atomic_ack = Some(AtomicAckEth::new(orig));
            out.emit(&mut p);
        }
        Response::Read(data) => {
            for (pos, piece) in pieces(data) {
                let mut p = Packet::new(opcode::read_response_opcode(pos), qpn, 0, piece);
                // Middle packets carry no AETH; the others do.
                if pos != Position::Middle {
                    p.ext.aeth = Some(ack);
                }
                out.emit(&mut p);
            }
        }
    }
}

/// `data` cut into packets of at most `MTU` bytes (one empty packet for no data), each with its
/// position in the message.
fn pieces(data: &[u8]) -> impl Iterator<Item = (Position, &[u8])> {
    let n = data.len().div_ceil(MTU).max(1);
    (0..n).map(move |k| {
        let pos = match (k == 0, k + 1 == n) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        };
        (pos, &data[(k * MTU).min(data.len())..((k + 1) * MTU).min(data.len())])
    })
}

/// Writes request `w` (its payload `data`, empty for READ and atomics) of a QP with GIDs `sgid`
/// and `dgid` towards `dest_qpn`, its first packet at `*psn`; `*psn` moves past its packets (a
/// READ's past its response's). Returns the PSNs its response is on (first, last).
pub fn request(
    t: Transport,
    sgid: &[u8; 16],
    dgid: &[u8; 16],
    dest_qpn: u32,
    psn: &mut u32,
    w: &SendWqe,
    data: &[u8],
) -> Option<(u32, u32)> {
    let first = *psn;
    let mut out = Out::new(sgid, dgid, first)?;
    let mut pkt = Packet::new(0, dest_qpn, 0, &[]);
    pkt.bth.set_ack_req(true);
    match w.opcode {
        IBV_WR_RDMA_READ => {
            pkt.bth.set_opcode(t.base() | op::READ_REQUEST);
            pkt.ext.reth = Some(Reth::new(w.remote_addr, w.rkey, w.len as u32));
            out.emit(&mut pkt);
            // Its response packets take the PSNs after it: the next request comes after them.
            let extra = (w.len as usize).div_ceil(MTU).max(1) - 1;
            out.psn = (out.psn + extra as u32) & 0x00ff_ffff;
        }
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let cas = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
            pkt.bth.set_opcode(t.base() | if cas { op::CMP_SWAP } else { op::FETCH_ADD });
            let (first, second) = if cas { (w.swap, w.compare_add) } else { (w.compare_add, 0) };
            pkt.ext.atomic = Some(AtomicEth::new(w.remote_addr, w.rkey, first, second));
            out.emit(&mut pkt);
        }
        code => {
            let is_send = matches!(code, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV);
            for (pos, piece) in pieces(data) {
                let ends = matches!(pos, Position::Only | Position::Last);
                let extra = match code {
                    _ if !ends => Extra::None,
                    IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM => Extra::Imm,
                    IBV_WR_SEND_WITH_INV => Extra::Inv,
                    _ => Extra::None,
                };
                let opc = if is_send {
                    opcode::send_opcode(t, pos, extra)
                } else {
                    opcode::write_opcode(t, pos, extra == Extra::Imm)
                };
                let Some(opc) = opc else { break };
                let mut p = Packet::new(opc, dest_qpn, 0, piece);
                let info = p.info();
                if info.is_some_and(|i| i.has(opcode::Ext::Reth)) {
                    p.ext.reth = Some(Reth::new(w.remote_addr, w.rkey, w.len as u32));
                }
                if info.is_some_and(|i| i.has(opcode::Ext::ImmDt)) {
                    p.ext.imm = w.imm.map(ImmDt::new);
                }
                if info.is_some_and(|i| i.has(opcode::Ext::Ieth)) {
                    p.ext.ieth = Some(Ieth::new(w.rkey));
                }
                p.bth.set_se(ends && w.solicited);
                p.bth.set_ack_req(ends && t != Transport::Uc);
                out.emit(&mut p);
            }
        }
    }
    *psn = out.psn;
    let last = out.psn.wrapping_sub(1) & 0x00ff_ffff;
    // A READ's response starts on its own PSN; the others' ACK names their last packet.
    Some((first, if w.opcode == IBV_WR_RDMA_READ { first } else { last }))
}

/// Writes UD packet `pkt` that a same-host datagram from `sgid` to `dgid` stands for.
pub fn datagram(sgid: &[u8; 16], dgid: &[u8; 16], pkt: &Packet<'_>) {
    let (src, dst) = (addr(sgid), addr(dgid));
    let Some(flow) = Flow::new(src, dst) else { return };
    let mut buf = vec![0u8; MTU + 128];
    if let Ok(n) = roce::encode(pkt, &flow, &mut buf) {
        pcap::datagram(src, dst, 0, &buf[..n]);
    }
}

/// Where the packets of one request (or its response) go.
struct Out {
    flow: Flow,
    src: SocketAddr,
    dst: SocketAddr,
    buf: Vec<u8>,
    /// The next packet's PSN.
    psn: u32,
}

impl Out {
    /// From the GID `from` to `to`, the first packet at `psn`; `None` for addresses of two
    /// families, which no IP packet carries.
    fn new(from: &[u8; 16], to: &[u8; 16], psn: u32) -> Option<Out> {
        let (src, dst) = (addr(from), addr(to));
        if matches!(src.ip(), IpAddr::V4(_)) != matches!(dst.ip(), IpAddr::V4(_)) {
            return None;
        }
        let flow = Flow::new(src, dst)?;
        Some(Out { flow, src, dst, buf: vec![0u8; MTU + 128], psn })
    }

    fn emit(&mut self, pkt: &mut Packet<'_>) {
        pkt.bth.set_psn(self.psn);
        if let Ok(n) = roce::encode(pkt, &self.flow, &mut self.buf) {
            pcap::datagram(self.src, self.dst, 0, &self.buf[..n]);
        }
        self.psn = (self.psn + 1) & 0x00ff_ffff;
    }
}
