//! Responder fed packets by hand: validation of every field, duplicates, NAK and ACK rules.

use super::harness::*;
use super::*;
use crate::provider::soft::roce::opcode::op;
use crate::provider::soft::roce::{AtomicEth, Ieth, ImmDt, NakCode, Reth, Syndrome};

const EPSN: u32 = 500;
const RKEY: u32 = 0x77;
const VA: u64 = 0x1_0000;

struct R {
    qp: RcQp,
    mem: TestMem,
    rq: TestRq,
    out: TestOut,
    region: usize,
}

impl R {
    fn new() -> R {
        let mut c = RcConfig::new(0x22, 0x11, 7, EPSN);
        c.max_dest_rd_atomic = 2;
        let mut mem = TestMem::default();
        let region = mem.region(RKEY, VA, 8192, (true, true, true));
        let local = mem.region(1, 0, 16384, (false, false, false));
        for k in 0..4u64 {
            mem.sgl(k, local, k * 4096, 4096);
        }
        R { qp: RcQp::new(&c), mem, rq: TestRq::default(), out: TestOut::new(flows().1), region }
    }
    fn recv(&mut self, k: u64, len: u32) {
        self.rq.q.push_back(Recv { wr_id: 100 + k, sgl: Sgl(k), len });
    }
    fn feed(&mut self, p: &Packet<'_>) {
        self.qp.on_packet(p, 0, &mut self.mem, &mut self.rq, &mut self.out);
    }
    /// (opcode, PSN, syndrome) of everything sent.
    fn sent(&self) -> Vec<(u8, u32, Option<Syndrome>)> {
        self.out
            .decoded()
            .iter()
            .map(|p| (p.bth.opcode(), p.bth.psn(), p.ext.aeth.map(|a| a.syndrome())))
            .collect()
    }
    fn naks(&self) -> Vec<(u32, Syndrome)> {
        self.sent()
            .into_iter()
            .filter_map(|(_, p, s)| {
                s.filter(|s| !matches!(s, Syndrome::Ack { .. })).map(|s| (p, s))
            })
            .collect()
    }
    fn untouched(&self) -> bool {
        self.mem.regions[self.region].data.iter().all(|b| *b == 0) && self.mem.local_refused == 0
    }
}

fn pkt(code: u8, psn: u32, payload: &[u8]) -> Packet<'_> {
    let mut p = Packet::new(code, 0x22, psn, payload);
    p.bth.set_ack_req(true);
    p
}

fn write(code: u8, psn: u32, payload: &[u8], len: u32) -> Packet<'_> {
    let mut p = pkt(code, psn, payload);
    p.ext.reth = Some(Reth::new(VA, RKEY, len));
    p
}

const SEQ: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
const INV: Syndrome = Syndrome::Nak(NakCode::InvalidRequest);
const ACC: Syndrome = Syndrome::Nak(NakCode::RemoteAccessError);

#[test]
fn one_sequence_nak_per_gap() {
    let mut r = R::new();
    r.recv(0, 4096);
    r.recv(1, 4096);
    r.feed(&pkt(op::SEND_ONLY, EPSN, b"a"));
    for p in [EPSN + 2, EPSN + 3, EPSN + 5] {
        r.feed(&pkt(op::SEND_ONLY, p, b"b"));
    }
    assert_eq!(r.naks(), [(EPSN + 1, SEQ)], "one NAK for the gap, for the expected PSN");
    r.feed(&pkt(op::SEND_ONLY, EPSN + 1, b"c"));
    r.feed(&pkt(op::SEND_ONLY, EPSN + 4, b"d"));
    r.feed(&pkt(op::SEND_ONLY, EPSN + 5, b"d"));
    assert_eq!(r.naks(), [(EPSN + 1, SEQ), (EPSN + 2, SEQ)], "a new gap, a new NAK");
    assert_eq!(r.out.recvs().len(), 2);
    assert!(!r.qp.is_error());
}

fn class_c(r: &R, nak: Syndrome, ev: QpEvent) {
    assert_eq!(r.naks(), [(EPSN, nak)]);
    assert_eq!(r.out.events, [ev]);
    assert!(r.qp.is_error() && r.qp.resp.is_error());
    assert!(r.untouched());
}

#[test]
fn middle_or_last_without_first_is_invalid() {
    for code in [op::SEND_MIDDLE, op::SEND_LAST, op::WRITE_MIDDLE, op::WRITE_LAST_IMM] {
        let mut r = R::new();
        r.recv(0, 4096);
        r.feed(&pkt(code, EPSN, &[1; 1024]));
        class_c(&r, INV, QpEvent::QpReqErr);
    }
}

#[test]
fn a_first_while_a_message_is_open_is_invalid() {
    let mut r = R::new();
    r.recv(0, 4096);
    r.feed(&pkt(op::SEND_FIRST, EPSN, &[0; 1024]));
    r.feed(&pkt(op::SEND_FIRST, EPSN + 1, &[0; 1024]));
    assert_eq!(r.naks(), [(EPSN + 1, INV)]);
    assert_eq!(r.out.recvs()[0].status, Status::WrFlushErr, "the open receive is flushed");
    // And after the error nothing more is executed.
    r.feed(&pkt(op::SEND_ONLY, EPSN + 1, b"x"));
    assert_eq!(r.out.recvs().len(), 1);
}

#[test]
fn packet_sizes_against_the_mtu() {
    let cases: [(u8, usize); 5] = [
        (op::SEND_FIRST, 1023),
        (op::SEND_FIRST, 1025),
        (op::SEND_ONLY, 1025),
        (op::WRITE_FIRST, 100),
        (op::WRITE_ONLY, 1025),
    ];
    for (code, n) in cases {
        let mut r = R::new();
        r.recv(0, 4096);
        let data = vec![1; n];
        r.feed(&write(code, EPSN, &data, n as u32 + 4096));
        class_c(&r, INV, QpEvent::QpReqErr);
    }
    // A LAST must carry 1..=MTU bytes, a MIDDLE exactly MTU.
    for (code, n) in [(op::SEND_LAST, 0usize), (op::SEND_MIDDLE, 10)] {
        let mut r = R::new();
        r.recv(0, 4096);
        r.feed(&pkt(op::SEND_FIRST, EPSN, &[1; 1024]));
        r.feed(&pkt(code, EPSN + 1, &vec![1; n]));
        assert_eq!(r.naks(), [(EPSN + 1, INV)], "{code:#x} with {n} bytes");
    }
}

#[test]
fn write_totals_must_match_the_reth() {
    // First of 1500 bytes, then a Last of 1024 (total 2048 != 1500).
    let mut r = R::new();
    r.feed(&write(op::WRITE_FIRST, EPSN, &[9; 1024], 1500));
    r.feed(&pkt(op::WRITE_LAST, EPSN + 1, &[9; 1024]));
    assert_eq!(r.naks(), [(EPSN + 1, INV)]);
    assert_eq!(r.mem.remote_writes, 1);
    // A Middle that would reach the end (it should have been a Last).
    let mut r = R::new();
    r.feed(&write(op::WRITE_FIRST, EPSN, &[9; 1024], 2048));
    r.feed(&pkt(op::WRITE_MIDDLE, EPSN + 1, &[9; 1024]));
    assert_eq!(r.naks(), [(EPSN + 1, INV)]);
    // Only: RETH length and payload must agree.
    let mut r = R::new();
    r.feed(&write(op::WRITE_ONLY, EPSN, &[9; 10], 11));
    class_c(&r, INV, QpEvent::QpReqErr);
    // A RETH beyond the region: access error, nothing written.
    let mut r = R::new();
    let mut p = write(op::WRITE_ONLY, EPSN, &[9; 10], 10);
    p.ext.reth = Some(Reth::new(VA + 8190, RKEY, 10));
    r.feed(&p);
    class_c(&r, ACC, QpEvent::QpAccessErr);
}

#[test]
fn send_longer_than_the_receive() {
    let mut r = R::new();
    r.recv(0, 100);
    r.feed(&pkt(op::SEND_ONLY, EPSN, &[3; 200]));
    class_c(&r, INV, QpEvent::QpReqErr);
    assert_eq!(r.out.recvs()[0].status, Status::LocLenErr);
    assert!(r.mem.bytes(Sgl(0)).iter().all(|b| *b == 0));
}

#[test]
fn duplicates_answered_never_executed_twice() {
    let mut r = R::new();
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    r.mem.regions[r.region].data[..3000].copy_from_slice(&data);
    // WRITE (executed once, its duplicate re-ACKed).
    r.feed(&write(op::WRITE_ONLY, EPSN, &data[..8], 8));
    r.feed(&write(op::WRITE_ONLY, EPSN, &data[..8], 8));
    assert_eq!(r.mem.remote_writes, 1);
    assert_eq!(r.sent()[1], (op::ACK, EPSN, Some(Syndrome::Ack { credits: 31 })));
    // READ of 3000 bytes: PSNs EPSN+1..=EPSN+3.
    let mut rd = pkt(op::READ_REQUEST, EPSN + 1, &[]);
    rd.ext.reth = Some(Reth::new(VA, RKEY, 3000));
    r.feed(&rd);
    assert_eq!(r.qp.resp.expected_psn(), EPSN + 4);
    r.mem.regions[r.region].data[0] = 0xee; // answered again from memory, as it is now
    r.feed(&rd);
    let resp: Vec<_> = r
        .out
        .decoded()
        .iter()
        .skip(2)
        .map(|p| (p.bth.opcode(), p.bth.psn(), p.payload.len()))
        .collect();
    assert_eq!(
        resp,
        [
            (op::READ_RESPONSE_FIRST, EPSN + 1, 1024),
            (op::READ_RESPONSE_MIDDLE, EPSN + 2, 1024),
            (op::READ_RESPONSE_LAST, EPSN + 3, 952),
            (op::READ_RESPONSE_FIRST, EPSN + 1, 1024),
            (op::READ_RESPONSE_MIDDLE, EPSN + 2, 1024),
            (op::READ_RESPONSE_LAST, EPSN + 3, 952),
        ]
    );
    assert_eq!(r.out.decoded()[5].payload[0], 0xee);
    // A partial re-request from the third packet, exactly what is missing.
    let n0 = r.out.packets.len();
    let mut part = pkt(op::READ_REQUEST, EPSN + 3, &[]);
    part.ext.reth = Some(Reth::new(VA + 2048, RKEY, 952));
    r.feed(&part);
    assert_eq!(r.out.packets.len(), n0 + 1);
    // A "duplicate" that does not match what was read: ignored (no new range is read).
    let mut bogus = pkt(op::READ_REQUEST, EPSN + 2, &[]);
    bogus.ext.reth = Some(Reth::new(VA + 4096, RKEY, 4000));
    r.feed(&bogus);
    assert_eq!(r.out.packets.len(), n0 + 1);
    // Atomic: executed once, duplicate answered from the cache.
    let mut fa = pkt(op::FETCH_ADD, EPSN + 4, &[]);
    fa.ext.atomic = Some(AtomicEth::new(VA + 4096, RKEY, 5, 0));
    r.feed(&fa);
    r.feed(&fa);
    assert_eq!(r.mem.atomics, 1);
    let acks: Vec<u64> =
        r.out.decoded().iter().filter_map(|p| p.ext.atomic_ack.map(|a| a.orig())).collect();
    assert_eq!(acks, [0, 0], "the duplicate replays the saved original value");
    assert!(!r.qp.is_error());
}

#[test]
fn atomic_cache_holds_max_dest_rd_atomic_results() {
    let mut r = R::new(); // max_dest_rd_atomic = 2
    let fa = |k: u32| {
        let mut p = pkt(op::FETCH_ADD, EPSN + k, &[]);
        p.ext.atomic = Some(AtomicEth::new(VA, RKEY, 1, 0));
        p
    };
    for k in 0..3 {
        r.feed(&fa(k));
    }
    let n = r.out.packets.len();
    r.feed(&fa(0)); // evicted: no answer, and certainly no second execution
    assert_eq!(r.out.packets.len(), n);
    r.feed(&fa(2));
    assert_eq!(r.out.packets.len(), n + 1);
    assert_eq!(r.mem.atomics, 3);
}

#[test]
fn rnr_nak_then_resume() {
    let mut r = R::new();
    let mut c = RcConfig::new(0x22, 0x11, 7, EPSN);
    c.min_rnr_timer = 17;
    r.qp = RcQp::new(&c);
    r.feed(&pkt(op::SEND_FIRST, EPSN, &[4; 1024]));
    r.feed(&pkt(op::SEND_LAST, EPSN + 1, &[4; 10]));
    assert_eq!(r.naks(), [(EPSN, Syndrome::RnrNak { timer: 17 })], "RNR once; its tail dropped");
    assert_eq!(r.qp.resp.expected_psn(), EPSN);
    r.recv(0, 4096);
    r.feed(&pkt(op::SEND_FIRST, EPSN, &[4; 1024]));
    r.feed(&pkt(op::SEND_LAST, EPSN + 1, &[4; 10]));
    assert_eq!(r.out.recvs()[0].byte_len, 1034);
    assert!(r.out.events.is_empty() && !r.qp.is_error());
}

#[test]
fn write_with_immediate_needs_a_receive() {
    let mut r = R::new();
    let mut p = write(op::WRITE_ONLY_IMM, EPSN, b"hello", 5);
    p.ext.imm = Some(ImmDt::new(0xabcd));
    p.bth.set_se(true);
    r.feed(&p);
    assert_eq!(r.naks(), [(EPSN, Syndrome::RnrNak { timer: 12 })]);
    assert!(r.untouched(), "nothing written before the receive exists");
    r.recv(0, 0);
    r.feed(&p);
    let c = r.out.recvs()[0];
    assert_eq!(
        (c.opcode, c.imm, c.byte_len, c.solicited),
        (WcOpcode::RecvRdmaWithImm, Some(0xabcd), 5, true)
    );
    assert_eq!(&r.mem.regions[r.region].data[..5], b"hello");
}

#[test]
fn send_with_invalidate_and_imm_surface_in_the_completion() {
    let mut r = R::new();
    r.recv(0, 4096);
    r.recv(1, 4096);
    let mut p = pkt(op::SEND_ONLY_INV, EPSN, b"x");
    p.ext.ieth = Some(Ieth::new(RKEY));
    r.feed(&p);
    let mut q = pkt(op::SEND_ONLY_IMM, EPSN + 1, b"y");
    q.ext.imm = Some(ImmDt::new(7));
    r.feed(&q);
    let c = r.out.recvs();
    assert_eq!((c[0].invalidated, c[0].imm, c[0].byte_len), (Some(RKEY), None, 1));
    assert_eq!((c[1].invalidated, c[1].imm), (None, Some(7)));
    assert_eq!(r.mem.invalidated, [RKEY]);
}

#[test]
fn acks_are_coalesced_and_carry_the_msn() {
    let mut r = R::new();
    r.recv(0, 4096 * 4);
    r.rq.q[0].len = 40 * 256;
    let mut c = RcConfig::new(0x22, 0x11, 7, EPSN);
    c.mtu = 256;
    r.qp = RcQp::new(&c);
    r.mem.sgl(0, 1, 0, 16384);
    for k in 0..40u32 {
        let code = match k {
            0 => op::SEND_FIRST,
            39 => op::SEND_LAST,
            _ => op::SEND_MIDDLE,
        };
        let mut p = Packet::new(code, 0x22, EPSN + k, &[5; 256]);
        p.bth.set_ack_req(k == 39);
        r.feed(&p);
    }
    let acks: Vec<_> =
        r.out.decoded().iter().map(|p| (p.bth.psn(), p.ext.aeth.unwrap().msn())).collect();
    assert_eq!(acks, [(EPSN + 15, 0), (EPSN + 31, 0), (EPSN + 39, 1)], "every 16 and on AckReq");
    assert_eq!(r.qp.resp.msn(), 1);
}

#[test]
fn foreign_packets_are_dropped_not_errors() {
    let mut r = R::new();
    r.recv(0, 4096);
    let mut wrong_qp = pkt(op::SEND_ONLY, EPSN, b"x");
    wrong_qp.bth.set_dest_qp(0x23);
    r.feed(&wrong_qp);
    let mut wrong_pkey = pkt(op::SEND_ONLY, EPSN, b"x");
    wrong_pkey.bth.set_pkey(0x7fff);
    r.feed(&wrong_pkey);
    r.feed(&pkt(op::UC | op::SEND_ONLY, EPSN, b"x"));
    r.feed(&pkt(op::ACK, EPSN, &[])); // a response: the requester's, and nothing is outstanding
    assert!(r.out.packets.is_empty() && r.out.completions.is_empty() && !r.qp.is_error());
    assert_eq!(r.rq.q.len(), 1);
}

#[test]
fn read_longer_than_the_psn_window_is_invalid() {
    let mut r = R::new();
    let mut c = RcConfig::new(0x22, 0x11, 7, EPSN);
    c.mtu = 256;
    r.qp = RcQp::new(&c);
    let mut rd = pkt(op::READ_REQUEST, EPSN, &[]);
    rd.ext.reth = Some(Reth::new(VA, RKEY, 1 << 31)); // 2^23 response packets
    r.feed(&rd);
    class_c(&r, INV, QpEvent::QpReqErr);
    // The requester refuses to post such a READ.
    let w = SendWr { remote_va: VA, rkey: RKEY, ..wr(1, WrOp::Read, Sgl(0), 1 << 31) };
    let mut q = RcQp::new(&c);
    assert_eq!(q.post(w, &mut r.out), Err(PostError::Invalid));
}

#[test]
fn zero_length_write_and_read_name_no_memory() {
    let mut r = R::new();
    let mut w = pkt(op::WRITE_ONLY, EPSN, &[]);
    w.ext.reth = Some(Reth::new(0xdead_0000, 0x1234, 0)); // no such key: not looked at
    r.feed(&w);
    let mut rd = pkt(op::READ_REQUEST, EPSN + 1, &[]);
    rd.ext.reth = Some(Reth::new(0xdead_0000, 0x1234, 0));
    r.feed(&rd);
    let sent = r.sent();
    assert_eq!(sent[0], (op::ACK, EPSN, Some(Syndrome::Ack { credits: 31 })));
    assert_eq!(sent[1], (op::READ_RESPONSE_ONLY, EPSN + 1, Some(Syndrome::Ack { credits: 31 })));
    assert!(r.out.decoded()[1].payload.is_empty());
    assert!(!r.qp.is_error() && r.untouched());
}
