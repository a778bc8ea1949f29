//! Reading back what `rdmashim::runtime::pcap` wrote: the fields of an Ethernet/IPv4/UDP frame
//! that a receiving socket reports. Test scaffolding, not part of the library.

use std::net::Ipv4Addr;

/// What a receiving socket reports of a frame: addresses, ports, IPv4 ID and DF, and the UDP
/// payload (bounded by the IP and UDP lengths, not by the frame).
pub struct Udp4<'a> {
    pub src: (Ipv4Addr, u16),
    pub dst: (Ipv4Addr, u16),
    pub id: u16,
    pub df: bool,
    pub payload: &'a [u8],
}

pub fn parse_udp4(f: &[u8]) -> Result<Udp4<'_>, String> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[14] != 0x45 || f[23] != 17 {
        return Err("not Ethernet/IPv4 (no options)/UDP".into());
    }
    let ip = &f[14..];
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let udp_len = usize::from(u16::from_be_bytes([ip[24], ip[25]]));
    if total > ip.len() || udp_len < 8 || 20 + udp_len > total {
        return Err("IP/UDP lengths exceed the frame".into());
    }
    let a = |o: usize| Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
    let p = |o: usize| u16::from_be_bytes([ip[o], ip[o + 1]]);
    Ok(Udp4 {
        src: (a(12), p(20)),
        dst: (a(16), p(22)),
        id: p(4),
        df: ip[6] & 0x40 != 0,
        payload: &ip[28..20 + udp_len],
    })
}
