//! Datagrams between UD QPs of one host: a unix datagram sent to the socket that owns the
//! destination QPN carries one message, or, when a full destination's held messages go at once
//! (`ud_backlog`), several back to back, each a [`UdHdr`] and its payload ([`messages`]).
//! Who belongs to a multicast group is [`super::groups`]' to say.

use crate::runtime::unix::Pod;

const MAGIC: u32 = 0x5244_5544; // "RDUD"
/// The message carries immediate data.
pub const UD_IMM: u32 = 1;
pub const UD_SOLICITED: u32 = 2;
pub use crate::provider::MCAST_QPN;
/// Largest UD payload: the port's active MTU.
pub const UD_MTU: usize = 4096;

/// The header in front of every datagram.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct UdHdr {
    pub magic: u32,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    pub qkey: u32,
    pub imm: u32,
    pub flags: u32,
    pub len: u32,
    pub _pad: u32,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

// SAFETY: repr(C) integers and byte arrays only.
unsafe impl Pod for UdHdr {}

impl UdHdr {
    pub fn new(src_qpn: u32, dst_qpn: u32, qkey: u32, sgid: [u8; 16], dgid: [u8; 16]) -> UdHdr {
        UdHdr { magic: MAGIC, src_qpn, dst_qpn, qkey, sgid, dgid, ..UdHdr::default() }
    }

    pub fn valid(&self, n: usize) -> bool {
        self.magic == MAGIC
            && n >= std::mem::size_of::<UdHdr>() + self.len as usize
            && self.len as usize <= UD_MTU
    }
}

pub const HDR_LEN: usize = std::mem::size_of::<UdHdr>();

/// The most bytes of messages one datagram carries: a receiver's queue holds only
/// `net.unix.max_dgram_qlen` datagrams (10 by default), so messages held for a full destination
/// go together, and the queue then holds that many times more of them.
pub const COALESCE_BYTES: usize = 64 * 1024;
/// The most messages in one datagram (each is one `iovec` of the send).
pub const COALESCE_MESSAGES: usize = 256;

/// The messages of a received datagram `buf`, in order, each with its payload. A peer's bytes
/// are untrusted: it stops at the first message that is not whole and valid, and nothing past
/// `buf` is read.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (UdHdr, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let h = UdHdr::from_bytes(rest)?;
        if !h.valid(rest.len()) {
            return None;
        }
        let end = HDR_LEN + h.len as usize;
        let payload = rest.get(HDR_LEN..end)?;
        rest = &rest[end..];
        Some((h, payload))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32, fill: u8) -> Vec<u8> {
        let mut h = UdHdr::new(1, 2, 3, [0; 16], [0; 16]);
        h.len = len;
        let mut v = h.as_bytes().to_vec();
        v.extend(std::iter::repeat_n(fill, len as usize));
        v
    }

    #[test]
    fn a_datagram_holds_messages_back_to_back() {
        let mut d = message(5, 0xaa);
        d.extend(message(0, 0));
        d.extend(message(UD_MTU as u32, 0xbb));
        let got: Vec<(u32, Vec<u8>)> = messages(&d).map(|(h, p)| (h.len, p.to_vec())).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (5, vec![0xaa; 5]));
        assert_eq!(got[1], (0, vec![]));
        assert_eq!(got[2], (UD_MTU as u32, vec![0xbb; UD_MTU]));
    }

    #[test]
    fn parsing_stops_at_the_first_message_that_is_not_whole_or_valid() {
        let mut d = message(5, 1);
        d.extend(message(8, 2));
        // Truncated inside the second message's payload: only the first comes out.
        assert_eq!(messages(&d[..d.len() - 1]).count(), 1);
        // A second header claiming more than the MTU, or a bad magic, ends it there too.
        let mut big = message(5, 1);
        let mut h = UdHdr::new(1, 2, 3, [0; 16], [0; 16]);
        h.len = UD_MTU as u32 + 1;
        big.extend(h.as_bytes());
        big.extend(vec![0; UD_MTU + 1]);
        assert_eq!(messages(&big).count(), 1);
        let mut bad = message(5, 1);
        bad.extend(vec![0xff; HDR_LEN + 4]);
        assert_eq!(messages(&bad).count(), 1);
        assert_eq!(messages(&[]).count(), 0);
        assert_eq!(messages(&[0u8; 7]).count(), 0);
    }
}
