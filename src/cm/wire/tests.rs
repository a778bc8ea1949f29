//! CM MAD round trips, field positions against the IBA tables, every error, rdma_cm's IP header.

use super::msgs::*;
use super::*;
use std::net::Ipv4Addr;

fn path(seed: u8) -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xfffe,
        local_gid: gid_from_ip(Ipv4Addr::new(127, 0, 0, seed).into()),
        remote_gid: [seed; 16],
        flow_label: 0xa_bcde,
        packet_rate: 0x2a,
        traffic_class: 0x5c,
        hop_limit: 0x40,
        sl: 0xd,
        subnet_local: true,
        local_ack_timeout: 0x13,
    }
}

fn pd<const N: usize>(seed: u8) -> Bytes<N> {
    let mut b = [0; N];
    for (i, x) in b.iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u8);
    }
    Bytes(b)
}

pub(crate) fn req() -> Req {
    Req {
        local_comm_id: 0x1122_3344,
        service_id: service_id(port_space::TCP, 7471),
        local_ca_guid: 0x0102_0304_0506_0708,
        local_qkey: 0x9abc_def0,
        local_qpn: 0x12_3456,
        responder_resources: 0x21,
        initiator_depth: 0x43,
        remote_cm_response_timeout: 0x17,
        transport: ServiceType::Uc,
        flow_control: true,
        starting_psn: 0xab_cdef,
        local_cm_response_timeout: 0x19,
        retry_count: 6,
        pkey: 0xffff,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: true,
        primary: path(1),
        alternate: path(2),
        private_data: pd(0x30),
    }
}

/// One of each message, every field distinct from its neighbours.
pub(crate) fn all_messages() -> Vec<Msg> {
    vec![
        Msg::Req(req()),
        Msg::Mra(Mra {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: MsgRef::Rep,
            service_timeout: 0x1f,
            private_data: pd(1),
        }),
        Msg::Rej(Rej {
            local_comm_id: 3,
            remote_comm_id: 4,
            message_rejected: MsgRef::Other,
            ari_len: 72,
            reason: reason::CONSUMER_REJECT,
            ari: pd(9),
            private_data: pd(2),
        }),
        Msg::Rep(Rep {
            local_comm_id: 5,
            remote_comm_id: 6,
            local_qkey: 0x8001_0000,
            local_qpn: 0xfe_dcba,
            starting_psn: 0x65_4321,
            responder_resources: 16,
            initiator_depth: 8,
            target_ack_delay: 0x15,
            failover_accepted: 2,
            flow_control: true,
            rnr_retry_count: 5,
            srq: true,
            local_ca_guid: 0xfeed_face_cafe_beef,
            private_data: pd(3),
        }),
        Msg::Rtu(Rtu { local_comm_id: 7, remote_comm_id: 8, private_data: pd(4) }),
        Msg::Dreq(Dreq {
            local_comm_id: 9,
            remote_comm_id: 10,
            remote_qpn: 0x11_2233,
            private_data: pd(5),
        }),
        Msg::Drep(Drep { local_comm_id: 11, remote_comm_id: 12, private_data: pd(6) }),
        Msg::SidrReq(SidrReq {
            request_id: 13,
            pkey: 0x7fff,
            service_id: service_id(port_space::UDP, 7174),
            private_data: pd(7),
        }),
        Msg::SidrRep(SidrRep {
            request_id: 14,
            status: sidr_status::NO_QP,
            info_len: 0,
            qpn: 0x44_5566,
            service_id: service_id(port_space::UDP, 7174),
            qkey: 0x1234_5678,
            info: pd(10),
            private_data: pd(8),
        }),
    ]
}

fn enc(msg: Msg, tid: u64) -> [u8; MAD_LEN] {
    let mut out = [0xee; MAD_LEN];
    encode(&Cm { tid, msg }, &mut out).unwrap();
    out
}

#[test]
fn every_message_round_trips_with_the_cm_header() {
    for (i, m) in all_messages().into_iter().enumerate() {
        let tid = 0x0102_0304_0506_0700 + i as u64;
        let b = enc(m, tid);
        assert_eq!(&b[..4], [1, 0x07, 2, 0x03], "base version, class, class version, Send");
        assert_eq!(&b[4..8], [0; 4], "status, class specific");
        assert_eq!(&b[8..16], tid.to_be_bytes());
        assert_eq!(u16::from_be_bytes([b[16], b[17]]), m.attr_id());
        assert_eq!(&b[18..24], [0; 6]);
        assert_eq!(decode(&b), Ok(Cm { tid, msg: m }));
    }
    let ids: Vec<u16> = all_messages().iter().map(|m| m.attr_id()).collect();
    assert_eq!(ids, [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
}

#[test]
fn private_data_sizes_and_offsets_match_the_spec() {
    // (message, private data offset in the MAD, size)
    let want = [
        (24 + 140, 92),
        (24 + 10, 222),
        (24 + 84, 148),
        (24 + 36, 196),
        (24 + 8, 224),
        (24 + 12, 220),
        (24 + 8, 224),
        (24 + 16, 216),
        (24 + 96, 136),
    ];
    for (m, (off, len)) in all_messages().into_iter().zip(want) {
        assert_eq!(m.private_data().len(), len, "{m:?}");
        assert_eq!(off + len, MAD_LEN);
        let b = enc(m, 1);
        assert_eq!(&b[off..], m.private_data(), "{:#x}", m.attr_id());
    }
}

/// The MAD byte of body offset `o`.
const fn at(o: usize) -> usize {
    24 + o
}

#[test]
fn req_fields_sit_at_the_published_offsets() {
    let b = enc(Msg::Req(req()), 0);
    assert_eq!(&b[at(0)..at(4)], 0x1122_3344u32.to_be_bytes());
    assert_eq!(&b[at(8)..at(16)], (0x0106u64 << 16 | 7471).to_be_bytes(), "service id");
    assert_eq!(&b[at(8)..at(16)], [0, 0, 0, 0, 0x01, 0x06, 0x1d, 0x2f]);
    assert_eq!(&b[at(16)..at(24)], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[at(28)..at(32)], [0x9a, 0xbc, 0xde, 0xf0]);
    assert_eq!(&b[at(32)..at(36)], [0x12, 0x34, 0x56, 0x21], "QPN(24) responder resources(8)");
    assert_eq!(&b[at(36)..at(40)], [0, 0, 0, 0x43], "EECN(24) initiator depth(8)");
    // Remote EECN(24) · remote CM response timeout(5) transport(2) flow control(1).
    assert_eq!(&b[at(40)..at(44)], [0, 0, 0, 0x17 << 3 | 1 << 1 | 1]);
    // Starting PSN(24) · local CM response timeout(5) retry count(3).
    assert_eq!(&b[at(44)..at(48)], [0xab, 0xcd, 0xef, 0x19 << 3 | 6]);
    // P_Key(16) · MTU(4) RDC(1) RNR retry(3) · max CM retries(4) SRQ(1) ext. transport(3).
    assert_eq!(&b[at(48)..at(52)], [0xff, 0xff, 3 << 4 | 7, 15 << 4 | 1 << 3]);
    // XRC: transport service type 3, extended transport type 1.
    let x = enc(Msg::Req(Req { transport: ServiceType::Xrc, ..req() }), 0);
    assert_eq!((x[at(43)] >> 1 & 3, x[at(51)] & 7), (3, 1));
    assert!(matches!(
        decode(&x),
        Ok(Cm { msg: Msg::Req(Req { transport: ServiceType::Xrc, .. }), .. })
    ));
    // Primary path at 52, alternate at 96.
    for (base, seed) in [(52, 1u8), (96, 2)] {
        assert_eq!(&b[at(base)..at(base + 4)], [0xff, 0xff, 0xff, 0xfe]);
        if seed == 1 {
            assert_eq!(
                &b[at(base + 4)..at(base + 20)],
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]
            );
        }
        assert_eq!(&b[at(base + 20)..at(base + 36)], [seed; 16]);
        // Flow label(20) · resv(6) packet rate(6).
        assert_eq!(&b[at(base + 36)..at(base + 40)], [0xab, 0xcd, 0xe0, 0x2a]);
        // Traffic class, hop limit, SL(4) subnet local(1), local ACK timeout(5).
        assert_eq!(&b[at(base + 40)..at(base + 44)], [0x5c, 0x40, 0xd << 4 | 1 << 3, 0x13 << 3]);
    }
    assert_eq!(b[at(139)], 0x13 << 3);
    assert_eq!(&b[at(4)..at(8)], [0; 4], "reserved");
    assert_eq!(&b[at(24)..at(28)], [0; 4], "reserved");
}

#[test]
fn other_messages_fields_sit_at_the_published_offsets() {
    let all = all_messages();
    let mra = enc(all[1], 0);
    assert_eq!(&mra[at(0)..at(10)], [0, 0, 0, 1, 0, 0, 0, 2, 1 << 6, 0x1f << 3]);
    let rej = enc(all[2], 0);
    assert_eq!(&rej[at(8)..at(12)], [2 << 6, 72 << 1, 0, 28]);
    assert_eq!(rej[at(12)], 9);
    assert_eq!(rej[at(83)], 9 + 71);
    let rep = enc(all[3], 0);
    assert_eq!(&rep[at(8)..at(12)], [0x80, 0x01, 0, 0]);
    assert_eq!(&rep[at(12)..at(16)], [0xfe, 0xdc, 0xba, 0]);
    assert_eq!(&rep[at(16)..at(20)], [0; 4], "local EECN");
    assert_eq!(&rep[at(20)..at(24)], [0x65, 0x43, 0x21, 0]);
    // Resp. resources · initiator depth · ACK delay(5) failover(2) flow control(1) · RNR(3) SRQ(1).
    assert_eq!(&rep[at(24)..at(28)], [16, 8, 0x15 << 3 | 2 << 1 | 1, 5 << 5 | 1 << 4]);
    assert_eq!(&rep[at(28)..at(36)], 0xfeed_face_cafe_beefu64.to_be_bytes());
    let dreq = enc(all[5], 0);
    assert_eq!(&dreq[at(8)..at(12)], [0x11, 0x22, 0x33, 0]);
    let sreq = enc(all[7], 0);
    assert_eq!(
        &sreq[at(0)..at(16)],
        [0, 0, 0, 13, 0x7f, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]
    );
    let srep = enc(all[8], 0);
    assert_eq!(&srep[at(0)..at(12)], [0, 0, 0, 14, 3, 0, 0, 0, 0x44, 0x55, 0x66, 0]);
    assert_eq!(&srep[at(12)..at(24)], [0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x12, 0x34, 0x56, 0x78]);
    assert_eq!(srep[at(24)], 10);
}

#[test]
fn decode_reports_every_error() {
    let good = enc(Msg::Req(req()), 5);
    assert_eq!(decode(&good[..255]), Err(WireError::BadLength(255)));
    assert_eq!(decode(&[]), Err(WireError::BadLength(0)));
    let mut long = good.to_vec();
    long.push(0);
    assert_eq!(decode(&long), Err(WireError::BadLength(257)));
    let with = |i: usize, v: u8| {
        let mut b = good;
        b[i] = v;
        decode(&b)
    };
    assert_eq!(with(0, 2), Err(WireError::BadBaseVersion(2)));
    assert_eq!(with(1, 0x81), Err(WireError::NotCm(0x81)));
    assert_eq!(with(2, 1), Err(WireError::BadClassVersion(1)));
    assert_eq!(with(3, 0x83), Err(WireError::UnsupportedMethod(0x83)));
    assert_eq!(with(3, 0x01), Err(WireError::UnsupportedMethod(0x01)));
    for a in [0x0000u16, 0x000f, 0x0019, 0x001a, 0x001b, 0xffff] {
        let mut b = good;
        b[16..18].copy_from_slice(&a.to_be_bytes());
        assert_eq!(decode(&b), Err(WireError::UnknownAttribute(a)));
    }
    assert_eq!(
        with(at(43), 0x17 << 3 | 3 << 1),
        Err(WireError::BadField("transport service type")),
        "type 3 without extended transport type 1 (XRC)"
    );
    assert_eq!(with(at(50), 7), Err(WireError::BadField("path MTU")));
    assert_eq!(with(at(50), 6 << 4), Err(WireError::BadField("path MTU")));
    let all = all_messages();
    let mra = enc(all[1], 0);
    let mut b = mra;
    b[at(8)] = 3 << 6;
    assert_eq!(decode(&b), Err(WireError::BadField("message MRAed/REJected")));
    let mut b = enc(all[2], 0);
    b[at(9)] = 73 << 1;
    assert_eq!(decode(&b), Err(WireError::BadField("reject info length")));
    b[at(9)] = 72 << 1;
    b[at(8)] = 3 << 6;
    assert_eq!(decode(&b), Err(WireError::BadField("message MRAed/REJected")));
    let mut b = enc(all[8], 0);
    b[at(4)] = 6;
    assert_eq!(decode(&b), Err(WireError::BadField("SIDR status")));
    b[at(4)] = 0;
    b[at(5)] = 73;
    assert_eq!(decode(&b), Err(WireError::BadField("additional information length")));
    // Reserved bits are ignored: the vendor id and EECNs of a REQ.
    let mut b = good;
    b[at(5)] = 0xaa;
    b[at(38)] = 0xbb;
    assert_eq!(decode(&b).unwrap().msg, Msg::Req(req()));
}

#[test]
fn encode_refuses_values_wider_than_their_field() {
    let mut out = [0; MAD_LEN];
    let tid = 1;
    let mut r = req();
    r.local_qpn = 0x100_0000;
    assert_eq!(
        encode(&Cm { tid, msg: Msg::Req(r) }, &mut out),
        Err(WireError::BadField("value wider than its field"))
    );
    r = req();
    r.retry_count = 8;
    assert!(encode(&Cm { tid, msg: Msg::Req(r) }, &mut out).is_err());
    r = req();
    r.path_mtu = 6;
    assert_eq!(
        encode(&Cm { tid, msg: Msg::Req(r) }, &mut out),
        Err(WireError::BadField("path MTU"))
    );
    r.path_mtu = 0;
    assert!(encode(&Cm { tid, msg: Msg::Req(r) }, &mut out).is_err());
    let rej = Rej { ari_len: 73, ..Default::default() };
    assert!(encode(&Cm { tid, msg: Msg::Rej(rej) }, &mut out).is_err());
    let rej = Rej { ari_len: 200, ..Default::default() };
    assert!(
        encode(&Cm { tid, msg: Msg::Rej(rej) }, &mut out).is_err(),
        "200 & 0x7f = 72 must not pass"
    );
    let s = SidrRep { status: 6, ..Default::default() };
    assert!(encode(&Cm { tid, msg: Msg::SidrRep(s) }, &mut out).is_err());
    let m = Mra { service_timeout: 32, ..Default::default() };
    assert!(encode(&Cm { tid, msg: Msg::Mra(m) }, &mut out).is_err());
}

#[test]
fn decode_never_panics_on_noise() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for m in all_messages() {
        let good = enc(m, 3);
        for _ in 0..2000 {
            let mut b = good;
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b[(x as usize) % MAD_LEN] = (x >> 40) as u8;
            }
            if let Ok(cm) = decode(&b) {
                let mut again = [0; MAD_LEN];
                encode(&cm, &mut again).unwrap();
                assert_eq!(decode(&again), Ok(cm));
            }
        }
    }
}

#[test]
fn rdma_cm_ip_header_round_trips() {
    let h = CmaHdr {
        src_port: 0xc123,
        src: Ipv4Addr::new(127, 0, 0, 1).into(),
        dst: Ipv4Addr::new(127, 0, 0, 9).into(),
    };
    let mut r = req();
    h.write(&mut r.private_data.0).unwrap();
    r.private_data.0[36..41].copy_from_slice(b"hello");
    let b = enc(Msg::Req(r), 0);
    let p = &b[at(140)..];
    assert_eq!(&p[..4], [0, 0x40, 0xc1, 0x23]);
    assert_eq!(&p[4..20], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 127, 0, 0, 1]);
    assert_eq!(&p[20..36], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 127, 0, 0, 9]);
    assert_eq!(&p[36..41], b"hello");
    assert_eq!(CmaHdr::read(p), Ok(h));
    assert_eq!(REQ_USER_PRIVATE, 56);

    let h6 = CmaHdr { src_port: 1, src: "::1".parse().unwrap(), dst: "fe80::1".parse().unwrap() };
    let mut buf = [0xaa; 40];
    h6.write(&mut buf).unwrap();
    assert_eq!(buf[1], 0x60);
    assert_eq!(&buf[4..20], std::net::Ipv6Addr::LOCALHOST.octets());
    assert_eq!(CmaHdr::read(&buf), Ok(h6));

    use ip_hdr::CmaHdrError as E;
    assert_eq!(CmaHdr::read(&buf[..35]), Err(E::TooShort));
    assert_eq!(h6.write(&mut [0; 35]), Err(E::TooShort));
    let mixed =
        CmaHdr { src_port: 1, src: "::1".parse().unwrap(), dst: Ipv4Addr::LOCALHOST.into() };
    assert_eq!(mixed.write(&mut buf), Err(E::MixedFamilies));
    let mut bad = buf;
    bad[0] = 1;
    assert_eq!(CmaHdr::read(&bad), Err(E::BadVersion(1)));
    let mut bad = buf;
    bad[1] = 0x50;
    assert_eq!(CmaHdr::read(&bad), Err(E::BadIpVersion(5)));
}

#[test]
fn service_ids_and_gids() {
    assert_eq!(service_id(port_space::TCP, 0x1234), 0x0000_0000_0106_1234);
    assert_eq!(split_service_id(0x0000_0000_0106_1234), Some((0x0106, 0x1234)));
    assert_eq!(split_service_id(0x1_0000_0000), None);
    let ip: std::net::IpAddr = Ipv4Addr::new(127, 0, 0, 5).into();
    assert_eq!(gid_from_ip(ip), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 5]);
    assert_eq!(ip_from_gid(gid_from_ip(ip)), ip);
    let v6: std::net::IpAddr = "fe80::7".parse().unwrap();
    assert_eq!(ip_from_gid(gid_from_ip(v6)), v6);
}
