//! Datagrams between UD QPs of one host: one unix datagram per message, sent to the socket
//! that owns the destination QPN, and multicast membership as bound marker sockets
//! (`rdmashim/mc/<mgid>/<qpn>`) that senders list in /proc/net/unix.

use super::link::qp_name;
use crate::errno::Result;
use crate::runtime::unix::{self, Pod};
use std::os::fd::{OwnedFd, RawFd};

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

/// Offers one datagram (header and payload, in `parts`) to `dst_qpn`'s socket without waiting.
/// False when the receiver's queue is full (unix datagram queues hold only
/// `net.unix.max_dgram_qlen` messages until its progress thread drains them): the caller holds
/// it and tries again (`ud_backlog`). A receiver that is gone drops it, as an unreliable
/// datagram service may: that counts as taken.
pub fn offer(sock: RawFd, dst_qpn: u32, parts: &[&[u8]]) -> bool {
    unix::send_dgram(sock, &qp_name(dst_qpn), parts) != Err(crate::Errno::EAGAIN)
}

fn group_prefix(mgid: &[u8; 16]) -> String {
    let hex: String = mgid.iter().map(|b| format!("{b:02x}")).collect();
    format!("rdmashim/mc/{hex}/")
}

/// Marks `qpn` as attached to the group `mgid` for as long as the returned socket lives.
pub fn join(mgid: &[u8; 16], qpn: u32) -> Result<OwnedFd> {
    unix::bind_dgram(&format!("{}{qpn:06x}", group_prefix(mgid)))
}

/// The QPNs attached to `mgid` on this host.
pub fn members(mgid: &[u8; 16]) -> Vec<u32> {
    let prefix = group_prefix(mgid);
    unix::bound_names(&prefix)
        .iter()
        .filter_map(|n| u32::from_str_radix(&n[prefix.len()..], 16).ok())
        .collect()
}
