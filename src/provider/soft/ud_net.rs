//! UD across network namespaces: a datagram whose destination GID is not an address of our
//! namespace travels as a RoCEv2 UD SEND (BTH + DETH with the Q_Key and our QPN) to
//! `ip_of(dgid)`, port `dest_qpn >> 8`; a received one lands after a GRH area filled as rxe
//! does for RoCEv2: IPv4 as 20 zero bytes and the IPv4 header, IPv6 as the IPv6 header.

use super::datagram::{UdHdr, MCAST_QPN, UD_IMM, UD_SOLICITED};
use super::net::{endpoint, route};
use super::qp::{Inner, SoftQp};
use super::roce::opcode::op;
use super::roce::{self, Deth, Flow, ImmDt, Packet};
use super::ud::UdIn;
use crate::provider::GRH_LEN;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// Destination GIDs a UD QP remembers as ours or not (no interface scan per send).
const REMOTE_CACHE: usize = 64;

impl SoftQp {
    /// Whether `dgid` lies behind the network (not an address of our namespace).
    pub(super) fn is_remote(&self, st: &mut Inner, dgid: &[u8; 16]) -> bool {
        if *dgid == [0; 16] {
            return false;
        }
        if let Some((_, r)) = st.ud_remote.iter().find(|(g, _)| g == dgid) {
            return *r;
        }
        let r = !route::is_local(route::ip_of_gid(dgid));
        if st.ud_remote.len() >= REMOTE_CACHE {
            st.ud_remote.clear();
        }
        st.ud_remote.push((*dgid, r));
        r
    }

    /// Sends one UD datagram as a RoCEv2 packet (a lost or refused one is lost, as on a wire).
    pub(super) fn send_ud_net(&self, h: &UdHdr, sgid: [u8; 16], dgid: [u8; 16], data: &[u8]) {
        let pkt = ud_packet(h, data);
        let (src, dst) = (route::ip_of_gid(&sgid), route::ip_of_gid(&dgid));
        let dst = if h.dst_qpn == MCAST_QPN {
            // A group: RoCEv2's port, our own namespace's members already served.
            super::net::mcast::no_loop(self.udp.as_raw_fd());
            SocketAddr::new(dst, roce::ROCE_UDP_PORT)
        } else {
            SocketAddr::new(dst, endpoint::dest_port(h.dst_qpn))
        };
        let Some(flow) = Flow::new(SocketAddr::new(src, endpoint::port_of(self.qpn)), dst) else {
            return;
        };
        let mut buf = [0u8; 4096 + 128];
        if let Ok(n) = roce::encode(&pkt, &flow, &mut buf) {
            super::net::faults::send(&self.udp, &buf[..n], src, dst);
        }
    }

    /// A RoCEv2 packet (ICRC checked) for this UD QP, from `from` to our address `to`.
    pub(super) fn on_net_ud(&self, pkt: &Packet<'_>, from: &SocketAddr, to: IpAddr) -> bool {
        let code = pkt.bth.opcode();
        if code != op::UD | op::SEND_ONLY && code != op::UD | op::SEND_ONLY_IMM {
            return false;
        }
        let Some(deth) = pkt.ext.deth else { return false };
        if pkt.payload.len() > super::datagram::UD_MTU {
            return false;
        }
        let d = UdIn {
            qkey: deth.qkey(),
            src_qpn: deth.src_qp(),
            imm: pkt.ext.imm.map(|i| i.imm()),
            solicited: pkt.bth.se(),
        };
        let g = grh(unmap(from.ip()), unmap(to), pkt.wire_len());
        self.deliver_ud(&d, &g, pkt.payload)
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 => v4,
    }
}

/// The GRH area of a received RoCEv2 datagram of `ib_len` bytes (BTH to ICRC).
fn grh(src: IpAddr, dst: IpAddr, ib_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = 8 + ib_len;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut g[20..40];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h[6] = 0x40; // DF, ID 0
            h[8] = 64; // TTL
            h[9] = 17; // UDP
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let sum = checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            g[0] = 0x60;
            g[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            g[6] = 17; // UDP
            g[7] = 64; // hop limit
            g[8..24].copy_from_slice(&v6(src).octets());
            g[24..40].copy_from_slice(&v6(dst).octets());
        }
    }
    g
}

/// The IPv4 header checksum (ones' complement sum of 16-bit words).
fn checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The RoCEv2 UD SEND that datagram `h` with payload `data` is (PSN 0: UD has no sequence).
pub(super) fn ud_packet<'a>(h: &UdHdr, data: &'a [u8]) -> Packet<'a> {
    let imm = h.flags & UD_IMM != 0;
    let code = op::UD | if imm { op::SEND_ONLY_IMM } else { op::SEND_ONLY };
    let mut pkt = Packet::new(code, h.dst_qpn, 0, data);
    pkt.ext.deth = Some(Deth::new(h.qkey, h.src_qpn));
    pkt.ext.imm = imm.then(|| ImmDt::new(h.imm));
    pkt.bth.set_se(h.flags & UD_SOLICITED != 0);
    pkt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_grh_is_20_zero_bytes_then_a_valid_ipv4_header() {
        let g = grh("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 100);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(g[20] >> 4, 4);
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), 128);
        assert_eq!(&g[32..36], &[10, 0, 0, 1]);
        assert_eq!(&g[36..40], &[10, 0, 0, 2]);
        assert_eq!(checksum(&g[20..40]), 0, "a header with its checksum sums to zero");
    }

    #[test]
    fn ipv6_grh_carries_the_addresses() {
        let g = grh("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 100);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(g[8..24], "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    }
}
