//! UC through the engine: UC opcodes on the wire, no ACKs, completion once sent, and a
//! responder that drops what it cannot take whole and carries on.

use super::harness::*;
use super::*;
use crate::provider::soft::roce::opcode::{op, Transport};

const RW: (bool, bool, bool) = (true, true, true);

fn uc() -> RcConfig {
    let mut c = RcConfig::new(0x11, 0x22, 100, 9000);
    c.transport = Transport::Uc;
    c
}

/// A pair with a source region on node 0 (rkey 1) and a destination region on node 1 (rkey 2,
/// at 0x9000), `len` bytes each.
fn pair_of(seed: u64, faults: Faults, len: usize) -> (Sim, usize, usize) {
    let mut s = Sim::new(uc(), seed, faults);
    let src = s.n[0].mem.region(1, 0x1000, len, RW);
    let dst = s.n[1].mem.region(2, 0x9000, len, RW);
    (s, src, dst)
}

fn pair(seed: u64, faults: Faults) -> (Sim, usize, usize) {
    pair_of(seed, faults, 1 << 16)
}

fn fill(s: &mut Sim, node: usize, sgl: Sgl, byte: u8) {
    s.n[node].mem.bytes_mut(sgl).fill(byte);
}

#[test]
fn sends_and_writes_complete_without_acks() {
    let (mut s, src, dst) = pair(1, Faults::NONE);
    let a = s.n[0].mem.sgl(1, src, 0, 3000);
    fill(&mut s, 0, a, 0xab);
    let r = s.n[1].mem.sgl(50, dst, 0, 4096);
    s.n[1].rq.q.push_back(Recv { wr_id: 50, sgl: r, len: 4096 });
    s.post(0, wr(1, WrOp::SendImm(7), a, 3000));
    let mut w = wr(2, WrOp::Write, a, 3000);
    (w.rkey, w.remote_va) = (2, 0x9000 + 8192);
    s.post(0, w);
    s.run(10_000, |_| false);
    let sends = s.n[0].out.sends();
    assert_eq!((sends[0].wr_id, sends[0].status), (1, Status::Success));
    assert_eq!((sends[1].wr_id, sends[1].opcode), (2, WcOpcode::RdmaWrite));
    let rc = s.n[1].out.recvs()[0];
    assert_eq!((rc.wr_id, rc.status, rc.byte_len, rc.imm), (50, Status::Success, 3000, Some(7)));
    assert!(s.n[1].mem.bytes(r)[..3000].iter().all(|&b| b == 0xab));
    let written = s.n[1].mem.sgl(51, dst, 8192, 3000);
    assert!(s.n[1].mem.bytes(written).iter().all(|&b| b == 0xab));
    // Every packet is a UC request (3 + 3 at MTU 1024); the responder sent nothing at all.
    let codes: Vec<u8> = s.sent_by(0).iter().map(|p| p.bth.opcode()).collect();
    assert!(codes.iter().all(|&c| (op::UC..op::UC + 0x0c).contains(&c)), "{codes:x?}");
    assert_eq!(codes.len(), 6);
    assert!(s.sent_by(0).iter().all(|p| !p.bth.ack_req()));
    assert!(s.sent_by(1).is_empty(), "UC answers nothing");
    assert_eq!(s.n[0].qp.next_deadline(), None, "no retransmission timer");
}

#[test]
fn reads_atomics_and_send_with_invalidate_are_refused() {
    let (mut s, src, _) = pair(2, Faults::NONE);
    let a = s.n[0].mem.sgl(1, src, 0, 8);
    let Node { qp, out, .. } = &mut s.n[0];
    for o in [WrOp::Read, WrOp::FetchAdd { add: 1 }, WrOp::SendInv(5)] {
        assert_eq!(qp.post(wr(1, o, a, 8), out), Err(PostError::Invalid), "{o:?}");
    }
}

#[test]
fn a_lost_packet_drops_its_message_and_the_receive_is_reused() {
    let (mut s, src, dst) = pair(3, Faults::NONE);
    let a = s.n[0].mem.sgl(1, src, 0, 3000);
    fill(&mut s, 0, a, 0x11);
    let b = s.n[0].mem.sgl(2, src, 4096, 100);
    fill(&mut s, 0, b, 0x22);
    let r = s.n[1].mem.sgl(50, dst, 0, 4096);
    s.n[1].rq.q.push_back(Recv { wr_id: 50, sgl: r, len: 4096 });
    // The middle packet of the first SEND is lost.
    let mut n = 0;
    s.cut = Some(Box::new(move |from, _| {
        n += usize::from(from == 0);
        from == 0 && n == 2
    }));
    s.post(0, wr(1, WrOp::Send, a, 3000));
    s.post(0, wr(2, WrOp::Send, b, 100));
    s.run(10_000, |_| false);
    // Both sends completed at the sender; only the second message arrived, in the receive
    // the first one had started to fill (its WQE was never completed).
    assert_eq!(s.n[0].out.sends().len(), 2);
    let recvs = s.n[1].out.recvs();
    assert_eq!(recvs.len(), 1);
    assert_eq!((recvs[0].wr_id, recvs[0].status, recvs[0].byte_len), (50, Status::Success, 100));
    assert!(s.n[1].mem.bytes(r)[..100].iter().all(|&x| x == 0x22));
    assert!(!s.n[1].qp.is_error(), "a UC loss is no QP error");
}

#[test]
fn no_receive_a_short_one_or_a_bad_key_drops_the_message_and_the_qp_carries_on() {
    let (mut s, src, dst) = pair(4, Faults::NONE);
    let a = s.n[0].mem.sgl(1, src, 0, 2000);
    fill(&mut s, 0, a, 0x33);
    // No receive posted: the SEND is dropped (no RNR in UC).
    s.post(0, wr(1, WrOp::Send, a, 2000));
    s.run(10_000, |_| false);
    assert!(s.n[1].out.recvs().is_empty());
    // A WRITE with an rkey the target does not have, and one beyond its region.
    let mut w = wr(2, WrOp::Write, a, 2000);
    (w.rkey, w.remote_va) = (99, 0x9000);
    s.post(0, w);
    let mut w = wr(3, WrOp::Write, a, 2000);
    (w.rkey, w.remote_va) = (2, 0x9000 + (1 << 16) - 1000);
    s.post(0, w);
    // Then an honest WRITE with immediate and its receive.
    let r = s.n[1].mem.sgl(50, dst, 0, 16);
    s.n[1].rq.q.push_back(Recv { wr_id: 50, sgl: r, len: 16 });
    // A SEND longer than that receive: dropped, and the receive stays posted.
    s.post(0, wr(5, WrOp::Send, a, 2000));
    let mut w = wr(4, WrOp::WriteImm(9), a, 2000);
    (w.rkey, w.remote_va) = (2, 0x9000 + 4096);
    s.post(0, w);
    s.run(10_000, |_| false);
    assert_eq!(s.n[0].out.sends().len(), 5);
    assert!(s.n[0].out.sends().iter().all(|c| c.status == Status::Success));
    let rc = s.n[1].out.recvs()[0];
    assert_eq!((rc.wr_id, rc.opcode, rc.imm), (50, WcOpcode::RecvRdmaWithImm, Some(9)));
    let edge = s.n[1].mem.sgl(51, dst, (1 << 16) - 1000, 1000);
    assert!(s.n[1].mem.bytes(edge).iter().all(|&x| x == 0), "the refused WRITE wrote nothing");
    let good = s.n[1].mem.sgl(52, dst, 4096, 2000);
    assert!(s.n[1].mem.bytes(good).iter().all(|&x| x == 0x33));
    assert!(!s.n[1].qp.is_error());
    assert!(s.sent_by(1).is_empty());
}

#[test]
fn lossy_wire_delivers_whole_messages_or_none() {
    // Under drops, duplicates and reordering every message that arrives is whole and exact,
    // each at most once, in order; the sender completes everything.
    let n = 200u64;
    let (mut s, src, dst) = pair_of(5, Faults::LOSSY, n as usize * 4096);
    for m in 0..n {
        let len = 1 + (m as usize * 37) % 3000;
        let a = s.n[0].mem.sgl(m, src, m * 4096, len as u64);
        fill(&mut s, 0, a, m as u8);
        s.post(0, wr(m, WrOp::Send, a, len as u32));
    }
    for m in 0..n {
        let r = s.n[1].mem.sgl(1000 + m, dst, m * 4096, 4096);
        s.n[1].rq.q.push_back(Recv { wr_id: 1000 + m, sgl: r, len: 4096 });
    }
    s.run(1_000_000, |_| false);
    assert_eq!(s.n[0].out.sends().len(), n as usize);
    let recvs = s.n[1].out.recvs();
    assert!(!recvs.is_empty() && recvs.len() < n as usize, "{} of {n} arrived", recvs.len());
    // Receives complete in posting order; message m (its length says which) fills exactly.
    let mut last = None;
    for (k, c) in recvs.iter().enumerate() {
        assert_eq!((c.wr_id, c.status), (1000 + k as u64, Status::Success));
        let m = (0..n).find(|m| 1 + (*m as usize * 37) % 3000 == c.byte_len as usize).unwrap();
        assert!(last.is_none_or(|l| m > l), "in order, at most once");
        last = Some(m);
        let r = s.n[1].mem.sgl(2000 + k as u64, dst, k as u64 * 4096, 4096);
        let got = &s.n[1].mem.bytes(r)[..c.byte_len as usize];
        assert!(got.iter().all(|&x| x == m as u8), "message {m} byte-exact");
    }
    assert!(!s.n[1].qp.is_error());
}
