//! Just enough of the classic pcap format (and of Ethernet/IPv4/UDP) to write RoCEv2 frames
//! and read them back: test scaffolding, not part of the library.

use std::net::Ipv4Addr;

const MAGIC: u32 = 0xa1b2_c3d4;
const LINKTYPE_ETHERNET: u32 = 1;

/// The global header of a pcap file holding Ethernet frames.
pub fn file_header() -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&MAGIC.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes()); // GMT offset
    h.extend_from_slice(&0u32.to_le_bytes()); // timestamp accuracy
    h.extend_from_slice(&65535u32.to_le_bytes()); // snap length
    h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// Appends one record holding `frame`, stamped `seq` seconds after the epoch.
pub fn record(out: &mut Vec<u8>, seq: u32, frame: &[u8]) {
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    out.extend_from_slice(frame);
}

/// The frames of a pcap file written by [`file_header`] / [`record`] (little-endian, Ethernet).
pub fn frames(file: &[u8]) -> Result<Vec<&[u8]>, String> {
    if file.len() < 24 || file[..4] != MAGIC.to_le_bytes() {
        return Err("not a little-endian pcap file".into());
    }
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let h = file.get(at..at + 16).ok_or("truncated record header")?;
        let incl = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        out.push(file.get(at + 16..at + 16 + incl).ok_or("truncated record")?);
        at += 16 + incl;
    }
    Ok(out)
}

fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet/IPv4/UDP frame around `payload`, the IPv4 header as an unconnected Linux socket
/// with `IP_PMTUDISC_DO` sends it: ID 0, DF, TTL 64. No UDP checksum (allowed on IPv4).
pub fn udp4_frame(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.0.octets());
    ip[16..20].copy_from_slice(&dst.0.octets());
    let c = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

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
