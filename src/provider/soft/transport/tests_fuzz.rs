//! Random well-formed and malformed packets against a responder and a requester: they must
//! never panic, never ask for local memory outside a list, never write a region that grants no
//! remote write, and never emit a packet the codec refuses (the harness encodes each one).

use super::harness::*;
use super::*;
use crate::provider::soft::roce::opcode::{op, Transport, TABLE};
use crate::provider::soft::roce::{
    self, Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth, Syndrome, XrcEth,
};

const RKEY: u32 = 0x77;
const GUARD: u32 = 0x78;
const VA: u64 = 0x1_0000;

/// A QP on `t` with receives posted and requests of every kind outstanding (UC: SENDs and
/// WRITEs only, and they complete as they go out).
fn target_of(rng: &mut Rng, t: Transport) -> (RcQp, TestMem, TestRq, TestOut) {
    let mut c = RcConfig::new(0x22, 0x11, 1000, 500);
    c.transport = t;
    c.mtu = 256;
    c.max_dest_rd_atomic = 2;
    c.window = 16;
    let mut mem = TestMem::default();
    mem.region(RKEY, VA, 4096, (true, true, true));
    mem.region(GUARD, VA + 4096, 4096, (true, false, false));
    let local = mem.region(1, 0, 8 * 1024, (false, false, false));
    let mut rq = TestRq::default();
    for k in 0..8u64 {
        let sgl = mem.sgl(k, local, k * 1024, 1024);
        rq.q.push_back(Recv { wr_id: k, sgl, len: 1024 - rng.below(3) as u32 * 300 });
    }
    let mut out = TestOut::new(flows().1);
    let mut qp = RcQp::new(&c);
    let ops = [WrOp::Send, WrOp::Read, WrOp::FetchAdd { add: 1 }, WrOp::Write, WrOp::Read];
    let uc = t == Transport::Uc;
    for (k, o) in ops.into_iter().filter(|o| !(uc && o.is_rd_atomic())).enumerate() {
        let len = if o.is_atomic() { 8 } else { 700 };
        let w = SendWr { remote_va: VA, rkey: RKEY, ..wr(k as u64, o, Sgl(k as u64), len) };
        qp.post(w, &mut out).unwrap();
    }
    qp.poll(0, &mut mem, &mut out);
    (qp, mem, rq, out)
}

/// A packet of a random opcode (sometimes one the QP should never see) with fields near the
/// interesting values.
fn random_packet<'a>(rng: &mut Rng, payload: &'a [u8]) -> Packet<'a> {
    let code = if rng.pct(90) {
        TABLE[rng.below(TABLE.len() as u64) as usize].code
    } else {
        op::RC | 0x15
    };
    let near = |rng: &mut Rng, base: u32| base.wrapping_add(rng.below(12) as u32).wrapping_sub(4);
    let psn = if rng.pct(50) { near(rng, 500) } else { near(rng, 1000) };
    let mut p = Packet::new(code, if rng.pct(95) { 0x22 } else { rng.next() as u32 }, psn, payload);
    p.bth.set_ack_req(rng.pct(50));
    p.bth.set_se(rng.pct(20));
    let va = match rng.below(4) {
        0 => VA + rng.below(4096),
        1 => VA + 4096 - rng.below(300),
        2 => rng.next(),
        _ => VA,
    };
    let rkey = [RKEY, GUARD, 0, rng.next() as u32][rng.below(4) as usize];
    let len = [rng.below(5000) as u32, 256, 700, u32::MAX, 0][rng.below(5) as usize];
    if let Some(info) = p.info() {
        use crate::provider::soft::roce::opcode::Ext;
        for h in info.headers {
            match h {
                Ext::XrcEth => p.ext.xrc = Some(XrcEth::new(rng.below(4) as u32)),
                Ext::Reth => p.ext.reth = Some(Reth::new(va, rkey, len)),
                Ext::AtomicEth => {
                    p.ext.atomic = Some(AtomicEth::new(va, rkey, rng.next(), rng.next()))
                }
                Ext::Aeth => {
                    let syn = [0u8, 0x1f, 0x21, 0x60, 0x61, 0x62, 0x63, 0x64, 0x70, 0x80, 0x40]
                        [rng.below(11) as usize];
                    p.ext.aeth = Some(Aeth::new(Syndrome::from_byte(syn), rng.below(4) as u32));
                }
                Ext::AtomicAckEth => p.ext.atomic_ack = Some(AtomicAckEth::new(rng.next())),
                Ext::Deth => p.ext.deth = Some(Deth::new(rng.next() as u32, rng.next() as u32)),
                Ext::ImmDt => p.ext.imm = Some(ImmDt::new(rng.next() as u32)),
                Ext::Ieth => p.ext.ieth = Some(Ieth::new(rkey)),
            }
        }
        if !info.payload {
            p.payload = &[];
        }
    }
    p
}

/// After a round: the region that grants no remote write is untouched, and no local access
/// went beyond a list.
fn memory_kept(mem: &TestMem, round: u32) {
    assert!(mem.regions[1].data.iter().all(|b| *b == 0), "round {round}: read-only region written");
    assert_eq!(mem.local_refused, 0, "round {round}: local access beyond a list");
}

/// `p` as the same operation on transport `t` (one `t` has), its headers refilled for that
/// opcode near the interesting values (XRC: SRQ numbers 0..3, so messages change SRQ).
fn retarget(rng: &mut Rng, p: &mut Packet<'_>, t: Transport) {
    use crate::provider::soft::roce::opcode::{lookup, Ext};
    let code = t.base() | (p.bth.opcode() & op::OPERATION);
    let Some(info) = lookup(code) else { return };
    p.bth.set_opcode(code);
    let (va, rkey) = (VA + rng.below(4096), [RKEY, GUARD][rng.below(2) as usize]);
    let len = [rng.below(5000) as u32, 256, 700][rng.below(3) as usize];
    p.ext.reth = info.has(Ext::Reth).then(|| Reth::new(va, rkey, len));
    p.ext.imm = info.has(Ext::ImmDt).then(|| ImmDt::new(rng.next() as u32));
    p.ext.xrc = info.has(Ext::XrcEth).then(|| XrcEth::new(rng.below(3) as u32));
}

#[test]
fn random_packets_never_panic_nor_reach_outside_memory() {
    for t in [Transport::Rc, Transport::Xrc] {
        random_packets_into(t);
    }
}

/// Random packets into a connected QP on `t` (XRC: 80% of them XRC, retargeted).
fn random_packets_into(t: Transport) {
    let mut rng = Rng::new(0x5eed);
    let mut payload = vec![0u8; 600];
    let mut errors = 0;
    for round in 0..3000 {
        let (mut qp, mut mem, mut rq, mut out) = target_of(&mut rng, t);
        for step in 0..40 {
            rng.fill(&mut payload);
            let n = [0, 1, 255, 256, 257, 300, 600][rng.below(7) as usize];
            let mut p = random_packet(&mut rng, &payload[..n]);
            if t != Transport::Rc && rng.pct(80) {
                retarget(&mut rng, &mut p, t);
            }
            qp.on_packet(&p, step * 1000, &mut mem, &mut rq, &mut out);
            qp.poll(step * 1000 + rng.below(1 << 30), &mut mem, &mut out);
        }
        memory_kept(&mem, round);
        assert!(out.events.len() <= 1, "round {round}: one error, one event");
        // Completions: each posted request at most once.
        let mut ids: Vec<u64> = out.sends().iter().map(|c| c.wr_id).collect();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "round {round}: a request completed twice");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "round {round}: completions out of order");
        errors += usize::from(qp.is_error());
    }
    assert!(
        errors > 100 && errors < 3000,
        "{t:?}: the random input reached both outcomes ({errors})"
    );
}

/// The same against a UC QP, which answers nothing: no panic, no memory outside what was
/// given, no packet out but its own requests, and never an error (a UC responder drops what it
/// cannot take).
#[test]
fn random_packets_into_a_uc_qp() {
    let mut rng = Rng::new(0xc0ffee);
    let mut payload = vec![0u8; 600];
    let mut placed = 0;
    for round in 0..2000 {
        let (mut qp, mut mem, mut rq, mut out) = target_of(&mut rng, Transport::Uc);
        let own = out.packets.len();
        for step in 0..40 {
            rng.fill(&mut payload);
            let n = [0, 1, 255, 256, 257, 300, 600][rng.below(7) as usize];
            let mut p = random_packet(&mut rng, &payload[..n]);
            if rng.pct(80) {
                // Mostly UC opcodes (the rest must be dropped as another transport's).
                retarget(&mut rng, &mut p, Transport::Uc);
            }
            qp.on_packet(&p, step * 1000, &mut mem, &mut rq, &mut out);
            qp.poll(step * 1000 + rng.below(1 << 30), &mut mem, &mut out);
        }
        memory_kept(&mem, round);
        assert!(!qp.is_error() && out.events.is_empty(), "round {round}: a UC QP failed");
        assert_eq!(out.packets.len(), own, "round {round}: a UC responder answered");
        placed += out.recvs().iter().filter(|c| c.status == Status::Success).count();
    }
    assert!(placed > 100, "the random input reached the placement paths ({placed})");
}

/// Arbitrary bytes through the decoder, then into the QP: nothing may panic.
#[test]
fn random_bytes_through_the_decoder() {
    let mut rng = Rng::new(77);
    let mut buf = vec![0u8; 400];
    let mut fed = 0;
    for _ in 0..200 {
        let (mut qp, mut mem, mut rq, mut out) = target_of(&mut rng, Transport::Rc);
        for _ in 0..100 {
            let n = (rng.below(100) as usize + 16) & !3;
            rng.fill(&mut buf[..n]);
            buf[0] = TABLE[rng.below(TABLE.len() as u64) as usize].code;
            buf[1] &= 0xf0; // TVer 0
            buf[5..8].copy_from_slice(&[0, 0, 0x22]);
            buf[4] &= 0xc0;
            if let Ok(p) = roce::decode_unverified(&buf[..n]) {
                fed += 1;
                qp.on_packet(&p, 0, &mut mem, &mut rq, &mut out);
            }
        }
        assert_eq!(mem.local_refused, 0);
        assert!(mem.regions[1].data.iter().all(|b| *b == 0));
    }
    assert!(fed > 1000, "most inputs decoded ({fed})");
}

#[test]
fn random_packets_into_a_ud_qp() {
    let mut rng = Rng::new(99);
    let mut payload = vec![0u8; 1100];
    let mut mem = TestMem::default();
    let local = mem.region(1, 0, 8 * 1024, (false, false, false));
    let mut rq = TestRq::default();
    let mut out = TestOut::new(flows().1);
    let mut qp = ud::UdQp::new(0x22, 0x1234, 1024);
    let mut delivered = 0;
    for k in 0..20_000u64 {
        if rq.q.len() < 4 {
            let sgl = mem.sgl(k % 8, local, (k % 8) * 1024, 1024);
            rq.q.push_back(Recv { wr_id: k, sgl, len: 1024 - rng.below(2) as u32 * 1000 });
        }
        rng.fill(&mut payload);
        let n = [0, 1, 983, 984, 985, 1024, 1025, 1100][rng.below(8) as usize];
        let mut p = random_packet(&mut rng, &payload[..n]);
        // Half of them UD (the table has many more connected opcodes).
        let want_ud = rng.pct(50);
        while want_ud && !p.info().is_some_and(|i| i.transport == Transport::Ud) {
            p = random_packet(&mut rng, &payload[..n]);
        }
        if let Some(d) = p.ext.deth.as_mut() {
            if rng.pct(50) {
                *d = Deth::new(0x1234, d.src_qp());
            }
        }
        qp.on_packet(&p, &mut mem, &mut rq, &mut out);
        delivered = out.completions.iter().filter(|c| c.status == Status::Success).count();
    }
    assert_eq!(mem.local_refused, 0);
    assert!(out
        .completions
        .iter()
        .all(|c| c.status != Status::Success || (c.grh && c.byte_len <= 1024)));
    assert!(delivered > 100, "some packets were well-formed enough to arrive ({delivered})");
}
