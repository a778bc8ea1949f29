//! Path MTU and segmentation. An IB MTU (256..4096) counts payload bytes only; a RoCEv2 packet
//! adds the IP and UDP headers, the BTH, its extension headers and the ICRC. The largest IB MTU
//! whose biggest packet fits the interface MTU is the path MTU (1500 gives 1024, as in RoCE).

use super::opcode::Position;

/// The IB MTUs, smallest first, with their `ibv_mtu` enumerators (1..=5).
pub const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Bytes a payload-carrying packet adds to its payload, worst case: IP header (20 or 40), UDP
/// (8), BTH (12), the largest extension headers on a packet with payload (RETH + ImmDt, 20)
/// and the ICRC (4).
pub const fn overhead(ipv6: bool) -> u32 {
    (if ipv6 { 40 } else { 20 }) + 8 + 12 + 20 + 4
}

/// The largest IB MTU that fits an interface MTU, or `None` if not even 256 does.
pub fn ib_mtu_for(iface_mtu: u32, ipv6: bool) -> Option<u32> {
    let room = iface_mtu.checked_sub(overhead(ipv6))?;
    IB_MTUS.iter().rev().copied().find(|m| *m <= room)
}

/// The `ibv_mtu` enumerator (IBV_MTU_256 = 1 … IBV_MTU_4096 = 5) of an IB MTU in bytes.
pub fn ibv_mtu_enum(mtu: u32) -> Option<u8> {
    IB_MTUS.iter().position(|m| *m == mtu).map(|i| i as u8 + 1)
}

/// One packet's share of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub pos: Position,
    /// Offset of the packet's payload in the message.
    pub offset: usize,
    pub len: usize,
}

/// The packets of a message of `len` bytes at path MTU `mtu`: full-MTU packets then the rest;
/// a message of 0 bytes is one empty Only packet. Yields nothing if `mtu` is 0.
pub fn segments(len: usize, mtu: usize) -> Segments {
    Segments { len, mtu, offset: 0, done: mtu == 0 }
}

/// Iterator returned by [`segments`].
#[derive(Clone, Debug)]
pub struct Segments {
    len: usize,
    mtu: usize,
    offset: usize,
    done: bool,
}

impl Segments {
    /// How many packets the whole message takes (however far the iterator has gone).
    pub fn count_packets(&self) -> usize {
        if self.mtu == 0 {
            0
        } else {
            self.len.div_ceil(self.mtu).max(1)
        }
    }
}

impl Iterator for Segments {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        if self.done {
            return None;
        }
        let left = self.len - self.offset;
        let take = left.min(self.mtu);
        let first = self.offset == 0;
        let last = take == left;
        let pos = match (first, last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        };
        let seg = Segment { pos, offset: self.offset, len: take };
        self.offset += take;
        self.done = last;
        Some(seg)
    }
}
