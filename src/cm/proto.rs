//! The CM wire messages exchanged over a connection's socket.

use crate::runtime::unix::Pod;

pub const REQ: u32 = 1;
pub const REP: u32 = 2;
pub const RTU: u32 = 3;
pub const REJ: u32 = 4;
pub const DREQ: u32 = 5;
pub const DREP: u32 = 6;
/// Service ID resolution (UD): request and reply.
pub const SIDR_REQ: u32 = 7;
pub const SIDR_REP: u32 = 8;

/// Private data limits of SIDR (UD) messages.
pub const SIDR_REQ_PRIVATE: usize = 180;
pub const SIDR_REP_PRIVATE: usize = 136;
/// SIDR REP statuses.
pub const SIDR_UNSUPPORTED: i32 = 1;
pub const SIDR_REJECT: i32 = 2;

/// Largest private data any message carries (REP on IB: 196 bytes).
pub const MAX_PRIVATE: usize = 196;
// (SIDR REQ's 180 bytes also fit.)
/// Private data limits of rdma_cm over IB/RoCE for RC (REQ, REP, REJ).
pub const REQ_PRIVATE: usize = 56;
pub const REP_PRIVATE: usize = 196;
pub const REJ_PRIVATE: usize = 148;

/// `Msg::transport` of a REQ: the IB CM's transport service type of the initiator's QP.
pub const TRANSPORT_RC: u8 = 0;
pub const TRANSPORT_UC: u8 = 1;
pub const TRANSPORT_XRC: u8 = 3;

/// IB CM reject reason for a consumer reject.
pub const REJ_CONSUMER: i32 = 28;
/// IB CM reject reason when no listener matches (invalid service id).
pub const REJ_NO_LISTENER: i32 = 8;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Msg {
    pub kind: u32,
    pub qpn: u32,
    pub status: i32,
    pub private_len: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    /// REQ: the path MTU (`ibv_mtu`; 0 when the carrier has no path, i.e. one namespace).
    pub path_mtu: u8,
    /// REQ: the initiator's QP type, as the IB CM's transport service type (`TRANSPORT_*`).
    pub transport: u8,
    /// REQ, REP: the sender's starting PSN (its QP's `sq_psn`).
    pub psn: u32,
    /// SIDR: the responder's qkey.
    pub qkey: u32,
    /// Enhanced connection establishment options (`rdma_set_local_ece`), 0 when unset.
    pub ece_vendor: u32,
    pub ece_options: u32,
    /// Sender's address, as a sockaddr_in6 (IPv4 is v4-mapped), for the peer's route data.
    pub src: [u8; 28],
    pub dst: [u8; 28],
    pub private: [u8; MAX_PRIVATE],
}

// SAFETY: repr(C) integers and byte arrays only.
unsafe impl Pod for Msg {}

// tests/hardening/common.py (`cm_msg`) builds this layout byte for byte: keep the two in step.
const _: () = assert!(std::mem::size_of::<Msg>() == 292);

impl Msg {
    pub fn new(kind: u32) -> Msg {
        Msg {
            kind,
            qpn: 0,
            status: 0,
            private_len: 0,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            path_mtu: 0,
            transport: TRANSPORT_RC,
            psn: 0,
            qkey: 0,
            ece_vendor: 0,
            ece_options: 0,
            src: [0; 28],
            dst: [0; 28],
            private: [0; MAX_PRIVATE],
        }
    }

    pub fn private_data(&self) -> &[u8] {
        &self.private[..(self.private_len as usize).min(MAX_PRIVATE)]
    }
}

/// Decodes a message from a peer: exactly one `Msg`, of a known kind, with a private data
/// length that fits (every field is then safe to use as is).
pub fn decode(b: &[u8]) -> Option<Msg> {
    if b.len() != std::mem::size_of::<Msg>() {
        return None;
    }
    let m = Msg::from_bytes(b)?;
    let known = (REQ..=SIDR_REP).contains(&m.kind);
    (known && m.private_len as usize <= MAX_PRIVATE).then_some(m)
}
