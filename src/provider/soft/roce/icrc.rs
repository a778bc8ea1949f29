//! The invariant CRC (IBA vol. 1, 7.8.1; RoCEv2 annex A17.4.3): CRC-32 (IEEE 802.3 polynomial,
//! reflected, the zlib/Ethernet CRC — not CRC-32C) over a pseudo-header and the InfiniBand
//! packet, with every field that a router may change masked to ones:
//!
//! `FF×8` (the LRH a RoCE packet does not have) · IP header (IPv4: TOS, TTL, checksum masked;
//! IPv6: traffic class, flow label, hop limit masked) · UDP header (checksum masked) · BTH (the
//! FECN/BECN/resv6 byte masked) · the rest of the packet up to the ICRC.
//!
//! The CRC's final value is sent least-significant byte first. The IP header is rebuilt from
//! what a UDP socket knows ([`Flow`]): the lengths follow from the packet's, and DF is set.
//!
//! The IPv4 identification is not masked, and a UDP socket neither chooses nor sees it. Linux
//! gives an unconnected socket sending with `IP_PMTUDISC_DO` the ID 0, and the k-th datagram of
//! one segmented (GSO) send the ID k. So a sender patches the ICRC of segment k
//! ([`with_ipv4_id`]), and a receiver accepts an IPv4 packet whose ICRC is right for some ID
//! below [`MAX_IPV4_ID`] ([`verify`]). The CRC is affine, so a change of ID changes the CRC by
//! a value that depends only on the ID and the length: no second pass over the packet.
//!
//! Other stacks (rxe, a RoCE NIC) send to port 4791 with IDs of their own choosing: a packet
//! to [`ROCE_UDP_PORT`] is accepted if its ICRC is right for *some* 16-bit ID, found by solving
//! the 16 unknowns' linear system over GF(2) rather than by trying 65,536 IDs. That check is
//! 16 bits weaker than the full 32; ours keep the 8-bit window (24 bits).

use super::ROCE_UDP_PORT;
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
    // The masked headers and the BTH's first 5 bytes in one buffer: one CRC update for them
    // (per-call overhead dominates pieces of 1 to 16 bytes).
    let mut head = [0u8; 8 + 40 + 8 + 5];
    head[..8].fill(0xff);
    let mut n = 8;
    let mut put = |bytes: &[u8]| {
        head[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    match flow.addrs {
        FlowAddrs::V4 { src, dst, id, df } => {
            let total = udp_len.checked_add(20)?.to_be_bytes();
            let id = id.to_be_bytes();
            let frag = if df { [0x40, 0] } else { [0, 0] };
            // version/IHL, TOS, length, ID, flags/fragment, TTL, protocol UDP, checksum.
            put(&[0x45, 0xff, total[0], total[1], id[0], id[1], frag[0], frag[1]]);
            put(&[0xff, 17, 0xff, 0xff]);
            put(&src.octets());
            put(&dst.octets());
        }
        FlowAddrs::V6 { src, dst } => {
            let plen = udp_len.to_be_bytes();
            // Version 6 kept; traffic class, flow label, hop limit masked.
            put(&[0x6f, 0xff, 0xff, 0xff, plen[0], plen[1], 17, 0xff]);
            put(&src.octets());
            put(&dst.octets());
        }
    }
    let (sp, dp, ul) =
        (flow.src_port.to_be_bytes(), flow.dst_port.to_be_bytes(), udp_len.to_be_bytes());
    put(&[sp[0], sp[1], dp[0], dp[1], ul[0], ul[1], 0xff, 0xff]);
    put(&ib[..4]);
    put(&[0xff]);
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..n]);
    h.update(&ib[5..]);
    Some(h.finalize())
}

/// Whether `pkt` (BTH through ICRC, a whole UDP payload) carries the right ICRC for `flow`;
/// on IPv4, for `flow`'s ID or any ID below [`MAX_IPV4_ID`] (the socket cannot see which), or
/// any ID at all on a flow to port 4791 (other stacks' IDs).
pub fn verify(flow: &Flow, pkt: &[u8]) -> bool {
    let Some(split) = pkt.len().checked_sub(ICRC_LEN) else { return false };
    let (ib, tail) = pkt.split_at(split);
    let Ok(sent) = <[u8; 4]>::try_from(tail) else { return false };
    let Some(ours) = compute(flow, ib) else { return false };
    let sent = u32::from_le_bytes(sent);
    if ours == sent {
        return true;
    }
    match flow.addrs {
        FlowAddrs::V4 { .. } if flow.dst_port == ROCE_UDP_PORT => {
            any_ipv4_id(ib.len(), ours ^ sent).is_some()
        }
        FlowAddrs::V4 { id, .. } => ipv4_id_of(ib.len(), ours, sent, id).is_some(),
        FlowAddrs::V6 { .. } => false,
    }
}

/// IPv4 IDs a receiver tries: the k-th segment of a GSO send has ID k (a send has at most 64
/// or 128 segments, by kernel version), and the ID bits above these stay those of the flow.
pub const MAX_IPV4_ID: u16 = 256;
/// Bits of the ID whose effect on the CRC is kept: all 16 (the low 8 are the GSO window).
const ID_BITS: usize = 16;

/// Where the IPv4 ID lies in the CRC's input: after the `FF×8` and 4 bytes of IP header.
const ID_OFFSET: usize = 8 + 4;

/// What the IPv4 ID does to the ICRC of an InfiniBand packet of one length.
#[derive(Clone, Copy)]
struct IdEffect {
    /// The CRC's change when bit `b` of the ID flips: `crc(m ^ e) ^ crc(m)` is
    /// `crc(e) ^ crc(0)` for any `m` of that length, since the CRC is affine.
    basis: [u32; ID_BITS],
    /// The same space in echelon form, one vector per leading bit with the ID bits that make
    /// it (zero where none leads there), so that solving for an ID is one pass of at most 32
    /// steps ([`any_ipv4_id`]).
    echelon: [(u32, u16); 32],
}

impl IdEffect {
    fn of(ib_len: usize) -> IdEffect {
        let n = 8 + 20 + 8 + ib_len;
        let crc = |bit: Option<usize>| {
            let mut h = crc32fast::Hasher::new();
            let mut head = [0u8; ID_OFFSET + 2];
            if let Some(b) = bit {
                // The ID is big-endian: bit b of it is in byte 1 for b < 8, in byte 0 above.
                head[ID_OFFSET + 1 - b / 8] = 1 << (b % 8);
            }
            h.update(&head);
            let zeros = [0u8; 256];
            let mut left = n - head.len();
            while left > 0 {
                let k = left.min(zeros.len());
                h.update(&zeros[..k]);
                left -= k;
            }
            h.finalize()
        };
        let zero = crc(None);
        let mut basis = [0; ID_BITS];
        for (b, v) in basis.iter_mut().enumerate() {
            *v = crc(Some(b)) ^ zero;
        }
        let mut echelon = [(0u32, 0u16); 32];
        for (b, &v) in basis.iter().enumerate() {
            let (mut v, mut ids) = (v, 1u16 << b);
            while v != 0 {
                let lead = 31 - v.leading_zeros() as usize;
                if echelon[lead].0 == 0 {
                    echelon[lead] = (v, ids);
                    break;
                }
                v ^= echelon[lead].0;
                ids ^= echelon[lead].1;
            }
        }
        IdEffect { basis, echelon }
    }
}

/// Runs `f` on the [`IdEffect`] for packets of `ib_len` bytes (without the ICRC), cached per
/// length: a flow's packets have few lengths, and a bulk transfer checks thousands of packets of
/// one length. Lent, not copied: at 320 bytes the copy cost a receiver more than the solving.
fn with_id_effect<R>(ib_len: usize, f: impl FnOnce(&IdEffect) -> R) -> R {
    thread_local! {
        static CACHE: std::cell::RefCell<[Option<(usize, IdEffect)>; 4]> =
            const { std::cell::RefCell::new([None; 4]) };
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, hit)) = c.iter().flatten().find(|e| e.0 == ib_len) {
            return f(hit);
        }
        c.rotate_right(1);
        let (_, e) = c[0].insert((ib_len, IdEffect::of(ib_len)));
        f(e)
    })
}

/// The CRC change between IDs `a` and `b`.
fn id_delta(ib_len: usize, a: u16, b: u16) -> u32 {
    let x = a ^ b;
    with_id_effect(ib_len, |e| {
        (0..ID_BITS).filter(|&i| x & (1 << i) != 0).fold(0, |d, i| d ^ e.basis[i])
    })
}

/// The ICRC `icrc` of an IPv4 packet of `ib_len` bytes computed with ID `from`, as it is with
/// ID `to`.
pub fn with_ipv4_id(ib_len: usize, icrc: u32, from: u16, to: u16) -> u32 {
    icrc ^ id_delta(ib_len, from, to)
}

/// The ID, differing from `flow_id` only in its low 8 bits, for which an IPv4 packet of
/// `ib_len` bytes whose ICRC is `ours` for `flow_id` carries `sent`.
fn ipv4_id_of(ib_len: usize, ours: u32, sent: u32, flow_id: u16) -> Option<u16> {
    any_ipv4_id(ib_len, ours ^ sent).filter(|&x| x < MAX_IPV4_ID).map(|x| flow_id ^ x)
}

/// The ID change (XOR with the ID the ICRC was computed for) that changes the ICRC of an IPv4
/// packet of `ib_len` bytes by `delta`, if there is one: the ID's 16 bits each flip the CRC by
/// a basis vector, so this reduces `delta` by that basis in echelon form.
fn any_ipv4_id(ib_len: usize, delta: u32) -> Option<u16> {
    with_id_effect(ib_len, |e| {
        let (mut d, mut ids) = (delta, 0u16);
        while d != 0 {
            let lead = 31 - d.leading_zeros() as usize;
            let (v, i) = e.echelon[lead];
            if v == 0 {
                return None;
            }
            d ^= v;
            ids ^= i;
        }
        Some(ids)
    })
}
