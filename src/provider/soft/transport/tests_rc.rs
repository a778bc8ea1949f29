//! RC requester and responder end to end, through the simulated lossy wire.

use super::harness::*;
use super::*;
use crate::provider::soft::roce::opcode::op;
use crate::provider::soft::roce::{NakCode, Syndrome};

const RW: (bool, bool, bool) = (true, true, true);

fn cfg() -> RcConfig {
    RcConfig::new(0x11, 0x22, 100, 9000)
}

/// Pattern for message `m` (so a misplaced or duplicated byte shows).
fn pattern(m: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(m.wrapping_mul(7919) + 1);
    let mut v = vec![0; len];
    r.fill(&mut v);
    v
}

/// Sends `sizes` from node 0 to node 1 and checks every message arrived once, in order, exact.
fn sends_arrive_exactly_once(c: RcConfig, sizes: &[usize], seed: u64, faults: Faults) -> Sim {
    let mut s = Sim::new(c, seed, faults);
    let total: usize = sizes.iter().sum();
    let src = s.n[0].mem.region(1, 0x1000, total.max(1), RW);
    let dst = s.n[1].mem.region(2, 0x9000, total.max(1) + sizes.len() * 8, RW);
    let mut at = 0u64;
    let mut dat = 0u64;
    let mut want = vec![];
    for (m, &len) in sizes.iter().enumerate() {
        let m = m as u64;
        let sgl = s.n[0].mem.sgl(m, src, at, len as u64);
        let data = pattern(m, len);
        s.n[0].mem.bytes_mut(sgl).copy_from_slice(&data);
        // Receives 8 bytes longer than the message: byte_len must say the truth.
        let rsgl = s.n[1].mem.sgl(1000 + m, dst, dat, len as u64 + 8);
        s.n[1].rq.q.push_back(Recv { wr_id: 1000 + m, sgl: rsgl, len: len as u32 + 8 });
        let op = if m % 3 == 1 { WrOp::SendImm(m as u32) } else { WrOp::Send };
        s.post(0, wr(m, op, sgl, len as u32));
        want.push((rsgl, data, op));
        at += len as u64;
        dat += len as u64 + 8;
    }
    let n = sizes.len();
    assert!(s.run(2_000_000, |s| s.n[0].out.sends().len() == n), "all sends complete");
    let sends = s.n[0].out.sends();
    for (m, c) in sends.iter().enumerate() {
        assert_eq!((c.wr_id, c.status, c.opcode), (m as u64, Status::Success, WcOpcode::Send));
    }
    let recvs = s.n[1].out.recvs();
    assert_eq!(recvs.len(), n, "each message received exactly once");
    for (m, c) in recvs.iter().enumerate() {
        let (rsgl, data, op) = &want[m];
        assert_eq!((c.wr_id, c.status), (1000 + m as u64, Status::Success), "in order");
        assert_eq!(c.byte_len as usize, data.len());
        assert_eq!(c.imm, if let WrOp::SendImm(i) = op { Some(*i) } else { None });
        assert_eq!(&s.n[1].mem.bytes(*rsgl)[..data.len()], &data[..], "message {m} byte-exact");
        assert_eq!(&s.n[1].mem.bytes(*rsgl)[data.len()..], &[0; 8], "nothing beyond the message");
    }
    assert!(!s.n[0].qp.is_error() && !s.n[1].qp.is_error());
    assert_eq!(s.n[0].mem.local_refused + s.n[1].mem.local_refused, 0);
    s
}

const SIZES: [usize; 12] =
    [0, 1, 3, 1023, 1024, 1025, 2048, 4097, 10_000, 65_536, 100_003, 1 << 20];

#[test]
fn sends_clean_wire() {
    let s = sends_arrive_exactly_once(cfg(), &SIZES, 1, Faults::NONE);
    // Coalesced ACKs: far fewer ACKs than request packets.
    let acks = s.sent_by(1).iter().filter(|p| p.bth.opcode() == op::ACK).count();
    let reqs = s.sent_by(0).len();
    assert!(acks * 4 < reqs, "{acks} ACKs for {reqs} packets");
}

#[test]
fn sends_lossy_wire_several_seeds_and_mtus() {
    for (seed, mtu) in [(2, 1024), (3, 256), (4, 4096), (5, 512)] {
        let mut c = cfg();
        c.mtu = mtu;
        sends_arrive_exactly_once(c, &SIZES, seed, Faults::LOSSY);
    }
}

#[test]
fn sends_heavy_loss_small_window() {
    let mut c = cfg();
    c.window = 8;
    c.mtu = 256;
    let f = Faults { drop: 20, dup: 20, jitter: 50_000, delay: 500 };
    sends_arrive_exactly_once(c, &[5000, 1, 0, 7000, 256, 512, 30_000], 6, f);
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let mut c = cfg();
    c.sq_psn = psn::PSN_MASK - 40;
    c.mtu = 256;
    let s = sends_arrive_exactly_once(c, &[4000, 4000, 4000, 100, 9000], 7, Faults::LOSSY);
    let psns: Vec<u32> = s.sent_by(0).iter().map(|p| p.bth.psn()).collect();
    assert!(psns.contains(&psn::PSN_MASK) && psns.contains(&0), "the PSNs crossed the wrap");
}

/// WRITEs then READs of the same bytes, under loss: READ must return what WRITE put there.
fn write_then_read(seed: u64, faults: Faults, mtu: u32, sizes: &[usize]) {
    let mut c = cfg();
    c.mtu = mtu;
    c.max_rd_atomic = 4;
    c.max_dest_rd_atomic = 4;
    let mut s = Sim::new(c, seed, faults);
    let total: usize = sizes.iter().sum();
    let src = s.n[0].mem.region(1, 0x10_0000, total, RW);
    let back = s.n[0].mem.region(3, 0x90_0000, total, RW);
    let _remote = s.n[1].mem.region(0x77, 0x4000_0000, total, RW);
    let mut at = 0u64;
    let mut id = 0;
    for (m, &len) in sizes.iter().enumerate() {
        let sgl = s.n[0].mem.sgl(id, src, at, len as u64);
        let data = pattern(m as u64 + 50, len);
        s.n[0].mem.bytes_mut(sgl).copy_from_slice(&data);
        let mut w = wr(id, WrOp::Write, sgl, len as u32);
        (w.remote_va, w.rkey) = (0x4000_0000 + at, 0x77);
        s.post(0, w);
        id += 1;
        let rsgl = s.n[0].mem.sgl(id, back, at, len as u64);
        let mut r = wr(id, WrOp::Read, rsgl, len as u32);
        (r.remote_va, r.rkey) = (0x4000_0000 + at, 0x77);
        s.post(0, r);
        id += 1;
        at += len as u64;
    }
    let n = id as usize;
    let ok = s.run(3_000_000, |s| s.n[0].out.sends().len() == n);
    if !ok {
        eprintln!("seed {seed}: {:?} now {} sends {:?}", s.n[0].qp.req, s.now, s.n[0].out.sends());
    }
    assert!(ok);
    let sends = s.n[0].out.sends();
    for (k, c) in sends.iter().enumerate() {
        assert_eq!((c.wr_id, c.status), (k as u64, Status::Success));
    }
    assert_eq!(s.n[0].mem.regions[src].data, s.n[1].mem.regions[0].data, "writes exact");
    assert_eq!(s.n[0].mem.regions[src].data, s.n[0].mem.regions[back].data, "reads exact");
}

#[test]
fn writes_and_reads_clean() {
    write_then_read(10, Faults::NONE, 1024, &[1, 1000, 4096, 70_000, 0, 1 << 20, 333]);
}

#[test]
fn writes_and_reads_under_loss() {
    // READ recovery is go-back-N over the whole rest of the response (as in IB), so a READ of
    // many packets under heavy loss takes many rounds: sizes are kept to what converges fast.
    let small = [1, 1000, 4096, 20_000, 0, 333, 65_536];
    for (seed, mtu) in [(11, 1024), (12, 256), (13, 4096)] {
        write_then_read(seed, Faults::LOSSY, mtu, &small);
    }
    write_then_read(14, Faults { drop: 15, dup: 15, jitter: 40_000, delay: 700 }, 512, &small);
    let f = Faults { drop: 1, dup: 5, jitter: 20_000, delay: 1000 };
    write_then_read(15, f, 4096, &[1 << 20, 7, 1 << 20]);
}

#[test]
fn atomics_under_duplication_execute_once() {
    let mut c = cfg();
    c.max_rd_atomic = 4;
    c.max_dest_rd_atomic = 4;
    let f = Faults { drop: 10, dup: 40, jitter: 30_000, delay: 1000 };
    let mut s = Sim::new(c, 21, f);
    let n = 200u64;
    let results = s.n[0].mem.region(1, 0, 8 * n as usize + 8, RW);
    let counter = s.n[1].mem.region(0x55, 0x8000, 16, RW);
    for k in 0..n {
        let sgl = s.n[0].mem.sgl(k, results, 8 * k, 8);
        let mut w = wr(k, WrOp::FetchAdd { add: 3 }, sgl, 8);
        (w.remote_va, w.rkey) = (0x8000, 0x55);
        s.post(0, w);
    }
    // A CmpSwap that succeeds exactly once: compare with the final value.
    let sgl = s.n[0].mem.sgl(n, results, 8 * n, 8);
    let mut w = wr(n, WrOp::CmpSwap { compare: 3 * n, swap: 7 }, sgl, 8);
    (w.remote_va, w.rkey) = (0x8000, 0x55);
    s.post(0, w);
    assert!(s.run(3_000_000, |s| s.n[0].out.sends().len() == n as usize + 1));
    assert!(s.n[0].out.sends().iter().all(|c| c.status == Status::Success));
    assert_eq!(s.n[1].mem.atomics as u64, n + 1, "each atomic executed once");
    let cell = u64::from_ne_bytes(s.n[1].mem.regions[counter].data[..8].try_into().unwrap());
    assert_eq!(cell, 7, "the adds summed to 3n, then the CmpSwap replaced it");
    for k in 0..=n {
        let got = u64::from_ne_bytes(s.n[0].mem.bytes(Sgl(k)).try_into().unwrap());
        assert_eq!(got, 3 * k, "FetchAdd {k} saw the counter before it, once");
    }
    let dups = s.sent_by(1).iter().filter(|p| p.bth.opcode() == op::ATOMIC_ACK).count();
    assert!(dups as u64 > n + 1, "duplicates were answered from the cache ({dups})");
}

/// Node 1 posts no receive until `late_ns`; node 0's sends must then all arrive.
#[test]
fn rnr_then_late_receives() {
    let mut c = cfg();
    c.min_rnr_timer = 1; // 10 µs
    let mut s = Sim::new(c, 31, Faults::NONE);
    let src = s.n[0].mem.region(1, 0, 3000, RW);
    let dst = s.n[1].mem.region(2, 0, 3000, RW);
    for k in 0..3u64 {
        let sgl = s.n[0].mem.sgl(k, src, k * 1000, 1000);
        s.n[0].mem.bytes_mut(sgl).copy_from_slice(&pattern(k, 1000));
        s.post(0, wr(k, WrOp::Send, sgl, 1000));
    }
    assert!(s.run(10_000, |s| s.now > 200_000), "RNR retries forever (rnr_retry 7)");
    let rnrs = |s: &Sim| {
        s.sent_by(1)
            .iter()
            .filter(|p| {
                matches!(p.ext.aeth.map(|a| a.syndrome()), Some(Syndrome::RnrNak { timer: 1 }))
            })
            .count()
    };
    let before = rnrs(&s);
    assert!(before >= 2, "RNR NAKs while no receive is posted ({before})");
    assert!(s.n[1].out.recvs().is_empty() && s.n[0].out.sends().is_empty());
    for k in 0..3u64 {
        let sgl = s.n[1].mem.sgl(10 + k, dst, k * 1000, 1000);
        s.n[1].rq.q.push_back(Recv { wr_id: 10 + k, sgl, len: 1000 });
    }
    assert!(s.run(100_000, |s| s.n[0].out.sends().len() == 3));
    assert_eq!(s.n[1].out.recvs().len(), 3);
    for k in 0..3u64 {
        assert_eq!(s.n[1].mem.bytes(Sgl(10 + k)), &pattern(k, 1000)[..]);
    }
}

#[test]
fn rnr_retry_exceeded_after_rnr_retry_plus_one_naks() {
    let mut c = cfg();
    c.rnr_retry = 2;
    c.min_rnr_timer = 1;
    let mut s = Sim::new(c, 32, Faults::NONE);
    let src = s.n[0].mem.region(1, 0, 100, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, 10);
    s.post(0, wr(0, WrOp::Send, sgl, 10));
    s.post(0, wr(1, WrOp::Send, sgl, 10));
    assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 2));
    let st: Vec<Status> = s.n[0].out.sends().iter().map(|c| c.status).collect();
    assert_eq!(st, [Status::RnrRetryExcErr, Status::WrFlushErr]);
    let first = s.sent_by(0).iter().filter(|p| p.bth.psn() == 100).count();
    assert_eq!(first, 3, "sent once and resent rnr_retry (2) times");
    assert!(s.n[0].qp.is_error() && !s.n[1].qp.is_error(), "RNR is not a responder error");
}

#[test]
fn timeout_retry_exceeded_when_the_wire_drops_everything() {
    for retry_cnt in [0u8, 1, 3, 7] {
        let mut c = cfg();
        c.retry_cnt = retry_cnt;
        c.timeout = 10; // 4.19 ms
        let f = Faults { drop: 100, ..Faults::NONE };
        let mut s = Sim::new(c, 40, f);
        let src = s.n[0].mem.region(1, 0, 5000, RW);
        let sgl = s.n[0].mem.sgl(0, src, 0, 3000);
        s.post(0, wr(0, WrOp::Send, sgl, 3000));
        s.post(0, wr(1, WrOp::Write, sgl, 10));
        assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 2));
        let st: Vec<Status> = s.n[0].out.sends().iter().map(|c| c.status).collect();
        assert_eq!(st, [Status::RetryExcErr, Status::WrFlushErr]);
        let first = s.sent_by(0).iter().filter(|p| p.bth.psn() == 100).count();
        assert_eq!(first, usize::from(retry_cnt) + 1, "retry_cnt {retry_cnt}");
        let t = ack_timeout_ns(10).unwrap();
        assert_eq!(s.now, t * (u64::from(retry_cnt) + 1), "one timeout per try, virtual clock");
    }
}

#[test]
fn timeout_zero_never_gives_up() {
    let mut c = cfg();
    c.timeout = 0;
    let mut s = Sim::new(c, 41, Faults { drop: 100, ..Faults::NONE });
    let src = s.n[0].mem.region(1, 0, 10, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, 10);
    s.post(0, wr(0, WrOp::Send, sgl, 10));
    s.run(1000, |_| false);
    assert!(s.n[0].out.sends().is_empty() && s.n[0].qp.next_deadline().is_none());
}

#[test]
fn bad_rkey_remote_access_error_and_responder_in_error() {
    let mut s = Sim::new(cfg(), 50, Faults::NONE);
    let src = s.n[0].mem.region(1, 0, 5000, RW);
    let _ro = s.n[1].mem.region(0x99, 0x1000, 4096, (true, false, false));
    let sgl = s.n[0].mem.sgl(0, src, 0, 3000);
    let mut w = wr(0, WrOp::Write, sgl, 3000);
    (w.remote_va, w.rkey) = (0x1000, 0x98); // no such key
    s.post(0, w);
    s.post(0, wr(1, WrOp::Send, sgl, 10));
    assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 2));
    let st: Vec<Status> = s.n[0].out.sends().iter().map(|c| c.status).collect();
    assert_eq!(st, [Status::RemAccessErr, Status::WrFlushErr]);
    assert!(s.n[1].qp.is_error());
    assert_eq!(s.n[1].out.events, [QpEvent::QpAccessErr]);
    assert_eq!(s.n[1].mem.remote_writes, 0);
}

/// Each way a WRITE or READ can miss its region: error at the requester, nothing written.
#[test]
fn remote_access_errors_each_kind() {
    let ro = (true, false, false);
    let wo = (false, true, false);
    // (op, rkey, va, len): wrong key, write to read-only, read of write-only, past the end,
    // before the start, atomic without rights, misaligned atomic.
    let cases: [(WrOp, u32, u64, u32); 7] = [
        (WrOp::Write, 0x98, 0x1000, 16),
        (WrOp::Write, 0x99, 0x1000, 16),
        (WrOp::Read, 0x9a, 0x2000, 16),
        (WrOp::Write, 0x9a, 0x2000 + 4090, 16),
        (WrOp::Read, 0x99, 0x0ff0, 32),
        (WrOp::FetchAdd { add: 1 }, 0x99, 0x1000, 8),
        (WrOp::FetchAdd { add: 1 }, 0x9b, 0x3004, 8),
    ];
    for (k, (o, rkey, va, len)) in cases.into_iter().enumerate() {
        let mut s = Sim::new(cfg(), 51 + k as u64, Faults::NONE);
        let src = s.n[0].mem.region(1, 0, 5000, RW);
        s.n[1].mem.region(0x99, 0x1000, 4096, ro);
        s.n[1].mem.region(0x9a, 0x2000, 4096, wo);
        s.n[1].mem.region(0x9b, 0x3000, 4096, RW);
        let sgl = s.n[0].mem.sgl(0, src, 0, u64::from(len));
        let mut w = wr(0, o, sgl, len);
        (w.remote_va, w.rkey) = (va, rkey);
        s.post(0, w);
        assert!(s.run(10_000, |s| !s.n[0].out.sends().is_empty()), "case {k}");
        assert_eq!(s.n[0].out.sends()[0].status, Status::RemAccessErr, "case {k}");
        assert_eq!(s.n[1].out.events, [QpEvent::QpAccessErr], "case {k}");
        assert_eq!(s.n[1].mem.remote_writes + s.n[1].mem.atomics, 0, "case {k}");
    }
}

/// An earlier READ whose response is lost completes before later SENDs that were ACKed.
#[test]
fn completions_in_posting_order_across_a_lost_read_response() {
    let mut s = Sim::new(cfg(), 60, Faults::NONE);
    let l = s.n[0].mem.region(1, 0, 8192, RW);
    let r = s.n[1].mem.region(0x44, 0x5000, 4096, RW);
    s.n[1].mem.regions[r].data.fill(0xab);
    let dst = s.n[1].mem.region(2, 0, 4096, RW);
    let rsgl = s.n[0].mem.sgl(0, l, 0, 2000);
    let mut w = wr(0, WrOp::Read, rsgl, 2000);
    (w.remote_va, w.rkey) = (0x5000, 0x44);
    s.post(0, w);
    let ssgl = s.n[0].mem.sgl(1, l, 4096, 100);
    for k in 1..4 {
        let rs = s.n[1].mem.sgl(10 + k, dst, 0, 100);
        s.n[1].rq.q.push_back(Recv { wr_id: 10 + k, sgl: rs, len: 100 });
        s.post(0, wr(k, WrOp::Send, ssgl, 100));
    }
    let mut dropped = 0;
    s.cut = Some(Box::new(move |from, p| {
        let cut = from == 1 && p.bth.opcode() == op::READ_RESPONSE_FIRST && dropped == 0;
        dropped += u32::from(cut);
        cut
    }));
    assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 4));
    let ids: Vec<u64> = s.n[0].out.sends().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert!(s.n[0].out.sends().iter().all(|c| c.status == Status::Success));
    assert_eq!(s.n[0].mem.bytes(rsgl), &[0xab; 2000][..]);
}

/// A READ whose middle response packet is lost is re-requested from that packet on only.
#[test]
fn retransmitted_read_asks_only_for_what_is_missing() {
    let mut s = Sim::new(cfg(), 61, Faults::NONE);
    let l = s.n[0].mem.region(1, 0, 8192, RW);
    let r = s.n[1].mem.region(0x44, 0x5000, 8192, RW);
    let data = pattern(9, 5000);
    s.n[1].mem.regions[r].data[..5000].copy_from_slice(&data);
    let rsgl = s.n[0].mem.sgl(0, l, 0, 5000);
    let mut w = wr(0, WrOp::Read, rsgl, 5000); // 5 responses at MTU 1024
    (w.remote_va, w.rkey) = (0x5000, 0x44);
    s.post(0, w);
    let mut dropped = false;
    s.cut = Some(Box::new(move |from, p| {
        let cut = from == 1 && p.bth.psn() == 102 && !dropped;
        dropped |= cut;
        cut
    }));
    assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 1));
    assert_eq!(s.n[0].out.sends()[0].status, Status::Success);
    assert_eq!(s.n[0].mem.bytes(rsgl), &data[..]);
    let reqs: Vec<(u32, u64, u32)> = s
        .sent_by(0)
        .iter()
        .filter_map(|p| p.ext.reth.map(|r| (p.bth.psn(), r.va(), r.len())))
        .collect();
    assert_eq!(reqs, [(100, 0x5000, 5000), (102, 0x5000 + 2048, 5000 - 2048)]);
    let resent = s.sent_by(1).iter().filter(|p| p.bth.psn() == 100 || p.bth.psn() == 101).count();
    assert_eq!(resent, 2, "the packets that arrived were not sent again");
}

/// On the wire: a responder NAKs a gap once (not once per packet after it).
#[test]
fn sequence_error_nak_once_per_gap_end_to_end() {
    let mut c = cfg();
    c.mtu = 256;
    let mut s = Sim::new(c, 70, Faults::NONE);
    let src = s.n[0].mem.region(1, 0, 2560, RW);
    let dst = s.n[1].mem.region(2, 0, 2560, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, 2560);
    let rs = s.n[1].mem.sgl(1, dst, 0, 2560);
    s.n[1].rq.q.push_back(Recv { wr_id: 1, sgl: rs, len: 2560 });
    s.post(0, wr(0, WrOp::Send, sgl, 2560)); // 10 packets
    let mut dropped = false;
    s.cut = Some(Box::new(move |from, p| {
        let cut = from == 0 && p.bth.psn() == 102 && !dropped;
        dropped |= cut;
        cut
    }));
    assert!(s.run(10_000, |s| s.n[0].out.sends().len() == 1));
    let naks: Vec<u32> = s
        .sent_by(1)
        .iter()
        .filter(|p| {
            p.ext.aeth.map(|a| a.syndrome()) == Some(Syndrome::Nak(NakCode::PsnSequenceError))
        })
        .map(|p| p.bth.psn())
        .collect();
    assert_eq!(naks, [102], "one NAK for the gap, naming the missing PSN");
    assert_eq!(s.n[1].out.recvs().len(), 1);
}

/// A window smaller than the ACK interval: the packet at the window's edge asks for an ACK, so
/// a long message flows without waiting for a timeout.
#[test]
fn small_window_asks_for_acks_at_its_edge() {
    let mut c = cfg();
    c.window = 4;
    c.mtu = 256;
    let s = sends_arrive_exactly_once(c, &[20 * 256], 80, Faults::NONE);
    assert!(s.now < ack_timeout_ns(c.timeout).unwrap(), "no retransmission timeout was needed");
    let resent = s.sent_by(0).len();
    assert_eq!(resent, 20, "every packet sent once");
}

/// Responses that do not fit what is outstanding change nothing; the right ones then complete.
#[test]
fn forged_responses_are_dropped() {
    use crate::provider::soft::roce::Aeth;
    let c = cfg();
    let mut qp = RcQp::new(&c);
    let mut mem = TestMem::default();
    let l = mem.region(1, 0, 4096, RW);
    let sgl = mem.sgl(0, l, 0, 2000);
    let mut out = TestOut::new(flows().0);
    let mut rq = TestRq::default();
    let w = SendWr { remote_va: 0x5000, rkey: 0x44, ..wr(0, WrOp::Read, sgl, 2000) };
    qp.post(w, &mut out).unwrap();
    qp.poll(0, &mut mem, &mut out);
    let ack = Aeth::new(Syndrome::Ack { credits: 31 }, 1);
    let resp = |code: u8, psn: u32, payload: &'static [u8], aeth: bool| {
        let mut p = Packet::new(code, 0x11, psn, payload);
        p.ext.aeth = aeth.then_some(ack);
        p
    };
    static A: [u8; 1024] = [0xa1; 1024];
    static B: [u8; 976] = [0xb2; 976];
    let forged = [
        resp(op::ACK, 300, &[], true), // a PSN never sent
        resp(op::READ_RESPONSE_FIRST, 100, &A[..1000], true), // short
        resp(op::READ_RESPONSE_ONLY, 100, &A, true), // wrong position
        resp(op::READ_RESPONSE_LAST, 101, &B, true), // ahead of the first
        resp(op::ATOMIC_ACK, 100, &[], true), // not an atomic (no AtomicAckETH)
        resp(op::READ_RESPONSE_FIRST, 99, &A, true), // behind
    ];
    for p in &forged {
        qp.on_packet(p, 1, &mut mem, &mut rq, &mut out);
    }
    assert!(out.completions.is_empty() && !qp.is_error());
    assert!(mem.bytes(sgl).iter().all(|b| *b == 0), "nothing placed");
    qp.on_packet(&resp(op::READ_RESPONSE_FIRST, 100, &A, true), 2, &mut mem, &mut rq, &mut out);
    qp.on_packet(&resp(op::READ_RESPONSE_LAST, 101, &B, true), 3, &mut mem, &mut rq, &mut out);
    assert_eq!(out.sends().len(), 1);
    assert_eq!(out.sends()[0].status, Status::Success);
    assert_eq!(&mem.bytes(sgl)[..1024], &A[..]);
    assert_eq!(&mem.bytes(sgl)[1024..], &B[..]);
    // In error, a post completes at once with a flush error.
    qp.req.fail(Status::RemOpErr, &mut out);
    qp.post(wr(5, WrOp::Send, sgl, 1), &mut out).unwrap();
    assert_eq!(out.sends()[1].status, Status::WrFlushErr);
}

/// No more than `max_rd_atomic` READs/atomics are outstanding; each answer lets one more go.
#[test]
fn max_rd_atomic_bounds_outstanding_reads_and_atomics() {
    use crate::provider::soft::roce::{Aeth, AtomicAckEth};
    let mut c = cfg();
    c.max_rd_atomic = 2;
    let mut qp = RcQp::new(&c);
    let mut mem = TestMem::default();
    let l = mem.region(1, 0, 4096, RW);
    let mut out = TestOut::new(flows().0);
    let mut rq = TestRq::default();
    for k in 0..5u64 {
        let sgl = mem.sgl(k, l, k * 8, 8);
        let o = if k % 2 == 0 { WrOp::Read } else { WrOp::FetchAdd { add: 1 } };
        qp.post(SendWr { remote_va: 0x5000, rkey: 0x44, ..wr(k, o, sgl, 8) }, &mut out).unwrap();
    }
    qp.poll(0, &mut mem, &mut out);
    let psns = |out: &TestOut| out.decoded().iter().map(|p| p.bth.psn()).collect::<Vec<_>>();
    assert_eq!(psns(&out), [100, 101], "two outstanding");
    let ack = Aeth::new(Syndrome::Ack { credits: 31 }, 1);
    let mut r = Packet::new(op::READ_RESPONSE_ONLY, 0x11, 100, &[7; 8]);
    r.ext.aeth = Some(ack);
    qp.on_packet(&r, 1, &mut mem, &mut rq, &mut out);
    assert_eq!(psns(&out), [100, 101, 102], "one answer, one more request");
    let mut a = Packet::new(op::ATOMIC_ACK, 0x11, 101, &[]);
    a.ext.aeth = Some(ack);
    a.ext.atomic_ack = Some(AtomicAckEth::new(42));
    qp.on_packet(&a, 2, &mut mem, &mut rq, &mut out);
    assert_eq!(psns(&out), [100, 101, 102, 103]);
    assert_eq!(out.sends().iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(mem.bytes(Sgl(1)), &42u64.to_ne_bytes());
}

/// Zero-length SEND, WRITE and READ complete without naming local memory (an empty list).
#[test]
fn zero_length_requests_need_no_local_list() {
    let mut s = Sim::new(cfg(), 90, Faults::NONE);
    let dst = s.n[1].mem.region(2, 0, 64, RW);
    let rs = s.n[1].mem.sgl(5, dst, 0, 64);
    s.n[1].rq.q.push_back(Recv { wr_id: 5, sgl: rs, len: 64 });
    let none = Sgl(999); // not a list the memory layer knows
    s.post(0, wr(0, WrOp::Send, none, 0));
    s.post(0, wr(1, WrOp::Write, none, 0));
    s.post(0, wr(2, WrOp::Read, none, 0));
    assert!(s.run(1000, |s| s.n[0].out.sends().len() == 3));
    assert!(s.n[0].out.sends().iter().all(|c| c.status == Status::Success));
    assert_eq!(s.n[0].mem.local_refused, 0);
    assert_eq!(s.n[1].out.recvs()[0].byte_len, 0);
}

/// Both directions at once, every operation mixed at random sizes, under loss, duplication and
/// reordering: everything completes in order, exactly once, byte-exact.
#[test]
fn mixed_bidirectional_workload_under_loss() {
    for seed in [100u64, 101, 102] {
        let mut c = cfg();
        c.mtu = [256, 1024, 4096][seed as usize % 3];
        c.sq_psn = psn::PSN_MASK - 300; // and across the wrap
        c.max_rd_atomic = 4;
        c.max_dest_rd_atomic = 4;
        let mut s = Sim::new(c, seed, Faults::LOSSY);
        let mut rng = Rng::new(seed);
        const N: u64 = 120;
        const SLOT: u64 = 20_000;
        for i in 0..2 {
            s.n[i].mem.region(1, 0, (N * SLOT) as usize, RW); // local sources/destinations
            s.n[i].mem.region(0x50, 0x100_0000, (N * SLOT) as usize, RW); // remote target
            s.n[i].mem.region(0x60, 0x200_0000, 8, RW); // atomic counter
            s.n[i].mem.region(2, 0, (N * SLOT) as usize, RW); // receives
        }
        // Node 1's remote target starts with a pattern (READs read it, WRITEs go elsewhere).
        let src = pattern(seed, (N * SLOT) as usize);
        s.n[1].mem.regions[1].data.copy_from_slice(&src);
        let mut expect = vec![]; // (node, wr_id, op, len)
        for i in 0..2 {
            for k in 0..N {
                let len = match rng.below(4) {
                    0 => rng.below(8),
                    1 => rng.below(2000),
                    _ => rng.below(SLOT),
                } as u32;
                let o = match (i, rng.below(6)) {
                    (1, _) | (0, 0 | 1) => WrOp::Send,
                    (0, 2) => WrOp::Write,
                    (0, 3) => WrOp::Read,
                    (0, 4) => WrOp::FetchAdd { add: 1 },
                    _ => WrOp::SendImm(k as u32),
                };
                let len = if o.is_atomic() { 8 } else { len };
                let sgl = s.n[i].mem.sgl(k, 0, k * SLOT, len.into());
                if o != WrOp::Read && !o.is_atomic() {
                    let d = pattern(seed * 1000 + k + 500 * i as u64, len as usize);
                    s.n[i].mem.bytes_mut(sgl).copy_from_slice(&d);
                }
                // WRITEs land at slot k of node 1's target, past READ's source (checked below).
                let (va, rkey) = match o {
                    WrOp::FetchAdd { .. } => (0x200_0000, 0x60),
                    _ => (0x100_0000 + k * SLOT, 0x50),
                };
                let w = SendWr { remote_va: va, rkey, ..wr(k, o, sgl, len) };
                if matches!(o, WrOp::Send | WrOp::SendImm(_)) {
                    let peer = 1 - i;
                    let rs = s.n[peer].mem.sgl(10_000 + k, 3, k * SLOT, SLOT);
                    s.n[peer].rq.q.push_back(Recv { wr_id: 10_000 + k, sgl: rs, len: SLOT as u32 });
                }
                s.post(i, w);
                expect.push((i, k, o, len));
            }
        }
        assert!(
            s.run(5_000_000, |s| s.n[0].out.sends().len() == N as usize
                && s.n[1].out.sends().len() == N as usize),
            "seed {seed}: all complete"
        );
        let mut adds = vec![];
        for &(i, k, o, len) in &expect {
            let c = s.n[i].out.sends()[k as usize];
            assert_eq!((c.wr_id, c.status), (k, Status::Success), "seed {seed} node {i} in order");
            let mine = s.n[i].mem.bytes(Sgl(k)).to_vec();
            match o {
                WrOp::Send | WrOp::SendImm(_) => {
                    let peer = 1 - i;
                    let got = s.n[peer].mem.bytes(Sgl(10_000 + k));
                    assert_eq!(&got[..len as usize], &mine[..], "seed {seed} SEND {i}/{k}");
                }
                WrOp::Write => {
                    let at = (k * SLOT) as usize;
                    assert_eq!(&s.n[1].mem.regions[1].data[at..at + len as usize], &mine[..]);
                }
                WrOp::Read => {
                    let at = (k * SLOT) as usize;
                    assert_eq!(&mine[..], &src[at..at + len as usize], "seed {seed} READ {k}");
                }
                _ => adds.push(u64::from_ne_bytes(mine[..8].try_into().unwrap())),
            }
        }
        // Receives: each exactly once, in posting order, per direction.
        for i in 0..2 {
            let ids: Vec<u64> = s.n[i].out.recvs().iter().map(|c| c.wr_id).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(ids, sorted, "seed {seed}: receives once, in order");
        }
        adds.sort();
        assert_eq!(
            adds,
            (0..adds.len() as u64).collect::<Vec<_>>(),
            "seed {seed}: atomics once each"
        );
        assert_eq!(s.n[1].mem.atomics as usize, adds.len());
    }
}
