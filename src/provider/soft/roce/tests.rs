//! Headers, opcode table, ICRC known answers, path MTU and segmentation.

use super::headers::*;
use super::icrc::{self, Flow, FlowAddrs};
use super::mtu::{ib_mtu_for, ibv_mtu_enum, segments, Segment};
use super::opcode::{self, op, Ext, Extra, Position, Transport};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use zerocopy::{FromBytes, IntoBytes};

#[test]
fn bth_fields_round_trip_and_sit_where_the_spec_puts_them() {
    let mut b = Bth::default();
    b.set_opcode(0x0b);
    b.set_se(true);
    b.set_mig_req(true);
    b.set_pad_cnt(3);
    b.set_tver(0);
    b.set_pkey(0x8001);
    b.set_fecn(true);
    b.set_becn(false);
    b.set_dest_qp(0x12_3456);
    b.set_ack_req(true);
    b.set_psn(0xab_cdef);
    assert_eq!(
        b.as_bytes(),
        [0x0b, 0xf0, 0x80, 0x01, 0x80, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef]
    );
    let r = Bth::read_from_bytes(b.as_bytes()).unwrap();
    assert_eq!(r, b);
    assert_eq!((r.opcode(), r.se(), r.mig_req(), r.pad_cnt(), r.tver()), (0x0b, true, true, 3, 0));
    assert_eq!((r.pkey(), r.fecn(), r.becn(), r.dest_qp()), (0x8001, true, false, 0x12_3456));
    assert_eq!((r.ack_req(), r.psn()), (true, 0xab_cdef));
    // 24-bit fields never spill into their neighbours.
    b.set_dest_qp(0xffff_ffff);
    b.set_psn(0xffff_ffff);
    assert_eq!(b.as_bytes()[4], 0x80);
    assert_eq!(b.as_bytes()[8], 0x80);
    b.set_becn(true);
    b.set_ack_req(false);
    b.set_tver(0xf);
    assert_eq!(
        &b.as_bytes()[..12],
        [0x0b, 0xff, 0x80, 0x01, 0xc0, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff]
    );
    // Reserved bits survive a decode but not canonical().
    let raw = [0u8, 0, 0, 0, 0x3f, 0, 0, 1, 0x7f, 0, 0, 2];
    let c = Bth::read_from_bytes(&raw[..]).unwrap().canonical();
    assert_eq!(c.as_bytes(), [0u8, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]);
}

#[test]
fn extension_headers_round_trip_big_endian() {
    let r = Reth::new(0x0102_0304_0506_0708, 0x1122_3344, 0x5566_7788);
    assert_eq!(
        r.as_bytes(),
        [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
    );
    let r2 = Reth::read_from_bytes(r.as_bytes()).unwrap();
    assert_eq!((r2.va(), r2.rkey(), r2.len()), (0x0102_0304_0506_0708, 0x1122_3344, 0x5566_7788));

    let a = AtomicEth::new(0x1000, 7, 0xaaaa_bbbb_cccc_dddd, 0x1111_2222_3333_4444);
    assert_eq!(&a.as_bytes()[..12], [0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 7]);
    assert_eq!(&a.as_bytes()[12..20], 0xaaaa_bbbb_cccc_ddddu64.to_be_bytes());
    assert_eq!(&a.as_bytes()[20..], 0x1111_2222_3333_4444u64.to_be_bytes());
    let a2 = AtomicEth::read_from_bytes(a.as_bytes()).unwrap();
    assert_eq!(
        (a2.va(), a2.rkey(), a2.swap_add(), a2.compare()),
        (0x1000, 7, a.swap_add(), a.compare())
    );

    let k = AtomicAckEth::new(0xdead_beef_0000_0001);
    assert_eq!(AtomicAckEth::read_from_bytes(k.as_bytes()).unwrap().orig(), 0xdead_beef_0000_0001);
    assert_eq!(k.as_bytes(), 0xdead_beef_0000_0001u64.to_be_bytes());

    let d = Deth::new(0x8001_0000, 0xff12_3456);
    assert_eq!(d.as_bytes(), [0x80, 1, 0, 0, 0, 0x12, 0x34, 0x56]);
    let d2 = Deth::read_from_bytes(&[0x80u8, 1, 0, 0, 0xee, 0x12, 0x34, 0x56][..]).unwrap();
    assert_eq!((d2.qkey(), d2.src_qp()), (0x8001_0000, 0x12_3456));
    assert_eq!(d2.canonical(), d);

    assert_eq!(ImmDt::new(0x0a0b_0c0d).as_bytes(), [0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(ImmDt::read_from_bytes(&[1u8, 2, 3, 4][..]).unwrap().imm(), 0x0102_0304);
    assert_eq!(Ieth::new(0x4455_6677).as_bytes(), [0x44, 0x55, 0x66, 0x77]);
    assert_eq!(Ieth::read_from_bytes(&[9u8, 8, 7, 6][..]).unwrap().rkey(), 0x0908_0706);
}

#[test]
fn aeth_syndromes_decode_by_kind() {
    let cases = [
        (Syndrome::Ack { credits: 0x1f }, 0x1f),
        (Syndrome::Ack { credits: 0 }, 0x00),
        (Syndrome::RnrNak { timer: 14 }, 0x2e),
        (Syndrome::Nak(NakCode::PsnSequenceError), 0x60),
        (Syndrome::Nak(NakCode::InvalidRequest), 0x61),
        (Syndrome::Nak(NakCode::RemoteAccessError), 0x62),
        (Syndrome::Nak(NakCode::RemoteOperationalError), 0x63),
        (Syndrome::Nak(NakCode::InvalidRdRequest), 0x64),
        (Syndrome::Nak(NakCode::Reserved(9)), 0x69),
        (Syndrome::Reserved(0x45), 0x45),
        (Syndrome::Reserved(0x81), 0x81),
    ];
    for (s, byte) in cases {
        let a = Aeth::new(s, 0x01_0203);
        assert_eq!(a.as_bytes(), [byte, 1, 2, 3], "{s:?}");
        let back = Aeth::read_from_bytes(a.as_bytes()).unwrap();
        assert_eq!((back.syndrome(), back.msn()), (s, 0x01_0203));
    }
    assert_eq!(Aeth::new(Syndrome::Ack { credits: 0 }, 0xff00_0001).msn(), 1);
}

#[test]
fn opcode_table_matches_the_spec() {
    assert_eq!(opcode::TABLE.len(), 23 + 12 + 2 + 23);
    for (i, r) in opcode::TABLE.iter().enumerate() {
        assert_eq!(opcode::lookup(r.code), Some(r), "row {i}");
        assert!(opcode::TABLE.iter().filter(|o| o.code == r.code).count() == 1);
        let t = match r.code >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            3 => Transport::Ud,
            5 => Transport::Xrc,
            _ => panic!("transport of {:#x}", r.code),
        };
        assert_eq!(r.transport, t);
    }
    let hdr = |c| opcode::lookup(c).unwrap().headers;
    assert_eq!(hdr(op::WRITE_ONLY_IMM), [Ext::Reth, Ext::ImmDt]);
    assert_eq!(hdr(op::UD | op::SEND_ONLY_IMM), [Ext::Deth, Ext::ImmDt]);
    assert_eq!(hdr(op::ATOMIC_ACK), [Ext::Aeth, Ext::AtomicAckEth]);
    assert_eq!(hdr(op::READ_RESPONSE_MIDDLE), []);
    assert_eq!(hdr(op::SEND_ONLY_INV), [Ext::Ieth]);
    // XRC: the XRCETH first in every request, none in the responses (annex A14).
    assert_eq!(hdr(op::XRC | op::WRITE_ONLY_IMM), [Ext::XrcEth, Ext::Reth, Ext::ImmDt]);
    assert_eq!(hdr(op::XRC | op::SEND_MIDDLE), [Ext::XrcEth]);
    assert_eq!(hdr(op::XRC | op::FETCH_ADD), [Ext::XrcEth, Ext::AtomicEth]);
    assert_eq!(hdr(op::XRC | op::ACK), [Ext::Aeth]);
    assert_eq!(hdr(op::XRC | op::READ_RESPONSE_FIRST), [Ext::Aeth]);
    for r in opcode::TABLE.iter().filter(|r| r.transport == Transport::Xrc) {
        let rc = opcode::lookup(r.code & op::OPERATION).unwrap();
        let response = (op::READ_RESPONSE_FIRST..=op::ATOMIC_ACK).contains(&(r.code & 0x1f));
        let want: Vec<Ext> =
            if response { rc.headers.to_vec() } else { [&[Ext::XrcEth], rc.headers].concat() };
        assert_eq!(r.headers, want, "{}", r.name);
        assert_eq!(r.payload, rc.payload, "{}", r.name);
    }
    assert!(!opcode::lookup(op::READ_REQUEST).unwrap().payload);
    assert!(!opcode::lookup(op::ACK).unwrap().payload);
    assert_eq!(opcode::lookup(op::CMP_SWAP).unwrap().headers_len(), 28);
    for absent in [0x15, 0x18, 0x1f, 0x2c, 0x36, 0x40, 0x64 - 1, 0x66, 0x80, 0xff] {
        assert_eq!(opcode::lookup(absent), None, "{absent:#x}");
    }
    use Position::*;
    assert_eq!(opcode::send_opcode(Transport::Ud, Only, Extra::Imm), Some(0x65));
    assert_eq!(opcode::send_opcode(Transport::Ud, First, Extra::None), None);
    assert_eq!(opcode::send_opcode(Transport::Uc, Last, Extra::Inv), None);
    assert_eq!(opcode::send_opcode(Transport::Rc, Last, Extra::Inv), Some(0x16));
    assert_eq!(opcode::write_opcode(Transport::Uc, Only, true), Some(0x2b));
    assert_eq!(opcode::write_opcode(Transport::Rc, Middle, true), None);
    assert_eq!(opcode::send_opcode(Transport::Xrc, Only, Extra::Inv), Some(0xb7));
    assert_eq!(opcode::write_opcode(Transport::Xrc, First, false), Some(0xa6));
    assert_eq!(opcode::read_response_opcode(Last), 0x0f);
}

/// CRC-32 (IEEE, reflected) one bit at a time, from the polynomial: independent of crc32fast.
fn crc_bits(mut reg: u32, data: &[u8]) -> u32 {
    for b in data {
        reg ^= u32::from(*b);
        for _ in 0..8 {
            reg = if reg & 1 != 0 { (reg >> 1) ^ 0xedb8_8320 } else { reg >> 1 };
        }
    }
    reg
}

fn v4_flow() -> Flow {
    let s: SocketAddr = "127.0.0.1:49152".parse().unwrap();
    let d: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    Flow::new(s, d).unwrap()
}

#[test]
fn icrc_known_answer_from_the_spec_bytes() {
    // The reference CRC itself: the standard check value, and rxe's seed (the register after
    // the masked LRH's 8 bytes of ones).
    assert_eq!(!crc_bits(!0, b"123456789"), 0xcbf4_3926);
    assert_eq!(crc_bits(!0, &[0xff; 8]), 0xdebb_20e3);

    // RC SEND Only to QP 0x11, PSN 1, payload "ABCD", sent 127.0.0.1:49152 -> 127.0.0.2:4791.
    let ib = [
        0x04, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x01, b'A', b'B', b'C',
        b'D',
    ];
    #[rustfmt::skip]
    let pseudo: &[u8] = &[
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,             // masked LRH
        0x45, 0xff, 0x00, 0x30, 0x00, 0x00, 0x40, 0x00,             // IPv4: TOS masked, len 48, ID 0, DF
        0xff, 0x11, 0xff, 0xff, 127, 0, 0, 1, 127, 0, 0, 2,        // TTL masked, UDP, csum masked
        0xc0, 0x00, 0x12, 0xb7, 0x00, 0x1c, 0xff, 0xff,             // UDP 49152 -> 4791, len 28
        0x04, 0x00, 0xff, 0xff, 0xff, 0x00, 0x00, 0x11,             // BTH, FECN/BECN byte masked
        0x80, 0x00, 0x00, 0x01, b'A', b'B', b'C', b'D',
    ];
    let want = !crc_bits(!0, pseudo);
    assert_eq!(icrc::compute(&v4_flow(), &ib), Some(want));
    let mut pkt = ib.to_vec();
    pkt.extend_from_slice(&want.to_le_bytes());
    assert!(icrc::verify(&v4_flow(), &pkt));
    // The FECN/BECN byte does not count; every other byte does.
    pkt[4] = 0x80;
    assert!(icrc::verify(&v4_flow(), &pkt));
    for i in (0..pkt.len()).filter(|i| *i != 4) {
        let mut bad = pkt.clone();
        bad[i] ^= 0x01;
        assert!(!icrc::verify(&v4_flow(), &bad), "byte {i}");
    }
    // A different IPv4 ID changes it: a receiver, which cannot see the ID, accepts IDs that
    // differ in the low 8 bits (a GSO send's segments) and no others; an address or port
    // changes it too.
    let with_id = |id| {
        let mut f = v4_flow();
        f.addrs = FlowAddrs::V4 {
            src: Ipv4Addr::new(127, 0, 0, 1),
            dst: Ipv4Addr::new(127, 0, 0, 2),
            id,
            df: true,
        };
        f
    };
    assert_ne!(icrc::compute(&with_id(1), &ib), Some(want));
    assert!(icrc::verify(&with_id(1), &pkt));
    // To port 4791 (other stacks' packets) any ID passes; to another port only the window.
    assert!(icrc::verify(&with_id(0x100), &pkt));
    let to_ours = |id| Flow { dst_port: 49153, ..with_id(id) };
    let mut p2 = ib.to_vec();
    p2.extend_from_slice(&icrc::compute(&to_ours(0), &ib).unwrap().to_le_bytes());
    assert!(icrc::verify(&to_ours(1), &p2));
    assert!(!icrc::verify(&to_ours(0x100), &p2));
    assert!(!icrc::verify(&v4_flow().reversed(), &pkt));
    assert!(!icrc::verify(&v4_flow(), &pkt[..3]));
}

#[test]
fn icrc_known_answer_ipv6_and_mapped_addresses() {
    let s: SocketAddr = "[::1]:1024".parse().unwrap();
    let d: SocketAddr = "[fe80::2]:4791".parse().unwrap();
    let f = Flow::new(s, d).unwrap();
    let ib = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
        0x05,
    ];
    let mut pseudo = vec![0xff; 8];
    pseudo.extend_from_slice(&[0x6f, 0xff, 0xff, 0xff, 0x00, 0x1c, 0x11, 0xff]);
    pseudo.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    pseudo.extend_from_slice(&"fe80::2".parse::<Ipv6Addr>().unwrap().octets());
    pseudo.extend_from_slice(&[0x04, 0x00, 0x12, 0xb7, 0x00, 0x1c, 0xff, 0xff]);
    pseudo.extend_from_slice(&ib[..4]);
    pseudo.push(0xff);
    pseudo.extend_from_slice(&ib[5..]);
    assert_eq!(icrc::compute(&f, &ib), Some(!crc_bits(!0, &pseudo)));

    // A dual-stack socket's ::ffff:a.b.c.d is the IPv4 flow; mixed families are refused.
    let m = Flow::new(
        "[::ffff:127.0.0.1]:49152".parse().unwrap(),
        "[::ffff:127.0.0.2]:4791".parse().unwrap(),
    );
    assert_eq!(m, Some(v4_flow()));
    assert_eq!(Flow::new(s, "127.0.0.1:1".parse().unwrap()), None);
    assert_eq!(icrc::compute(&f, &[0; 4]), None);
    assert_eq!(icrc::compute(&v4_flow(), &vec![0; 65536]), None);
}

#[test]
fn path_mtu_from_interface_mtu() {
    assert_eq!(ib_mtu_for(1500, false), Some(1024));
    assert_eq!(ib_mtu_for(1500, true), Some(1024));
    assert_eq!(ib_mtu_for(9000, false), Some(4096));
    assert_eq!(ib_mtu_for(65536, false), Some(4096));
    assert_eq!(ib_mtu_for(1024 + 64, false), Some(1024));
    assert_eq!(ib_mtu_for(1024 + 63, false), Some(512));
    assert_eq!(ib_mtu_for(1024 + 64, true), Some(512));
    assert_eq!(ib_mtu_for(256 + 64, false), Some(256));
    assert_eq!(ib_mtu_for(256 + 63, false), None);
    assert_eq!(ib_mtu_for(0, false), None);
    assert_eq!(ibv_mtu_enum(1024), Some(3));
    assert_eq!(ibv_mtu_enum(4096), Some(5));
    assert_eq!(ibv_mtu_enum(1000), None);
}

fn seg(pos: Position, offset: usize, len: usize) -> Segment {
    Segment { pos, offset, len }
}

#[test]
fn segmenter_edge_cases() {
    use Position::*;
    let all = |n, m| segments(n, m).collect::<Vec<_>>();
    assert_eq!(all(0, 1024), [seg(Only, 0, 0)]);
    assert_eq!(all(1, 1024), [seg(Only, 0, 1)]);
    assert_eq!(all(1024, 1024), [seg(Only, 0, 1024)]);
    assert_eq!(all(1025, 1024), [seg(First, 0, 1024), seg(Last, 1024, 1)]);
    assert_eq!(all(2048, 1024), [seg(First, 0, 1024), seg(Last, 1024, 1024)]);
    assert_eq!(all(2049, 1024), [seg(First, 0, 1024), seg(Middle, 1024, 1024), seg(Last, 2048, 1)]);
    assert_eq!(all(5, 0), []);
    for (n, m) in [(0, 256), (1, 256), (256, 256), (257, 256), (1 << 20, 4096), (1_000_003, 1024)] {
        let s = all(n, m);
        assert_eq!(s.len(), segments(n, m).count_packets(), "{n}/{m}");
        assert_eq!(s.iter().map(|x| x.len).sum::<usize>(), n);
        let mut off = 0;
        for x in &s {
            assert_eq!(x.offset, off);
            assert!(x.len <= m);
            off += x.len;
        }
    }
    assert_eq!(segments(5, 0).count_packets(), 0);
}

/// A flow from one of our sockets to another (not port 4791, where any ID is accepted).
fn v4_flow_id(id: u16) -> Flow {
    let mut f = v4_flow();
    f.dst_port = 49153;
    if let FlowAddrs::V4 { id: i, .. } = &mut f.addrs {
        *i = id;
    }
    f
}

#[test]
fn icrc_patched_for_an_ipv4_id_is_the_icrc_computed_with_it() {
    for len in [12usize, 28, 64, 1036, 1052, 4108] {
        let ib: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let at0 = icrc::compute(&v4_flow_id(0), &ib).unwrap();
        for k in [1u16, 2, 3, 61, 63, 64, 127, 128, 255] {
            let direct = icrc::compute(&v4_flow_id(k), &ib).unwrap();
            assert_eq!(icrc::with_ipv4_id(len, at0, 0, k), direct, "len {len} id {k}");
            assert_eq!(icrc::with_ipv4_id(len, direct, k, 0), at0, "back, len {len} id {k}");
        }
    }
}

#[test]
fn a_receiver_accepts_gso_segment_ids_and_still_refuses_a_bad_icrc() {
    let ib: Vec<u8> = (0..1036).map(|i| (i * 13 + 1) as u8).collect();
    let packet = |id: u16| {
        let mut p = ib.clone();
        p.extend_from_slice(&icrc::compute(&v4_flow_id(id), &ib).unwrap().to_le_bytes());
        p
    };
    for id in 0..icrc::MAX_IPV4_ID {
        assert!(icrc::verify(&v4_flow_id(0), &packet(id)), "segment id {id}");
    }
    for id in [icrc::MAX_IPV4_ID, 0x1234, 0xffff] {
        assert!(!icrc::verify(&v4_flow_id(0), &packet(id)), "id {id}");
    }
    // Every single-bit and whole-byte corruption of the ICRC, or of the packet's first and
    // last bytes, is refused whatever the segment's ID.
    for id in [0u16, 1, 37, 255] {
        let good = packet(id);
        let n = good.len();
        for at in [0, 1, 12, n - 5, n - 4, n - 3, n - 2, n - 1] {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                assert!(!icrc::verify(&v4_flow_id(0), &bad), "id {id} byte {at} ^ {flip:#x}");
            }
        }
    }
    // IPv6 has no ID: nothing but the exact ICRC is accepted.
    let f6 =
        Flow::new("[fd00::1]:1024".parse().unwrap(), "[fd00::2]:4791".parse().unwrap()).unwrap();
    let mut p6 = ib.clone();
    p6.extend_from_slice(&icrc::compute(&f6, &ib).unwrap().to_le_bytes());
    assert!(icrc::verify(&f6, &p6));
    let n6 = p6.len();
    p6[n6 - 1] ^= 1;
    assert!(!icrc::verify(&f6, &p6));
}

#[test]
fn a_packet_to_4791_passes_with_any_ipv4_id_and_fails_when_corrupted() {
    let ib: Vec<u8> = (0..1036).map(|i| (i * 29 + 5) as u8).collect();
    let at = |id: u16| {
        let mut f = v4_flow();
        if let FlowAddrs::V4 { id: i, .. } = &mut f.addrs {
            *i = id;
        }
        f
    };
    let mut state = 0x2545_f491u32;
    for _ in 0..2000 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let id = state as u16;
        let mut p = ib.clone();
        p.extend_from_slice(&icrc::compute(&at(id), &ib).unwrap().to_le_bytes());
        assert!(icrc::verify(&v4_flow(), &p), "id {id:#x}");
        let n = p.len();
        for at in [0, 7, 12, 500, n - 5, n - 4, n - 1] {
            let mut bad = p.clone();
            bad[at] ^= 0x10;
            assert!(!icrc::verify(&v4_flow(), &bad), "id {id:#x} byte {at}");
        }
    }
}
