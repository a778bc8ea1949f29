//! UD QPs: Q_Key rules, the GRH room, no reliability.

use super::harness::*;
use super::ud::{UdDest, UdQp};
use super::*;
use crate::provider::soft::roce::{self, opcode::op};

fn setup() -> (UdQp, UdQp, TestMem, TestMem, TestOut, TestOut) {
    let (f0, f1) = flows();
    let mut m0 = TestMem::default();
    let mut m1 = TestMem::default();
    let a = m0.region(1, 0, 4096, (true, true, true));
    m0.sgl(0, a, 0, 4096);
    let b = m1.region(2, 0, 8192, (true, true, true));
    m1.sgl(0, b, 0, 1100);
    m1.sgl(1, b, 4096, 100);
    (
        UdQp::new(5, 0x1234, 1024),
        UdQp::new(6, 0x1234, 1024),
        m0,
        m1,
        TestOut::new(f0),
        TestOut::new(f1),
    )
}

#[test]
fn ud_send_and_receive_with_grh_room() {
    let (mut a, mut b, mut m0, mut m1, mut o0, mut o1) = setup();
    m0.bytes_mut(Sgl(0))[..1000].copy_from_slice(&[7; 1000]);
    let mut w = wr(9, WrOp::SendImm(0xfeed), Sgl(0), 1000);
    w.solicited = true;
    a.post_send(&w, UdDest { qpn: 6, qkey: 0x8000_0000 }, &mut m0, &mut o0).unwrap();
    assert_eq!(o0.sends()[0].status, Status::Success);
    let pkts = o0.decoded();
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].bth.opcode(), op::UD | op::SEND_ONLY_IMM);
    assert_eq!(pkts[0].ext.deth.map(|d| (d.qkey(), d.src_qp())), Some((0x1234, 5)), "own Q_Key");
    let mut rq = TestRq::default();
    rq.q.push_back(Recv { wr_id: 3, sgl: Sgl(0), len: 1100 });
    b.on_packet(&pkts[0], &mut m1, &mut rq, &mut o1);
    let c = o1.recvs()[0];
    assert_eq!((c.wr_id, c.status, c.byte_len, c.src_qp), (3, Status::Success, 1040, 5));
    assert_eq!((c.imm, c.grh, c.solicited), (Some(0xfeed), true, true));
    assert_eq!(&m1.bytes(Sgl(0))[40..1040], &[7; 1000][..]);
    assert_eq!(&m1.bytes(Sgl(0))[..40], &[0; 40][..], "GRH room left to the caller");
}

#[test]
fn ud_wrong_qkey_or_no_receive_is_dropped_silently() {
    let (mut a, mut b, mut m0, mut m1, mut o0, mut o1) = setup();
    let w = wr(1, WrOp::Send, Sgl(0), 10);
    a.post_send(&w, UdDest { qpn: 6, qkey: 0x4321 }, &mut m0, &mut o0).unwrap();
    a.post_send(&w, UdDest { qpn: 6, qkey: 0x1234 }, &mut m0, &mut o0).unwrap();
    let bytes = o0.packets.clone();
    let (f0, _) = flows();
    let mut rq = TestRq::default();
    rq.q.push_back(Recv { wr_id: 3, sgl: Sgl(0), len: 1100 });
    let p0 = roce::decode(&bytes[0], &f0).unwrap();
    b.on_packet(&p0, &mut m1, &mut rq, &mut o1);
    assert!(o1.completions.is_empty() && rq.q.len() == 1, "wrong Q_Key: no receive consumed");
    let p1 = roce::decode(&bytes[1], &f0).unwrap();
    b.on_packet(&p1, &mut m1, &mut rq, &mut o1);
    assert_eq!(o1.recvs().len(), 1);
    b.on_packet(&p1, &mut m1, &mut rq, &mut o1);
    assert_eq!(o1.recvs().len(), 1, "no receive: dropped, no error");
}

#[test]
fn ud_too_long_for_the_receive_or_the_mtu() {
    let (mut a, mut b, mut m0, mut m1, mut o0, mut o1) = setup();
    let big = wr(1, WrOp::Send, Sgl(0), 1025);
    assert_eq!(
        a.post_send(&big, UdDest { qpn: 6, qkey: 0x1234 }, &mut m0, &mut o0),
        Err(PostError::Invalid)
    );
    let w = wr(2, WrOp::Send, Sgl(0), 61);
    a.post_send(&w, UdDest { qpn: 6, qkey: 0x1234 }, &mut m0, &mut o0).unwrap();
    let pkts = o0.decoded();
    let mut rq = TestRq::default();
    rq.q.push_back(Recv { wr_id: 4, sgl: Sgl(1), len: 100 }); // 40 + 61 > 100
    b.on_packet(&pkts[0], &mut m1, &mut rq, &mut o1);
    assert_eq!(o1.recvs()[0].status, Status::LocLenErr);
    assert_eq!(m1.local_refused, 0, "refused by the engine, not by memory");
    let rdma = wr(3, WrOp::Write, Sgl(0), 10);
    assert_eq!(
        a.post_send(&rdma, UdDest { qpn: 6, qkey: 1 }, &mut m0, &mut o0),
        Err(PostError::Invalid)
    );
}
