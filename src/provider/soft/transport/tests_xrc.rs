//! XRC through the engine: RC's reliability with XRC opcodes, the XRCETH on every request and
//! on none of the responses, and one SRQ per message.

use super::harness::*;
use super::*;
use crate::provider::soft::roce::opcode::{op, Transport};
use crate::provider::soft::roce::{self, NakCode, Syndrome};

const RW: (bool, bool, bool) = (true, true, true);

fn xrc() -> RcConfig {
    let mut c = RcConfig::new(0x11, 0x22, 100, 9000);
    c.transport = Transport::Xrc;
    c
}

#[test]
fn sends_and_reads_carry_the_srq_number_and_use_xrc_opcodes() {
    let mut s = Sim::new(xrc(), 1, Faults::LOSSY);
    let src = s.n[0].mem.region(1, 0x1000, 8192, RW);
    let dst = s.n[1].mem.region(2, 0x9000, 8192, RW);
    let a = s.n[0].mem.sgl(1, src, 0, 3000);
    s.n[0].mem.bytes_mut(a).fill(0x5a);
    let r = s.n[1].mem.sgl(50, dst, 0, 4096);
    s.n[1].rq.q.push_back(Recv { wr_id: 50, sgl: r, len: 4096 });
    s.post(0, SendWr { xrc_srqn: 0x77, ..wr(1, WrOp::Send, a, 3000) });
    let back = s.n[0].mem.sgl(2, src, 4096, 2000);
    let read =
        SendWr { remote_va: 0x9000, rkey: 2, xrc_srqn: 0x77, ..wr(2, WrOp::Read, back, 2000) };
    s.post(0, read);
    assert!(s.run(200_000, |s| s.n[0].out.sends().len() == 2));
    let sends = s.n[0].out.sends();
    assert!(sends.iter().all(|c| c.status == Status::Success), "{sends:?}");
    assert_eq!(s.n[1].out.recvs()[0].byte_len, 3000);
    assert!(s.n[0].mem.bytes(back).iter().all(|&b| b == 0x5a), "the READ brought the SEND back");
    let requests = s.sent_by(0);
    // The SEND's last packet asks for its ACK, as on RC.
    assert!(requests.iter().any(|p| p.bth.opcode() == op::XRC | op::SEND_LAST && p.bth.ack_req()));
    for p in requests {
        assert_eq!(p.bth.opcode() & !op::OPERATION, op::XRC, "{:#x}", p.bth.opcode());
        assert_eq!(p.ext.xrc.map(|x| x.srqn()), Some(0x77), "every request names the SRQ");
    }
    let answers = s.sent_by(1);
    assert!(answers.iter().any(|p| p.bth.opcode() == op::XRC | op::ACK));
    assert!(answers.iter().any(|p| p.bth.opcode() == op::XRC | op::READ_RESPONSE_FIRST));
    assert!(answers.iter().all(|p| p.ext.xrc.is_none() && p.bth.opcode() >= op::XRC));
}

#[test]
fn a_message_that_changes_its_srq_midway_is_an_invalid_request() {
    let mut s = Sim::new(xrc(), 2, Faults::NONE);
    let dst = s.n[1].mem.region(2, 0x9000, 8192, RW);
    let r = s.n[1].mem.sgl(50, dst, 0, 4096);
    s.n[1].rq.q.push_back(Recv { wr_id: 50, sgl: r, len: 4096 });
    let flow = flows().0;
    let payload = [7u8; 1024];
    let mut first = roce::Packet::new(op::XRC | op::SEND_FIRST, 0x22, 100, &payload);
    first.ext.xrc = Some(roce::XrcEth::new(5));
    let mut last = roce::Packet::new(op::XRC | op::SEND_LAST, 0x22, 101, &payload[..10]);
    last.ext.xrc = Some(roce::XrcEth::new(6));
    let Node { qp, mem, rq, out, .. } = &mut s.n[1];
    for p in [first, last] {
        let mut b = vec![0; p.wire_len()];
        let n = roce::encode(&p, &flow, &mut b).unwrap();
        let d = roce::decode(&b[..n], &flow).unwrap();
        qp.on_packet(&d, 0, mem, rq, out);
    }
    assert!(qp.is_error());
    let nak = out.decoded().into_iter().last().unwrap();
    assert_eq!(nak.bth.opcode(), op::XRC | op::ACK);
    assert_eq!(
        nak.ext.aeth.unwrap().syndrome(),
        Syndrome::Nak(NakCode::InvalidRequest),
        "NAK, invalid request"
    );
}

#[test]
fn a_refused_request_is_an_invalid_request_only_at_the_expected_psn() {
    let mut s = Sim::new(xrc(), 3, Faults::NONE);
    let mut p = roce::Packet::new(op::XRC | op::SEND_ONLY, 0x22, 105, &[]);
    p.ext.xrc = Some(roce::XrcEth::new(5));
    let Node { qp, mem, out, .. } = &mut s.n[1];
    qp.refuse(&p, mem, out);
    assert!(!qp.is_error() && out.packets.is_empty(), "a stray PSN is ignored");
    p.bth.set_psn(100); // node 1 expects node 0's sq_psn
    qp.refuse(&p, mem, out);
    assert!(qp.is_error());
    assert_eq!(out.events, vec![QpEvent::QpReqErr]);
}
