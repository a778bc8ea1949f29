//! The MAD common header (IBA vol. 1, 13.4.3) and the CM's use of it: base version 1,
//! management class 0x07 (communication management), class version 2, method Send.

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A MAD is always 256 bytes: this header and 232 bytes of class data.
pub const MAD_LEN: usize = 256;
pub const MAD_HDR_LEN: usize = 24;
/// Bytes after the header: a CM message body.
pub const BODY_LEN: usize = MAD_LEN - MAD_HDR_LEN;

pub const BASE_VERSION: u8 = 1;
pub const MGMT_CLASS_CM: u8 = 0x07;
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send: every CM message is one (responses are messages of their own).
pub const METHOD_SEND: u8 = 0x03;

/// The CM's attribute ids: one per message type (IBA 16.7.2 / 12.6).
pub mod attr {
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;
}

/// The 24-byte common header, in wire order.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct MadHdr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// R (response) bit and method.
    pub method: u8,
    pub status: U16,
    pub class_specific: U16,
    pub tid: U64,
    pub attr_id: U16,
    pub resv: U16,
    pub attr_mod: U32,
}

const _: () = assert!(size_of::<MadHdr>() == MAD_HDR_LEN);

impl MadHdr {
    /// The header of a CM message with attribute `attr_id` and transaction id `tid`.
    pub fn cm(attr_id: u16, tid: u64) -> Self {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            tid: tid.into(),
            attr_id: attr_id.into(),
            ..Default::default()
        }
    }
}
