//! librdmacm's rsocket wire formats, so an rdmashim rsocket can talk to a librdmacm one:
//! the connection private data, the immediate-data message word, and the SGE that a receiver
//! RDMA-writes into its peer's target SGL to hand over a free half of its receive buffer.
//!
//! The immediate word (network order on the wire) is `op << 29 | data`; data messages carry
//! the byte count, SGL messages the sequence number up to which the sender may send.

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const OP_DATA: u32 = 0;
pub const OP_WRITE: u32 = 2;
pub const OP_SGL: u32 = 4;
pub const OP_IOMAP_SGL: u32 = 6;
pub const OP_CTRL: u32 = 7;

pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_KEEPALIVE: u32 = 1;
pub const CTRL_SHUTDOWN: u32 = 2;

/// Slots in each side's target SGL: the receive buffer is handed over in halves.
pub const SGL_SIZE: usize = 2;
/// Bytes of one `rs_sge` (addr u64, key u32, length u32).
pub const SGE_LEN: usize = 16;
/// Bytes of one `rs_iomap` (offset u64 then an `rs_sge`).
pub const IOMAP_LEN: usize = 24;

pub const CONN_VERSION: u8 = 1;
/// The sender's host is big-endian (its runtime SGEs are in network order).
pub const CONN_FLAG_NET: u8 = 1 << 0;
/// The sender has an iomap table after its target SGL.
pub const CONN_FLAG_IOMAP: u8 = 1 << 1;

pub fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}
pub fn msg_op(m: u32) -> u32 {
    m >> 29
}
pub fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// `struct rs_sge` in the connection data (network order there).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ConnSge {
    pub addr: U64,
    pub key: U32,
    pub length: U32,
}

/// `struct rs_conn_data`: exchanged in the REQ and REP private data (40 bytes).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    pub credits: U16,
    pub reserved: [u8; 3],
    pub target_iomap_size: u8,
    pub target_sgl: ConnSge,
    pub data_buf: ConnSge,
}

impl ConnData {
    /// Parses a peer's private data: `None` unless it holds a version-1 record.
    pub fn parse(b: &[u8]) -> Option<ConnData> {
        let (c, _) = ConnData::read_from_prefix(b).ok()?;
        (c.version == CONN_VERSION).then_some(c)
    }
}

/// An SGE as a peer writes it into our target SGL at run time: in the *writer's* host order
/// unless the writer saw that we differ (then in ours). We always write ours in host order
/// and let a peer of the other endianness swap (`RS_OPT_SWAP_SGL` in librdmacm).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl Sge {
    pub fn to_bytes(self, swap: bool) -> [u8; SGE_LEN] {
        let mut b = [0; SGE_LEN];
        let (a, k, l) = if swap {
            (self.addr.swap_bytes(), self.key.swap_bytes(), self.length.swap_bytes())
        } else {
            (self.addr, self.key, self.length)
        };
        b[..8].copy_from_slice(&a.to_ne_bytes());
        b[8..12].copy_from_slice(&k.to_ne_bytes());
        b[12..].copy_from_slice(&l.to_ne_bytes());
        b
    }
    pub fn from_bytes(b: &[u8; SGE_LEN]) -> Sge {
        let mut a = [0; 8];
        a.copy_from_slice(&b[..8]);
        let mut k = [0; 4];
        k.copy_from_slice(&b[8..12]);
        let mut l = [0; 4];
        l.copy_from_slice(&b[12..]);
        Sge {
            addr: u64::from_ne_bytes(a),
            key: u32::from_ne_bytes(k),
            length: u32::from_ne_bytes(l),
        }
    }
}

/// librdmacm's 8-bit "scale" encoding of the iomap size (exact up to 128).
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_is_librdmacm_layout() {
        assert_eq!(std::mem::size_of::<ConnData>(), 40);
        let c = ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP,
            credits: 384.into(),
            target_sgl: ConnSge { addr: 0x1122.into(), key: 7.into(), length: 2.into() },
            ..Default::default()
        };
        let b = c.as_bytes();
        assert_eq!(&b[..4], &[1, 2, 1, 128]);
        assert_eq!(&b[8..16], &0x1122u64.to_be_bytes());
        assert_eq!(&b[16..20], &7u32.to_be_bytes());
        let back = ConnData::parse(b).unwrap();
        assert_eq!(back.credits.get(), 384);
        assert!(ConnData::parse(&b[..39]).is_none());
        let mut v2 = b.to_vec();
        v2[0] = 2;
        assert!(ConnData::parse(&v2).is_none());
    }

    #[test]
    fn msg_word_and_sge_roundtrip() {
        let m = msg(OP_SGL, 0x2000_0001);
        assert_eq!(msg_op(m), OP_SGL);
        assert_eq!(msg_data(m), 1);
        let s = Sge { addr: 0xdead_beef_0000, key: 9, length: 65536 };
        assert_eq!(Sge::from_bytes(&s.to_bytes(false)), s);
        assert_ne!(Sge::from_bytes(&s.to_bytes(true)), s);
        assert_eq!(scale_to_value(value_to_scale(64, 8), 8), 64);
    }
}
