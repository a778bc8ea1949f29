//! Large SENDs as perftest's ib_send_bw moves them across namespaces: many MiB-sized messages
//! back to back through the default window, on lossy wires; whatever the wire does, every
//! message must complete (no RETRY_EXC_ERR while both sides live).

use super::harness::*;
use super::*;

const RW: (bool, bool, bool) = (true, true, true);

/// `n` SENDs of `len` bytes from node 0 to node 1 (one source and one target buffer, as
/// perftest uses), receives posted `batch` at a time whenever the previous ones completed.
fn bulk(seed: u64, faults: Faults, n: u64, len: u32, batch: u64) -> Sim {
    let c = RcConfig::new(0x11, 0x22, 0xff_fff0, 0x12345);
    let mut s = Sim::new(c, seed, faults);
    let src = s.n[0].mem.region(1, 0, len as usize, RW);
    let dst = s.n[1].mem.region(2, 0, len as usize, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, len.into());
    let rsgl = s.n[1].mem.sgl(1, dst, 0, len.into());
    for m in 0..n {
        s.post(0, wr(m, WrOp::Send, sgl, len));
    }
    let mut posted = 0;
    let mut idle = 0;
    while s.n[0].out.sends().len() < n as usize && !s.n[0].qp.is_error() && idle < 100 {
        let done = s.n[1].out.recvs().len() as u64;
        if posted < n && posted == done {
            for _ in 0..batch.min(n - posted) {
                s.n[1].rq.q.push_back(Recv { wr_id: posted, sgl: rsgl, len });
                posted += 1;
            }
        }
        let before = (s.n[1].out.recvs().len(), s.n[0].out.sends().len());
        let moved = s.run(20_000, |s| {
            (s.n[1].out.recvs().len(), s.n[0].out.sends().len()) != before || s.n[0].qp.is_error()
        });
        idle = if moved { 0 } else { idle + 1 };
    }
    s
}

fn assert_all_sent(s: &Sim, n: u64) {
    let sends = s.n[0].out.sends();
    assert!(
        !s.n[0].qp.is_error() && sends.iter().all(|c| c.status == Status::Success),
        "requester failed: {:?} / {:?}, last completion {:?}",
        s.n[0].qp.req,
        s.n[1].qp.resp,
        sends.last()
    );
    assert_eq!(sends.len() as u64, n);
    assert_eq!(s.n[1].out.recvs().len() as u64, n);
}

#[test]
fn bulk_sends_clean() {
    let s = bulk(1, Faults::NONE, 8, 1 << 20, 8);
    assert_all_sent(&s, 8);
}

#[test]
fn bulk_sends_lossy_with_rnr() {
    for seed in 0..3 {
        let s = bulk(seed, Faults::LOSSY, 5, 1 << 19, 2);
        assert_all_sent(&s, 5);
    }
}

/// The flake of `ib_send_bw -a` across namespaces on a loaded host (issue 8): nothing is lost,
/// but the receiver stops for longer than the ACK timeout. The timeout then fired and the
/// requester went back and sent its whole window again; each copy costs the receiver as much
/// as new data, so new packets queued behind ever more duplicates, every ACK came later than
/// the timeout, and after `retry_cnt` + 1 timeouts without progress the sender failed with
/// RETRY_EXC_ERR while both sides were alive. A timeout now resends one packet (asking for an
/// ACK) and the window reopens as ACKs come back.
#[test]
fn slow_receiver_after_a_pause_gets_no_duplicate_flood() {
    let mut c = RcConfig::new(0x11, 0x22, 7, 9);
    c.timeout = 8; // 1.05 ms: a window of 128 packets takes the receiver 1.28 ms
    let mut s = Sim::new(c, 3, Faults::NONE);
    s.service = 20_000;
    s.pause = Some((1, 2_000_000, 4_000_000));
    let (n, len) = (8u64, 1u32 << 20);
    let src = s.n[0].mem.region(1, 0, len as usize, RW);
    let dst = s.n[1].mem.region(2, 0, len as usize, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, len.into());
    let rsgl = s.n[1].mem.sgl(1, dst, 0, len.into());
    for m in 0..n {
        s.n[1].rq.q.push_back(Recv { wr_id: m, sgl: rsgl, len });
        s.post(0, wr(m, WrOp::Send, sgl, len));
    }
    s.run(5_000_000, |s| s.n[0].out.sends().len() == n as usize);
    assert_all_sent(&s, n);
    let sent = s.n[0].qp.req.stats.sent;
    let need = n * u64::from(len / 1024);
    assert!(sent < need + need / 10, "{sent} packets sent for {need}: a duplicate flood");
}

/// A timeout sends one packet, the oldest unacknowledged with AckReq; when its answer shows
/// the receiver had everything, nothing else is sent again.
#[test]
fn a_timeout_resends_one_probe_and_nothing_more_when_nothing_was_lost() {
    let mut c = RcConfig::new(0x11, 0x22, 100, 200);
    c.timeout = 8;
    let mut s = Sim::new(c, 1, Faults::NONE);
    s.cut = Some(Box::new(|from, _| from == 1)); // every response lost for now
    let len = 20 * 1024u32;
    let src = s.n[0].mem.region(1, 0, len as usize, RW);
    let dst = s.n[1].mem.region(2, 0, len as usize, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, len.into());
    let rsgl = s.n[1].mem.sgl(1, dst, 0, len.into());
    s.n[1].rq.q.push_back(Recv { wr_id: 9, sgl: rsgl, len });
    s.post(0, wr(0, WrOp::Send, sgl, len));
    let t = ack_timeout_ns(8).unwrap();
    s.run(100_000, |s| s.now >= 3 * t);
    let sent: Vec<_> = s.sent_by(0).iter().map(|p| (p.bth.psn(), p.bth.ack_req())).collect();
    assert!(sent.len() > 20, "timeouts fired");
    assert!(sent[20..].iter().all(|&p| p == (100, true)), "each timeout: one probe: {sent:?}");
    s.cut = None;
    assert!(s.run(100_000, |s| s.n[0].out.sends().len() == 1));
    assert_all_sent(&s, 1);
    assert_eq!(s.sent_by(0).len(), sent.len(), "the probe's answer showed nothing was lost");
}

/// A lost packet whose NAK is lost too: the responder drops what follows silently, so only a
/// timer helps. The fast timer (a few measured round trips) probes long before the IB timeout,
/// without spending a retry, and the message completes.
#[test]
fn a_lost_nak_is_recovered_by_the_fast_timer_not_the_ib_timeout() {
    let mut c = RcConfig::new(0x11, 0x22, 500, 900);
    c.timeout = 18; // 1.07 s
    let mut s = Sim::new(c, 5, Faults::NONE);
    let len = 16 * 1024u32;
    let src = s.n[0].mem.region(1, 0, len as usize, RW);
    let dst = s.n[1].mem.region(2, 0, len as usize, RW);
    let sgl = s.n[0].mem.sgl(0, src, 0, len.into());
    let rsgl = s.n[1].mem.sgl(1, dst, 0, len.into());
    // A first message measures the round trip.
    s.n[1].rq.q.push_back(Recv { wr_id: 0, sgl: rsgl, len });
    s.post(0, wr(0, WrOp::Send, sgl, len));
    assert!(s.run(100_000, |s| s.n[0].out.sends().len() == 1));
    // The second message loses its third packet, and the NAK that answers the gap.
    let lost = psn::add(500, 16 + 2);
    let (mut dropped_data, mut dropped_nak) = (false, false);
    s.cut = Some(Box::new(move |from, p| {
        if from == 0 && p.bth.psn() == lost && !dropped_data {
            dropped_data = true;
            return true;
        }
        let nak = p.ext.aeth.is_some_and(|a| {
            !matches!(a.syndrome(), crate::provider::soft::roce::Syndrome::Ack { .. })
        });
        if from == 1 && nak && !dropped_nak {
            dropped_nak = true;
            return true;
        }
        false
    }));
    let start = s.now;
    s.n[1].rq.q.push_back(Recv { wr_id: 1, sgl: rsgl, len });
    s.post(0, wr(1, WrOp::Send, sgl, len));
    assert!(s.run(1_000_000, |s| s.n[0].out.sends().len() == 2));
    assert_all_sent(&s, 2);
    let st = s.n[0].qp.req.stats;
    assert_eq!(st.timeouts, 0, "recovered before the IB timeout: {st:?}");
    assert!(st.fast_resends >= 1, "{st:?}");
    assert!(s.now - start < ack_timeout_ns(18).unwrap() / 10, "took {} ns", s.now - start);
}

/// A long READ whose answers stop for a while (the requester is descheduled): the fast timer
/// may ask for it again once, not again and again. A repeated READ makes the responder send
/// every answer not yet acknowledged once more, while the first ones are still coming; across
/// namespaces probing on as the stale copies came in flooded the socket buffers until the READ
/// failed with RETRY_EXC_ERR (ib_read_bw -a).
#[test]
fn a_late_long_read_is_asked_for_again_at_most_once_by_the_fast_timer() {
    let mut c = RcConfig::new(0x11, 0x22, 700, 800);
    c.timeout = 18; // 1.07 s
    let mut s = Sim::new(c, 9, Faults::NONE);
    s.service = 1_000; // each receiver takes 1 µs per packet
    let len = 1u32 << 20;
    let remote = s.n[1].mem.region(0x77, 0x4000_0000, len as usize, RW);
    let local = s.n[0].mem.region(1, 0, len as usize, RW);
    let _ = remote;
    let read = |s: &mut Sim, id: u64, n: u32| {
        let sgl = s.n[0].mem.sgl(id, local, 0, n.into());
        let mut r = wr(id, WrOp::Read, sgl, n);
        (r.remote_va, r.rkey) = (0x4000_0000, 0x77);
        s.post(0, r);
    };
    // A short READ measures the round trip.
    read(&mut s, 0, 4096);
    assert!(s.run(100_000, |s| s.n[0].out.sends().len() == 1));
    // The long one's answers wait 10 ms at the requester, far beyond the fast interval.
    s.pause = Some((0, s.now + 50_000, s.now + 10_000_000));
    read(&mut s, 1, len);
    assert!(s.run(1_000_000, |s| s.n[0].out.sends().len() == 2));
    assert!(s.n[0].out.sends().iter().all(|c| c.status == Status::Success));
    let st = s.n[0].qp.req.stats;
    assert!(st.fast_resends <= 1 && st.timeouts == 0, "{st:?}");
    let responses = s.sent_by(1).iter().filter(|p| p.bth.opcode() != op::ACK).count();
    assert!(responses <= 4 + 2 * 1024, "{responses} answers: asked again more than once");
}
