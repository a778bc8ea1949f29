//! RoCEv2 wire formats, pure (no I/O): the InfiniBand transport headers ([`headers`]), the
//! opcode table ([`opcode`]), whole packets ([`packet`]: encode into a caller's buffer, decode
//! untrusted bytes), the invariant CRC ([`icrc`]) and path MTU / segmentation ([`mtu`]).
//!
//! A RoCEv2 packet is the UDP payload (destination port [`ROCE_UDP_PORT`]): BTH, extension
//! headers, payload, pad to 4 bytes, ICRC. See docs/DESIGN-NOTES.md, "Wire formats".

pub mod headers;
pub mod icrc;
pub mod mtu;
pub mod opcode;
pub mod packet;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_decode;

/// The UDP port RoCEv2 is registered on.
pub const ROCE_UDP_PORT: u16 = 4791;
/// The Q_Key of QP1, the general services QP that carries CM MADs.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// QP1: the CM's MADs go there.
pub const GSI_QPN: u32 = 1;

pub use headers::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ieth, ImmDt, NakCode, Reth, Syndrome, XrcEth,
};
pub use icrc::{Flow, FlowAddrs};
pub use packet::{decode, decode_unverified, encode, DecodeError, EncodeError, Exts, Packet};
