//! The InfiniBand CM's wire protocol, pure (no I/O): MADs of management class 0x07 carrying
//! REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP ([`mad`], [`req`], [`msgs`]), and
//! the rdma_cm IP header at the start of a REQ's or SIDR_REQ's private data ([`ip_hdr`]).
//! On RoCEv2 these travel in UD SEND Only packets to QP1 with Q_Key 0x80010000.
//!
//! [`decode`] takes untrusted bytes and returns a typed [`Cm`] or a [`WireError`]; [`encode`]
//! writes a 256-byte MAD and refuses a message whose fields do not fit their wire width, so
//! whatever it emits decodes to the same message.

pub mod fields;
pub mod ip_hdr;
pub mod mad;
pub mod msgs;
pub mod req;

#[cfg(test)]
mod tests;

pub use fields::Bytes;
pub use ip_hdr::{CmaHdr, CMA_HDR_LEN};

/// User private data rdma_cm allows on a REQ: what the IP header leaves.
pub const REQ_USER_PRIVATE: usize = req::REQ_PRIVATE - CMA_HDR_LEN;
pub use mad::{attr, MadHdr, MAD_LEN};
pub use msgs::{Drep, Dreq, Mra, MsgRef, Rej, Rep, Rtu, SidrRep, SidrReq};
pub use req::{Path, Req, ServiceType};

use fields::Body;
use mad::{BASE_VERSION, BODY_LEN, CM_CLASS_VERSION, MAD_HDR_LEN, METHOD_SEND, MGMT_CLASS_CM};
use std::net::{IpAddr, Ipv6Addr};
use zerocopy::{FromBytes, IntoBytes};

/// Why bytes are not a CM message this codec accepts, or a message cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Not exactly [`MAD_LEN`] bytes.
    BadLength(usize),
    BadBaseVersion(u8),
    /// A management class other than CM (0x07).
    NotCm(u8),
    BadClassVersion(u8),
    /// A method other than Send (0x03), or the response bit set.
    UnsupportedMethod(u8),
    /// An attribute id that names no supported CM message (LAP and APR included).
    UnknownAttribute(u16),
    /// A field holds a value the specification reserves (or, on encode, one too wide).
    BadField(&'static str),
}

/// One CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    Req(Req),
    Mra(Mra),
    Rej(Rej),
    Rep(Rep),
    Rtu(Rtu),
    Dreq(Dreq),
    Drep(Drep),
    SidrReq(SidrReq),
    SidrRep(SidrRep),
}

impl Msg {
    /// The MAD attribute id of this message type.
    pub fn attr_id(&self) -> u16 {
        match self {
            Msg::Req(_) => attr::REQ,
            Msg::Mra(_) => attr::MRA,
            Msg::Rej(_) => attr::REJ,
            Msg::Rep(_) => attr::REP,
            Msg::Rtu(_) => attr::RTU,
            Msg::Dreq(_) => attr::DREQ,
            Msg::Drep(_) => attr::DREP,
            Msg::SidrReq(_) => attr::SIDR_REQ,
            Msg::SidrRep(_) => attr::SIDR_REP,
        }
    }
    /// The message's private data (its full fixed-size field).
    pub fn private_data(&self) -> &[u8] {
        match self {
            Msg::Req(m) => m.private_data.as_slice(),
            Msg::Mra(m) => m.private_data.as_slice(),
            Msg::Rej(m) => m.private_data.as_slice(),
            Msg::Rep(m) => m.private_data.as_slice(),
            Msg::Rtu(m) => m.private_data.as_slice(),
            Msg::Dreq(m) => m.private_data.as_slice(),
            Msg::Drep(m) => m.private_data.as_slice(),
            Msg::SidrReq(m) => m.private_data.as_slice(),
            Msg::SidrRep(m) => m.private_data.as_slice(),
        }
    }
}

/// A CM MAD: its transaction id and message. Status, class-specific and attribute-modifier
/// fields of the header are sent as zero and ignored on receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cm {
    pub tid: u64,
    pub msg: Msg,
}

/// Writes `cm` as a 256-byte MAD into `out`. Fails (leaving `out` unspecified) if a field
/// does not fit its wire width or holds a reserved value.
pub fn encode(cm: &Cm, out: &mut [u8; MAD_LEN]) -> Result<(), WireError> {
    out.fill(0);
    let (hdr, body) = out.split_at_mut(MAD_HDR_LEN);
    hdr.copy_from_slice(MadHdr::cm(cm.msg.attr_id(), cm.tid).as_bytes());
    let body: &mut Body = body.try_into().map_err(|_| WireError::BadLength(MAD_LEN))?;
    match &cm.msg {
        Msg::Req(m) => m.write(body),
        Msg::Mra(m) => m.write(body),
        Msg::Rej(m) => m.write(body),
        Msg::Rep(m) => m.write(body),
        Msg::Rtu(m) => m.write(body),
        Msg::Dreq(m) => m.write(body),
        Msg::Drep(m) => m.write(body),
        Msg::SidrReq(m) => m.write(body),
        Msg::SidrRep(m) => m.write(body),
    }
    // Narrow fields are masked on write: a value that did not survive was out of range.
    match decode(out) {
        Ok(back) if back == *cm => Ok(()),
        Ok(_) => Err(WireError::BadField("value wider than its field")),
        Err(e) => Err(e),
    }
}

/// Decodes a MAD received from a peer. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Cm, WireError> {
    if bytes.len() != MAD_LEN {
        return Err(WireError::BadLength(bytes.len()));
    }
    let (hdr, rest) =
        MadHdr::read_from_prefix(bytes).map_err(|_| WireError::BadLength(bytes.len()))?;
    if hdr.base_version != BASE_VERSION {
        return Err(WireError::BadBaseVersion(hdr.base_version));
    }
    if hdr.mgmt_class != MGMT_CLASS_CM {
        return Err(WireError::NotCm(hdr.mgmt_class));
    }
    if hdr.class_version != CM_CLASS_VERSION {
        return Err(WireError::BadClassVersion(hdr.class_version));
    }
    if hdr.method != METHOD_SEND {
        return Err(WireError::UnsupportedMethod(hdr.method));
    }
    let body: &Body = rest.try_into().map_err(|_| WireError::BadLength(bytes.len()))?;
    let msg = match hdr.attr_id.get() {
        attr::REQ => Msg::Req(Req::read(body)?),
        attr::MRA => Msg::Mra(Mra::read(body)?),
        attr::REJ => Msg::Rej(Rej::read(body)?),
        attr::REP => Msg::Rep(Rep::read(body)?),
        attr::RTU => Msg::Rtu(Rtu::read(body)),
        attr::DREQ => Msg::Dreq(Dreq::read(body)),
        attr::DREP => Msg::Drep(Drep::read(body)),
        attr::SIDR_REQ => Msg::SidrReq(SidrReq::read(body)),
        attr::SIDR_REP => Msg::SidrRep(SidrRep::read(body)?),
        other => return Err(WireError::UnknownAttribute(other)),
    };
    const _: () = assert!(BODY_LEN == 232);
    Ok(Cm { tid: hdr.tid.get(), msg })
}

/// rdma_cm's port spaces.
pub mod port_space {
    pub const IPOIB: u16 = 0x0002;
    pub const IB: u16 = 0x013f;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
}

/// The service id rdma_cm listens on: `(port space << 16) + port`.
pub fn service_id(port_space: u16, port: u16) -> u64 {
    (u64::from(port_space) << 16) | u64::from(port)
}

/// The (port space, port) of an rdma_cm service id, or `None` for one of another form.
pub fn split_service_id(sid: u64) -> Option<(u16, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

/// The GID of an IP address on RoCEv2: the address itself, IPv4 as `::ffff:a.b.c.d`.
pub fn gid_from_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a RoCEv2 GID stands for.
pub fn ip_from_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}
