//! c-tests/net_stream.c's one-sided phase on the simulated wire: RDMA WRITEs of varying size
//! cover a remote area, READs of other sizes bring it back, at most 16 requests outstanding,
//! with the network path's settings (path MTU 4096, two READs/atomics in flight). Under loss,
//! duplication and reordering every request must complete and the bytes must match.

use super::harness::*;
use super::*;

const RW: (bool, bool, bool) = (true, true, true);
const RKEY: u32 = 0x77;
const VA: u64 = 0x4000_0000;
const DEPTH: usize = 16;

fn net_config() -> RcConfig {
    let mut c = RcConfig::new(0x11, 0x22, 0xff_ff00, 0x321);
    c.mtu = 4096;
    c.max_rd_atomic = 2;
    c.max_dest_rd_atomic = 4;
    c
}

/// Posts `reqs` (op, offset, length) keeping at most `DEPTH` outstanding; returns whether all
/// completed successfully (the simulation stops at the first failure or when nothing moves).
fn stream(s: &mut Sim, reqs: &[(WrOp, u64, u32)], local: usize, back: usize) -> bool {
    let mut next = 0;
    let mut idle = 0;
    while s.n[0].out.sends().len() < reqs.len() && !s.n[0].qp.is_error() && idle < 50 {
        while next < reqs.len() && next - s.n[0].out.sends().len() < DEPTH {
            let (op, off, len) = reqs[next];
            let region = if op == WrOp::Read { back } else { local };
            let sgl = s.n[0].mem.sgl(next as u64 + 1, region, off, len.into());
            let mut r = wr(next as u64, op, sgl, len);
            (r.remote_va, r.rkey) = (VA + off, RKEY);
            s.post(0, r);
            next += 1;
        }
        let before = s.n[0].out.sends().len();
        let moved = s.run(200_000, |s| s.n[0].out.sends().len() != before || s.n[0].qp.is_error());
        idle = if moved { 0 } else { idle + 1 };
    }
    let sends = s.n[0].out.sends();
    sends.len() == reqs.len() && sends.iter().all(|c| c.status == Status::Success)
}

/// WRITEs then READs over an area of `area` bytes, sized as net_stream sizes them.
fn write_then_read(seed: u64, faults: Faults, area: u32) {
    write_then_read_in(Sim::new(net_config(), seed, faults), seed, area);
}

fn write_then_read_in(mut s: Sim, seed: u64, area: u32) {
    let local = s.n[0].mem.region(1, 0, area as usize, RW);
    let back = s.n[0].mem.region(2, 0, area as usize, RW);
    s.n[1].mem.region(RKEY, VA, area as usize, RW);
    let mut content = vec![0; area as usize];
    s.rng.fill(&mut content);
    s.n[0].mem.regions[local].data = content;
    let mut reqs = vec![];
    let (mut off, mut i) = (0u32, 0u32);
    while off < area {
        let len = (1 + i.wrapping_mul(104_729) % 65_536).min(area - off);
        reqs.push((WrOp::Write, u64::from(off), len));
        (off, i) = (off + len, i + 1);
    }
    let (mut off, mut i) = (0u32, 0u32);
    while off < area {
        let len = (4096 + i.wrapping_mul(7) % 131_072).min(area - off);
        reqs.push((WrOp::Read, u64::from(off), len));
        (off, i) = (off + len, i + 1);
    }
    let ok = stream(&mut s, &reqs, local, back);
    assert!(
        ok,
        "seed {seed}: {} of {} completed, last {:?}\n{:?}\n{:?}",
        s.n[0].out.sends().len(),
        reqs.len(),
        s.n[0].out.sends().last(),
        s.n[0].qp.req,
        s.n[1].qp.resp
    );
    assert!(s.n[1].mem.regions[0].data == s.n[0].mem.regions[local].data, "seed {seed}: written");
    assert!(s.n[0].mem.regions[back].data == s.n[0].mem.regions[local].data, "seed {seed}: read");
}

#[test]
fn writes_and_reads_clean() {
    write_then_read(1, Faults::NONE, 1 << 20);
}

#[test]
fn writes_and_reads_lossy() {
    for seed in 0..12 {
        write_then_read(seed, Faults::LOSSY, 1 << 20);
    }
}

/// Loss in both directions at once, as an nftables rule on one namespace gives it, with
/// duplicates and reordering beside it.
#[test]
fn writes_and_reads_lossier() {
    let f = Faults { drop: 10, dup: 5, jitter: 50_000, delay: 20_000 };
    for seed in 100..112 {
        write_then_read(seed, f, 1 << 20);
    }
}

/// Receivers that take 3 µs per packet (their queues build up behind bursts), loss, and
/// reordering by up to a millisecond.
#[test]
fn writes_and_reads_busy_receivers() {
    for seed in 200..240 {
        let f = Faults { drop: 10, dup: 5, jitter: 1_000_000, delay: 30_000 };
        let mut s = Sim::new(net_config(), seed, f);
        s.service = 3_000;
        write_then_read_in(s, seed, 1 << 20);
    }
}
