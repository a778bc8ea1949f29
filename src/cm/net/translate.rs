//! The id's internal CM messages ([`proto::Msg`]) to InfiniBand CM MADs ([`wire::Msg`]) and
//! back. What the internal message does not carry (comm ids, service id, path, the rdma_cm IP
//! header) comes from the association ([`Ctx`]).

use super::exchange::{MAX_CM_RETRIES, RESPONSE_TIMEOUT};
use crate::cm::id::addr_to_wire;
use crate::cm::proto::{self, Msg};
use crate::cm::wire::{self, msgs, CmaHdr, Path, ServiceType, CMA_HDR_LEN};
use crate::errno::{Errno, Result};
use std::net::SocketAddr;

/// What an association knows that the internal messages leave out.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub local_id: u32,
    /// The peer's comm id (0 until it is known).
    pub remote_id: u32,
    pub service_id: u64,
    /// The rdma_cm addresses (IP and rdma_cm port) of both ends.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// `ibv_mtu` of the path.
    pub path_mtu: u32,
    /// The peer's QPN (DREQ names it).
    pub peer_qpn: u32,
    /// We answered the REQ (a REJ then refers to the REQ, else to the REP).
    pub passive: bool,
}

fn bytes<const N: usize>(data: &[u8]) -> Result<wire::Bytes<N>> {
    wire::Bytes::from_slice(data).ok_or(Errno::EINVAL)
}

/// Private data headed by rdma_cm's IP header (REQ, SIDR_REQ).
fn with_ip_hdr<const N: usize>(c: &Ctx, user: &[u8]) -> Result<wire::Bytes<N>> {
    let mut out = [0u8; N];
    let hdr = CmaHdr { src_port: c.local.port(), src: c.local.ip(), dst: c.remote.ip() };
    hdr.write(&mut out).map_err(|_| Errno::EINVAL)?;
    out.get_mut(CMA_HDR_LEN..CMA_HDR_LEN + user.len()).ok_or(Errno::EINVAL)?.copy_from_slice(user);
    Ok(wire::Bytes(out))
}

fn path(c: &Ctx) -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: wire::gid_from_ip(c.local.ip()),
        remote_gid: wire::gid_from_ip(c.remote.ip()),
        packet_rate: 3,
        hop_limit: 64,
        local_ack_timeout: 15,
        ..Default::default()
    }
}

/// The MAD for an internal message.
pub fn to_wire(m: &Msg, c: &Ctx) -> Result<wire::Msg> {
    let private = m.private_data();
    Ok(match m.kind {
        proto::REQ => wire::Msg::Req(wire::Req {
            local_comm_id: c.local_id,
            service_id: c.service_id,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: m.qpn,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            remote_cm_response_timeout: RESPONSE_TIMEOUT,
            transport: match m.transport {
                proto::TRANSPORT_UC => ServiceType::Uc,
                proto::TRANSPORT_XRC => ServiceType::Xrc,
                _ => ServiceType::Rc,
            },
            flow_control: m.flow_control != 0,
            starting_psn: m.psn,
            local_cm_response_timeout: RESPONSE_TIMEOUT,
            retry_count: m.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: c.path_mtu as u8,
            rnr_retry_count: m.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            srq: m.srq != 0,
            primary: path(c),
            alternate: Path::default(),
            private_data: with_ip_hdr(c, private)?,
        }),
        proto::REP => wire::Msg::Rep(wire::Rep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qpn: m.qpn,
            starting_psn: m.psn,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            target_ack_delay: 0,
            failover_accepted: 0,
            flow_control: m.flow_control != 0,
            rnr_retry_count: m.rnr_retry_count.min(7),
            srq: m.srq != 0,
            private_data: bytes(private)?,
            ..Default::default()
        }),
        proto::RTU => wire::Msg::Rtu(wire::Rtu {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: bytes(private)?,
        }),
        proto::REJ => wire::Msg::Rej(wire::Rej {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            message_rejected: if c.passive { msgs::MsgRef::Req } else { msgs::MsgRef::Rep },
            ari_len: 0,
            reason: u16::try_from(m.status).map_err(|_| Errno::EINVAL)?,
            ari: Default::default(),
            private_data: bytes(private)?,
        }),
        proto::DREQ => wire::Msg::Dreq(wire::Dreq {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            remote_qpn: c.peer_qpn,
            private_data: bytes(private)?,
        }),
        proto::DREP => wire::Msg::Drep(wire::Drep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: bytes(private)?,
        }),
        proto::SIDR_REQ => wire::Msg::SidrReq(wire::SidrReq {
            request_id: c.local_id,
            pkey: 0xffff,
            service_id: c.service_id,
            private_data: with_ip_hdr(c, private)?,
        }),
        proto::SIDR_REP => wire::Msg::SidrRep(wire::SidrRep {
            request_id: c.remote_id,
            status: u8::try_from(m.status).map_err(|_| Errno::EINVAL)?,
            qpn: m.qpn,
            service_id: c.service_id,
            qkey: m.qkey,
            private_data: bytes(private)?,
            ..Default::default()
        }),
        _ => return Err(Errno::EINVAL),
    })
}

fn with_private(mut m: Msg, data: &[u8], max: usize) -> Msg {
    let d = &data[..data.len().min(max).min(proto::MAX_PRIVATE)];
    m.private[..d.len()].copy_from_slice(d);
    m.private_len = d.len() as u32;
    m
}

/// The internal message of a MAD from the peer of an established association (not REQ or
/// SIDR_REQ: those are [`request_from_wire`]). `None` for messages the id has no use for.
pub fn from_wire(w: &wire::Msg) -> Option<Msg> {
    Some(match w {
        wire::Msg::Rep(r) => {
            let mut m = with_private(Msg::new(proto::REP), r.private_data.as_slice(), usize::MAX);
            m.qpn = r.local_qpn;
            m.psn = r.starting_psn;
            m.responder_resources = r.responder_resources;
            m.initiator_depth = r.initiator_depth;
            m.flow_control = r.flow_control.into();
            m.rnr_retry_count = r.rnr_retry_count;
            m.srq = r.srq.into();
            m
        }
        wire::Msg::Rej(r) => {
            let mut m = with_private(Msg::new(proto::REJ), r.private_data.as_slice(), usize::MAX);
            m.status = i32::from(r.reason);
            m
        }
        wire::Msg::Rtu(_) => Msg::new(proto::RTU),
        wire::Msg::Dreq(_) => Msg::new(proto::DREQ),
        wire::Msg::Drep(_) => Msg::new(proto::DREP),
        wire::Msg::SidrRep(r) => {
            let mut m =
                with_private(Msg::new(proto::SIDR_REP), r.private_data.as_slice(), usize::MAX);
            m.status = i32::from(r.status);
            m.qpn = r.qpn;
            m.qkey = r.qkey;
            m
        }
        _ => return None,
    })
}

/// A request (REQ or SIDR_REQ) as the listener sees it, with the rdma_cm addresses of both
/// ends (from its IP header and service id), or `None` if it is not an rdma_cm request we take.
pub fn request_from_wire(w: &wire::Msg) -> Option<(Msg, Request)> {
    let (kind, service_id, private, user_max) = match w {
        wire::Msg::Req(r) => {
            // rdma_cm connects RC, UC and XRC QPs (not RD); a QPN is required.
            if r.transport == ServiceType::Rd || r.local_qpn == 0 {
                return None;
            }
            (proto::REQ, r.service_id, r.private_data.as_slice(), proto::REQ_PRIVATE)
        }
        wire::Msg::SidrReq(r) => {
            (proto::SIDR_REQ, r.service_id, r.private_data.as_slice(), proto::SIDR_REQ_PRIVATE)
        }
        _ => return None,
    };
    let (ps, port) = wire::split_service_id(service_id)?;
    let hdr = CmaHdr::read(private).ok()?;
    let remote = SocketAddr::new(hdr.src, hdr.src_port);
    let local = SocketAddr::new(hdr.dst, port);
    let mut m = with_private(Msg::new(kind), &private[CMA_HDR_LEN..], user_max);
    m.src = addr_to_wire(&remote);
    m.dst = addr_to_wire(&local);
    if let wire::Msg::Req(r) = w {
        m.qpn = r.local_qpn;
        m.psn = r.starting_psn;
        m.responder_resources = r.responder_resources;
        m.initiator_depth = r.initiator_depth;
        m.flow_control = r.flow_control.into();
        m.retry_count = r.retry_count;
        m.rnr_retry_count = r.rnr_retry_count;
        m.srq = r.srq.into();
        m.path_mtu = r.path_mtu;
        m.transport = match r.transport {
            ServiceType::Uc => proto::TRANSPORT_UC,
            ServiceType::Xrc => proto::TRANSPORT_XRC,
            _ => proto::TRANSPORT_RC,
        };
    } else {
        m.qkey = crate::cm::ud::UDP_QKEY;
    }
    let remote_id = match w {
        wire::Msg::Req(r) => r.local_comm_id,
        wire::Msg::SidrReq(r) => r.request_id,
        _ => return None,
    };
    Some((m, Request { ps: u32::from(ps), local, remote, remote_id, service_id }))
}

/// Where a request goes and whom it comes from.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub ps: u32,
    /// The listener's address (IP header's destination, service id's port).
    pub local: SocketAddr,
    /// The requester's rdma_cm address.
    pub remote: SocketAddr,
    /// The requester's comm id (SIDR: request id).
    pub remote_id: u32,
    pub service_id: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(passive: bool) -> Ctx {
        Ctx {
            local_id: 0x1111_2222,
            remote_id: if passive { 0x3333_4444 } else { 0 },
            service_id: wire::service_id(wire::port_space::TCP, 7500),
            local: "10.0.0.2:40000".parse().unwrap(),
            remote: "10.0.0.1:7500".parse().unwrap(),
            path_mtu: crate::sys::ibv_mtu::IBV_MTU_1024,
            peer_qpn: 0x12_3456,
            passive,
        }
    }

    /// Through the encoder and decoder, as a peer receives it.
    fn on_the_wire(w: wire::Msg) -> wire::Msg {
        let mut mad = [0u8; wire::MAD_LEN];
        wire::encode(&Cm { tid: 7, msg: w }, &mut mad).unwrap();
        wire::decode(&mad).unwrap().msg
    }
    use wire::Cm;

    #[test]
    fn req_carries_the_ip_header_and_user_data_to_the_listener() {
        let mut m = Msg::new(proto::REQ);
        m.qpn = 0x00ab_cdef;
        m.responder_resources = 4;
        m.initiator_depth = 2;
        m.retry_count = 6;
        m.rnr_retry_count = 7;
        m.srq = 1;
        let user = [0x5a; proto::REQ_PRIVATE];
        m.private[..user.len()].copy_from_slice(&user);
        m.private_len = user.len() as u32;
        let w = on_the_wire(to_wire(&m, &ctx(false)).unwrap());
        let wire::Msg::Req(r) = &w else { panic!("not a REQ") };
        assert_eq!(r.path_mtu, 3);
        assert_eq!(r.local_comm_id, 0x1111_2222);
        let (got, req) = request_from_wire(&w).unwrap();
        assert_eq!(req.ps, u32::from(wire::port_space::TCP));
        assert_eq!(req.local, "10.0.0.1:7500".parse().unwrap());
        assert_eq!(req.remote, "10.0.0.2:40000".parse().unwrap());
        assert_eq!(req.remote_id, 0x1111_2222);
        assert_eq!(got.private_data(), &user[..]);
        assert_eq!(
            (got.qpn, got.responder_resources, got.initiator_depth, got.srq),
            (0x00ab_cdef, 4, 2, 1)
        );
        assert_eq!((got.retry_count, got.rnr_retry_count, got.path_mtu), (6, 7, 3));
    }

    #[test]
    fn too_much_private_data_is_refused() {
        let mut m = Msg::new(proto::REQ);
        m.qpn = 1;
        m.private_len = (proto::REQ_PRIVATE + 1) as u32;
        assert_eq!(to_wire(&m, &ctx(false)).unwrap_err(), Errno::EINVAL);
    }

    #[test]
    fn a_request_that_is_not_rdma_cm_is_not_taken() {
        let mut m = Msg::new(proto::REQ);
        m.qpn = 1;
        let w = to_wire(&m, &ctx(false)).unwrap();
        let wire::Msg::Req(mut r) = w else { panic!() };
        r.private_data.0[0] = 1; // IP header version
        assert!(request_from_wire(&wire::Msg::Req(r)).is_none());
        r.private_data.0[0] = 0;
        r.local_qpn = 0;
        assert!(request_from_wire(&wire::Msg::Req(r)).is_none());
        r.local_qpn = 1;
        r.service_id = 1 << 40; // not (port space << 16 | port)
        assert!(request_from_wire(&wire::Msg::Req(r)).is_none());
    }

    #[test]
    fn replies_map_back() {
        let mut rej = Msg::new(proto::REJ);
        rej.status = proto::REJ_CONSUMER;
        rej.private[..3].copy_from_slice(b"no!");
        rej.private_len = 3;
        let w = on_the_wire(to_wire(&rej, &ctx(true)).unwrap());
        let wire::Msg::Rej(r) = &w else { panic!() };
        assert_eq!(r.message_rejected, msgs::MsgRef::Req);
        assert_eq!(r.remote_comm_id, 0x3333_4444);
        let back = from_wire(&w).unwrap();
        assert_eq!(back.status, proto::REJ_CONSUMER);
        assert_eq!(&back.private_data()[..3], b"no!");
        assert_eq!(back.private_data().len(), msgs::REJ_PRIVATE);

        let mut rep = Msg::new(proto::SIDR_REP);
        rep.qpn = 77;
        rep.qkey = crate::cm::ud::UDP_QKEY;
        let back = from_wire(&on_the_wire(to_wire(&rep, &ctx(true)).unwrap())).unwrap();
        assert_eq!(
            (back.kind, back.qpn, back.qkey, back.status),
            (proto::SIDR_REP, 77, rep.qkey, 0)
        );

        let dreq = on_the_wire(to_wire(&Msg::new(proto::DREQ), &ctx(true)).unwrap());
        let wire::Msg::Dreq(d) = dreq else { panic!() };
        assert_eq!(d.remote_qpn, 0x12_3456);
    }
}
