//! The invariant CRC (IBA vol. 1, 7.8.1; RoCEv2 annex A17.4.3): CRC-32 (IEEE 802.3 polynomial,
//! reflected, the zlib/Ethernet CRC — not CRC-32C) over a pseudo-header and the InfiniBand
//! packet, with every field that a router may change masked to ones:
//!
//! `FF×8` (the LRH a RoCE packet does not have) · IP header (IPv4: TOS, TTL, checksum masked;
//! IPv6: traffic class, flow label, hop limit masked) · UDP header (checksum masked) · BTH (the
//! FECN/BECN/resv6 byte masked) · the rest of the packet up to the ICRC.
//!
//! The CRC's final value is sent least-significant byte first. The IP header is rebuilt from
//! what a UDP socket knows ([`Flow`]): the lengths follow from the packet's, and the IPv4 ID is 0
//! with DF set, which is what Linux gives an unconnected socket sending with `IP_PMTUDISC_DO`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The ICRC's length on the wire.
pub const ICRC_LEN: usize = 4;

/// The addresses of an IP packet, as the ICRC sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowAddrs {
    /// IPv4 with the header's identification and Don't Fragment bit (not masked by the ICRC).
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        id: u16,
        df: bool,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
    },
}

/// The IP/UDP header fields one RoCEv2 packet travels with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub addrs: FlowAddrs,
    pub src_port: u16,
    pub dst_port: u16,
}

impl Flow {
    /// The flow between two socket addresses, IPv4 ID 0 with DF. An IPv4-mapped IPv6 address
    /// (what a dual-stack socket reports) counts as IPv4. `None` if the families differ.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Option<Flow> {
        let addrs = match (unmap(src.ip()), unmap(dst.ip())) {
            (IpAddr::V4(s), IpAddr::V4(d)) => FlowAddrs::V4 { src: s, dst: d, id: 0, df: true },
            (IpAddr::V6(s), IpAddr::V6(d)) => FlowAddrs::V6 { src: s, dst: d },
            _ => return None,
        };
        Some(Flow { addrs, src_port: src.port(), dst_port: dst.port() })
    }

    /// The same flow seen from the other end.
    pub fn reversed(&self) -> Flow {
        let addrs = match self.addrs {
            FlowAddrs::V4 { src, dst, id, df } => FlowAddrs::V4 { src: dst, dst: src, id, df },
            FlowAddrs::V6 { src, dst } => FlowAddrs::V6 { src: dst, dst: src },
        };
        Flow { addrs, src_port: self.dst_port, dst_port: self.src_port }
    }
}

fn unmap(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The ICRC of `ib` (BTH through pad, without the ICRC) sent on `flow`, as the value whose
/// little-endian bytes go on the wire. `None` if the packet cannot fit one IP datagram.
pub fn compute(flow: &Flow, ib: &[u8]) -> Option<u32> {
    if ib.len() < 5 {
        return None;
    }
    let udp_len = u16::try_from(8 + ib.len() + ICRC_LEN).ok()?;
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    match flow.addrs {
        FlowAddrs::V4 { src, dst, id, df } => {
            let total = udp_len.checked_add(20)?.to_be_bytes();
            let id = id.to_be_bytes();
            let frag = if df { [0x40, 0] } else { [0, 0] };
            // version/IHL, TOS, length, ID, flags/fragment, TTL, protocol UDP, checksum.
            h.update(&[0x45, 0xff, total[0], total[1], id[0], id[1], frag[0], frag[1]]);
            h.update(&[0xff, 17, 0xff, 0xff]);
            h.update(&src.octets());
            h.update(&dst.octets());
        }
        FlowAddrs::V6 { src, dst } => {
            let plen = udp_len.to_be_bytes();
            // Version 6 kept; traffic class, flow label, hop limit masked.
            h.update(&[0x6f, 0xff, 0xff, 0xff, plen[0], plen[1], 17, 0xff]);
            h.update(&src.octets());
            h.update(&dst.octets());
        }
    }
    let (sp, dp, ul) =
        (flow.src_port.to_be_bytes(), flow.dst_port.to_be_bytes(), udp_len.to_be_bytes());
    h.update(&[sp[0], sp[1], dp[0], dp[1], ul[0], ul[1], 0xff, 0xff]);
    h.update(&ib[..4]);
    h.update(&[0xff]);
    h.update(&ib[5..]);
    Some(h.finalize())
}

/// Whether `pkt` (BTH through ICRC, a whole UDP payload) carries the right ICRC for `flow`.
pub fn verify(flow: &Flow, pkt: &[u8]) -> bool {
    let Some(split) = pkt.len().checked_sub(ICRC_LEN) else { return false };
    let (ib, tail) = pkt.split_at(split);
    let Ok(sent) = <[u8; 4]>::try_from(tail) else { return false };
    compute(flow, ib) == Some(u32::from_le_bytes(sent))
}
