//! The CM messages other than REQ (IBA vol. 1, 12.6, tables 107–120): MRA, REJ, REP, RTU,
//! DREQ, DREP, SIDR_REQ and SIDR_REP. Offsets are the tables' byte offsets in the message body.

use super::fields::*;
use super::WireError;

pub const MRA_PRIVATE: usize = 222;
pub const REJ_PRIVATE: usize = 148;
pub const REP_PRIVATE: usize = 196;
pub const RTU_PRIVATE: usize = 224;
pub const DREQ_PRIVATE: usize = 220;
pub const DREP_PRIVATE: usize = 224;
pub const SIDR_REQ_PRIVATE: usize = 216;
pub const SIDR_REP_PRIVATE: usize = 136;
/// Bytes of a REJ's ARI and of a SIDR_REP's additional information.
pub const INFO_LEN: usize = 72;

/// Which message an MRA or REJ answers (2 bits; 3 is reserved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MsgRef {
    #[default]
    Req,
    Rep,
    /// LAP for an MRA, "other" for a REJ.
    Other,
}

impl MsgRef {
    fn from_bits(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(MsgRef::Req),
            1 => Ok(MsgRef::Rep),
            2 => Ok(MsgRef::Other),
            _ => Err(WireError::BadField("message MRAed/REJected")),
        }
    }
    fn bits(self) -> u8 {
        self as u8
    }
}

/// Message receipt acknowledgement: "I need more time".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MsgRef,
    /// 5 bits: 4.096 µs × 2^value.
    pub service_timeout: u8,
    pub private_data: Bytes<MRA_PRIVATE>,
}

impl Mra {
    pub(super) fn read(b: &Body) -> Result<Self, WireError> {
        Ok(Mra {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            message_mraed: MsgRef::from_bits(getbits(b, 8, 0, 2))?,
            service_timeout: getbits(b, 9, 0, 5),
            private_data: get_bytes(b, 10),
        })
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        putbits(b, 8, 0, 2, self.message_mraed.bits());
        putbits(b, 9, 0, 5, self.service_timeout);
        put_bytes(b, 10, &self.private_data);
    }
}

/// Reject reasons rdma_cm uses (IBA table 109).
pub mod reason {
    pub const NO_QP: u16 = 1;
    pub const TIMEOUT: u16 = 14;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const STALE_CONN: u16 = 10;
    pub const INVALID_COMM_ID: u16 = 21;
    /// The consumer rejected (rdma_reject).
    pub const CONSUMER_REJECT: u16 = 28;
}

/// Reject.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MsgRef,
    /// Bytes of `ari` that carry information (7 bits, at most 72).
    pub ari_len: u8,
    pub reason: u16,
    /// Additional reject information.
    pub ari: Bytes<INFO_LEN>,
    pub private_data: Bytes<REJ_PRIVATE>,
}

impl Rej {
    pub(super) fn read(b: &Body) -> Result<Self, WireError> {
        let ari_len = getbits(b, 9, 0, 7);
        if usize::from(ari_len) > INFO_LEN {
            return Err(WireError::BadField("reject info length"));
        }
        Ok(Rej {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            message_rejected: MsgRef::from_bits(getbits(b, 8, 0, 2))?,
            ari_len,
            reason: get16(b, 10),
            ari: get_bytes(b, 12),
            private_data: get_bytes(b, 84),
        })
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        putbits(b, 8, 0, 2, self.message_rejected.bits());
        putbits(b, 9, 0, 7, self.ari_len);
        put16(b, 10, self.reason);
        put_bytes(b, 12, &self.ari);
        put_bytes(b, 84, &self.private_data);
    }
}

/// Reply to a REQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: Bytes<REP_PRIVATE>,
}

impl Rep {
    pub(super) fn read(b: &Body) -> Result<Self, WireError> {
        Ok(Rep {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            local_qkey: get32(b, 8),
            local_qpn: get24(b, 12),
            starting_psn: get24(b, 20),
            responder_resources: get8(b, 24),
            initiator_depth: get8(b, 25),
            target_ack_delay: getbits(b, 26, 0, 5),
            failover_accepted: getbits(b, 26, 5, 2),
            flow_control: getbits(b, 26, 7, 1) != 0,
            rnr_retry_count: getbits(b, 27, 0, 3),
            srq: getbits(b, 27, 3, 1) != 0,
            local_ca_guid: get64(b, 28),
            private_data: get_bytes(b, 36),
        })
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, self.local_qkey);
        put24(b, 12, self.local_qpn);
        put24(b, 20, self.starting_psn);
        put8(b, 24, self.responder_resources);
        put8(b, 25, self.initiator_depth);
        putbits(b, 26, 0, 5, self.target_ack_delay);
        putbits(b, 26, 5, 2, self.failover_accepted);
        putbits(b, 26, 7, 1, self.flow_control.into());
        putbits(b, 27, 0, 3, self.rnr_retry_count);
        putbits(b, 27, 3, 1, self.srq.into());
        put64(b, 28, self.local_ca_guid);
        put_bytes(b, 36, &self.private_data);
    }
}

/// Ready to use (REQ's sender, after the REP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: Bytes<RTU_PRIVATE>,
}

/// Disconnect request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits).
    pub remote_qpn: u32,
    pub private_data: Bytes<DREQ_PRIVATE>,
}

/// Disconnect reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: Bytes<DREP_PRIVATE>,
}

impl Rtu {
    pub(super) fn read(b: &Body) -> Self {
        Rtu {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            private_data: get_bytes(b, 8),
        }
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put_bytes(b, 8, &self.private_data);
    }
}

impl Dreq {
    pub(super) fn read(b: &Body) -> Self {
        Dreq {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            remote_qpn: get24(b, 8),
            private_data: get_bytes(b, 12),
        }
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put24(b, 8, self.remote_qpn);
        put_bytes(b, 12, &self.private_data);
    }
}

impl Drep {
    pub(super) fn read(b: &Body) -> Self {
        Drep {
            local_comm_id: get32(b, 0),
            remote_comm_id: get32(b, 4),
            private_data: get_bytes(b, 8),
        }
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put_bytes(b, 8, &self.private_data);
    }
}

/// Service ID resolution request (UD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: Bytes<SIDR_REQ_PRIVATE>,
}

impl SidrReq {
    pub(super) fn read(b: &Body) -> Self {
        SidrReq {
            request_id: get32(b, 0),
            pkey: get16(b, 4),
            service_id: get64(b, 8),
            private_data: get_bytes(b, 16),
        }
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.request_id);
        put16(b, 4, self.pkey);
        put64(b, 8, self.service_id);
        put_bytes(b, 16, &self.private_data);
    }
}

/// SIDR_REP status (IBA table 121).
pub mod sidr_status {
    pub const VALID: u8 = 0;
    pub const SERVICE_ID_NOT_SUPPORTED: u8 = 1;
    pub const REJECTED: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// Service ID resolution reply: the QPN and Q_Key to send to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SidrRep {
    pub request_id: u32,
    /// [`sidr_status`].
    pub status: u8,
    /// Bytes of `info` that carry information (at most 72).
    pub info_len: u8,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub info: Bytes<INFO_LEN>,
    pub private_data: Bytes<SIDR_REP_PRIVATE>,
}

impl SidrRep {
    pub(super) fn read(b: &Body) -> Result<Self, WireError> {
        let status = get8(b, 4);
        if status > sidr_status::UNSUPPORTED_VERSION {
            return Err(WireError::BadField("SIDR status"));
        }
        let info_len = get8(b, 5);
        if usize::from(info_len) > INFO_LEN {
            return Err(WireError::BadField("additional information length"));
        }
        Ok(SidrRep {
            request_id: get32(b, 0),
            status,
            info_len,
            qpn: get24(b, 8),
            service_id: get64(b, 12),
            qkey: get32(b, 20),
            info: get_bytes(b, 24),
            private_data: get_bytes(b, 96),
        })
    }
    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.request_id);
        put8(b, 4, self.status);
        put8(b, 5, self.info_len);
        put24(b, 8, self.qpn);
        put64(b, 12, self.service_id);
        put32(b, 20, self.qkey);
        put_bytes(b, 24, &self.info);
        put_bytes(b, 96, &self.private_data);
    }
}
