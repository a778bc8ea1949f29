//! The REQ message (IBA vol. 1, 12.6.5, table 106) and the path it carries.

use super::fields::*;
use super::WireError;

/// Private data bytes of a REQ.
pub const REQ_PRIVATE: usize = 92;

/// Transport service type of a REQ (XRC: type 3 with extended transport type 1, annex A14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    #[default]
    Rc,
    Uc,
    Rd,
    Xrc,
}

impl ServiceType {
    fn from_bits(v: u8, extended: u8) -> Result<Self, WireError> {
        match (v, extended) {
            (0, _) => Ok(ServiceType::Rc),
            (1, _) => Ok(ServiceType::Uc),
            (2, _) => Ok(ServiceType::Rd),
            (3, 1) => Ok(ServiceType::Xrc),
            _ => Err(WireError::BadField("transport service type")),
        }
    }
    /// (Transport service type, extended transport type).
    fn bits(self) -> (u8, u8) {
        match self {
            ServiceType::Rc => (0, 0),
            ServiceType::Uc => (1, 0),
            ServiceType::Rd => (2, 0),
            ServiceType::Xrc => (3, 1),
        }
    }
}

/// A path (primary or alternate) as a REQ describes it. On RoCEv2 the GIDs are the IP
/// addresses (IPv4-mapped for IPv4, [`super::gid_from_ip`]) and the LIDs are 0xffff (permissive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits (IBA rate encoding).
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

/// Path fields, at their offset within the path block (52 for primary, 96 for alternate).
impl Path {
    const LEN: usize = 44;
    fn read(b: &Body, at: usize) -> Path {
        let mut local_gid = [0; 16];
        local_gid.copy_from_slice(&b[at + 4..at + 20]);
        let mut remote_gid = [0; 16];
        remote_gid.copy_from_slice(&b[at + 20..at + 36]);
        Path {
            local_lid: get16(b, at),
            remote_lid: get16(b, at + 2),
            local_gid,
            remote_gid,
            flow_label: get32(b, at + 36) >> 12,
            packet_rate: getbits(b, at + 39, 2, 6),
            traffic_class: get8(b, at + 40),
            hop_limit: get8(b, at + 41),
            sl: getbits(b, at + 42, 0, 4),
            subnet_local: getbits(b, at + 42, 4, 1) != 0,
            local_ack_timeout: getbits(b, at + 43, 0, 5),
        }
    }
    fn write(&self, b: &mut Body, at: usize) {
        put16(b, at, self.local_lid);
        put16(b, at + 2, self.remote_lid);
        b[at + 4..at + 20].copy_from_slice(&self.local_gid);
        b[at + 20..at + 36].copy_from_slice(&self.remote_gid);
        put32(b, at + 36, (self.flow_label & 0xf_ffff) << 12);
        putbits(b, at + 39, 2, 6, self.packet_rate);
        put8(b, at + 40, self.traffic_class);
        put8(b, at + 41, self.hop_limit);
        putbits(b, at + 42, 0, 4, self.sl);
        putbits(b, at + 42, 4, 1, self.subnet_local.into());
        putbits(b, at + 43, 0, 5, self.local_ack_timeout);
    }
}

/// Connection request: the fields rdma_cm fills. RD (EECNs) and vendor ids are not carried;
/// they are sent as zero and ignored on receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    /// rdma_cm: `(port space << 16) + port` ([`super::service_id`]).
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits: 4.096 µs × 2^value.
    pub remote_cm_response_timeout: u8,
    pub transport: ServiceType,
    pub flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// `ibv_mtu` encoding, 1 (256) ..= 5 (4096).
    pub path_mtu: u8,
    /// 3 bits (7: infinite).
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    pub primary: Path,
    pub alternate: Path,
    pub private_data: Bytes<REQ_PRIVATE>,
}

impl Req {
    pub(super) fn read(b: &Body) -> Result<Req, WireError> {
        let path_mtu = getbits(b, 50, 0, 4);
        if !(1..=5).contains(&path_mtu) {
            return Err(WireError::BadField("path MTU"));
        }
        Ok(Req {
            local_comm_id: get32(b, 0),
            service_id: get64(b, 8),
            local_ca_guid: get64(b, 16),
            local_qkey: get32(b, 28),
            local_qpn: get24(b, 32),
            responder_resources: get8(b, 35),
            initiator_depth: get8(b, 39),
            remote_cm_response_timeout: getbits(b, 43, 0, 5),
            transport: ServiceType::from_bits(getbits(b, 43, 5, 2), getbits(b, 51, 5, 3))?,
            flow_control: getbits(b, 43, 7, 1) != 0,
            starting_psn: get24(b, 44),
            local_cm_response_timeout: getbits(b, 47, 0, 5),
            retry_count: getbits(b, 47, 5, 3),
            pkey: get16(b, 48),
            path_mtu,
            rnr_retry_count: getbits(b, 50, 5, 3),
            max_cm_retries: getbits(b, 51, 0, 4),
            srq: getbits(b, 51, 4, 1) != 0,
            primary: Path::read(b, 52),
            alternate: Path::read(b, 52 + Path::LEN),
            private_data: get_bytes(b, 140),
        })
    }

    pub(super) fn write(&self, b: &mut Body) {
        put32(b, 0, self.local_comm_id);
        put64(b, 8, self.service_id);
        put64(b, 16, self.local_ca_guid);
        put32(b, 28, self.local_qkey);
        put24(b, 32, self.local_qpn);
        put8(b, 35, self.responder_resources);
        put8(b, 39, self.initiator_depth);
        putbits(b, 43, 0, 5, self.remote_cm_response_timeout);
        let (transport, extended) = self.transport.bits();
        putbits(b, 43, 5, 2, transport);
        putbits(b, 51, 5, 3, extended);
        putbits(b, 43, 7, 1, self.flow_control.into());
        put24(b, 44, self.starting_psn);
        putbits(b, 47, 0, 5, self.local_cm_response_timeout);
        putbits(b, 47, 5, 3, self.retry_count);
        put16(b, 48, self.pkey);
        putbits(b, 50, 0, 4, self.path_mtu);
        putbits(b, 50, 5, 3, self.rnr_retry_count);
        putbits(b, 51, 0, 4, self.max_cm_retries);
        putbits(b, 51, 4, 1, self.srq.into());
        self.primary.write(b, 52);
        self.alternate.write(b, 52 + Path::LEN);
        put_bytes(b, 140, &self.private_data);
    }
}
