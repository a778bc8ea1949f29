//! Test harness: in-memory implementations of the engine's traits, a seeded RNG, and a
//! simulated lossy wire (drop, duplicate, reorder, delay on a virtual clock) joining two RC QPs.
//! Every packet crosses the wire encoded (`roce::encode`) and decoded (`roce::decode`).

use super::*;
use crate::provider::soft::roce::{self, Flow};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// splitmix64: small, seeded, good enough to schedule faults.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// True with probability `pct` percent.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

pub struct Region {
    pub rkey: u32,
    pub va: u64,
    pub data: Vec<u8>,
    pub read: bool,
    pub write: bool,
    pub atomic: bool,
}

/// Memory: remote regions by rkey, local lists by handle (each one piece of a region).
#[derive(Default)]
pub struct TestMem {
    pub regions: Vec<Region>,
    sgls: HashMap<u64, (usize, u64, u64)>,
    /// Local accesses outside a list: the engine checks lengths itself, so this stays 0.
    pub local_refused: u32,
    pub remote_writes: u32,
    pub atomics: u32,
    pub invalidated: Vec<u32>,
}

impl TestMem {
    /// Adds a region and returns its index.
    pub fn region(&mut self, rkey: u32, va: u64, len: usize, rights: (bool, bool, bool)) -> usize {
        let (read, write, atomic) = rights;
        self.regions.push(Region { rkey, va, data: vec![0; len], read, write, atomic });
        self.regions.len() - 1
    }
    /// Names bytes `[off, off + len)` of region `r` as local list `h`.
    pub fn sgl(&mut self, h: u64, r: usize, off: u64, len: u64) -> Sgl {
        assert!(off + len <= self.regions[r].data.len() as u64);
        self.sgls.insert(h, (r, off, len));
        Sgl(h)
    }
    pub fn bytes(&self, sgl: Sgl) -> &[u8] {
        let (r, off, len) = self.sgls[&sgl.0];
        &self.regions[r].data[off as usize..(off + len) as usize]
    }
    pub fn bytes_mut(&mut self, sgl: Sgl) -> &mut [u8] {
        let (r, off, len) = self.sgls[&sgl.0];
        &mut self.regions[r].data[off as usize..(off + len) as usize]
    }
    fn local(&mut self, sgl: Sgl, off: u64, n: usize) -> Result<(usize, usize), MemError> {
        let Some(&(r, base, len)) = self.sgls.get(&sgl.0) else {
            self.local_refused += 1;
            return Err(MemError::Access);
        };
        if off.checked_add(n as u64).is_none_or(|e| e > len) {
            self.local_refused += 1;
            return Err(MemError::Access);
        }
        Ok((r, (base + off) as usize))
    }
    fn remote(&self, rkey: u32, va: u64, n: u64, a: Access) -> Result<(usize, usize), MemError> {
        let i = self.regions.iter().position(|r| r.rkey == rkey).ok_or(MemError::Access)?;
        let r = &self.regions[i];
        let ok = match a {
            Access::RemoteRead => r.read,
            Access::RemoteWrite => r.write,
            Access::RemoteAtomic => r.atomic,
        };
        let end = va.checked_add(n).ok_or(MemError::Access)?;
        if !ok || va < r.va || end > r.va + r.data.len() as u64 {
            return Err(MemError::Access);
        }
        Ok((i, (va - r.va) as usize))
    }
}

impl Memory for TestMem {
    fn read_local(&mut self, sgl: Sgl, off: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (r, at) = self.local(sgl, off, dst.len())?;
        dst.copy_from_slice(&self.regions[r].data[at..at + dst.len()]);
        Ok(())
    }
    fn write_local(&mut self, sgl: Sgl, off: u64, src: &[u8]) -> Result<(), MemError> {
        let (r, at) = self.local(sgl, off, src.len())?;
        self.regions[r].data[at..at + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn check_remote(&mut self, rkey: u32, va: u64, len: u64, a: Access) -> Result<(), MemError> {
        self.remote(rkey, va, len, a).map(|_| ())
    }
    fn read_remote(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (r, at) = self.remote(rkey, va, dst.len() as u64, Access::RemoteRead)?;
        dst.copy_from_slice(&self.regions[r].data[at..at + dst.len()]);
        Ok(())
    }
    fn write_remote(&mut self, rkey: u32, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (r, at) = self.remote(rkey, va, src.len() as u64, Access::RemoteWrite)?;
        self.regions[r].data[at..at + src.len()].copy_from_slice(src);
        self.remote_writes += 1;
        Ok(())
    }
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            return Err(MemError::Access);
        }
        let (r, at) = self.remote(rkey, va, 8, Access::RemoteAtomic)?;
        let cell = &mut self.regions[r].data[at..at + 8];
        let orig = u64::from_ne_bytes(cell.try_into().unwrap());
        let new = match op {
            AtomicOp::CmpSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        };
        cell.copy_from_slice(&new.to_ne_bytes());
        self.atomics += 1;
        Ok(orig)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        if !self.regions.iter().any(|r| r.rkey == rkey) {
            return Err(MemError::Access);
        }
        self.invalidated.push(rkey);
        Ok(())
    }
}

#[derive(Default)]
pub struct TestRq {
    pub q: VecDeque<Recv>,
}

impl RecvQueue for TestRq {
    fn pop(&mut self) -> Option<Recv> {
        self.q.pop_front()
    }
}

/// Collects output; packets are encoded at once (the engine's payload is borrowed scratch).
pub struct TestOut {
    flow: Flow,
    pub packets: Vec<Vec<u8>>,
    pub completions: Vec<Completion>,
    pub events: Vec<QpEvent>,
}

impl TestOut {
    pub fn new(flow: Flow) -> Self {
        TestOut { flow, packets: vec![], completions: vec![], events: vec![] }
    }
    /// The packets sent so far, decoded.
    pub fn decoded(&self) -> Vec<Packet<'_>> {
        self.packets.iter().map(|b| roce::decode(b, &self.flow).unwrap()).collect()
    }
    pub fn sends(&self) -> Vec<Completion> {
        self.completions.iter().copied().filter(|c| !c.is_recv).collect()
    }
    pub fn recvs(&self) -> Vec<Completion> {
        self.completions.iter().copied().filter(|c| c.is_recv).collect()
    }
}

impl Sink for TestOut {
    fn packet(&mut self, pkt: &Packet<'_>) {
        let mut buf = vec![0; pkt.wire_len()];
        let n =
            roce::encode(pkt, &self.flow, &mut buf).expect("the engine emits encodable packets");
        buf.truncate(n);
        self.packets.push(buf);
    }
    fn completion(&mut self, c: Completion) {
        self.completions.push(c);
    }
    fn event(&mut self, e: QpEvent) {
        self.events.push(e);
    }
}

pub fn flows() -> (Flow, Flow) {
    let a = Flow::new("10.0.0.1:49152".parse().unwrap(), "10.0.0.2:4791".parse().unwrap()).unwrap();
    (a, a.reversed())
}

pub struct Node {
    pub qp: RcQp,
    pub mem: TestMem,
    pub rq: TestRq,
    pub out: TestOut,
    /// Packets of `out.packets` already put on the wire.
    sent: usize,
}

/// Wire faults, in percent, and the delay range (ns) of the virtual clock.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub drop: u64,
    pub dup: u64,
    /// Extra delay of up to this many ns (reorders).
    pub jitter: u64,
    pub delay: u64,
}

impl Faults {
    pub const NONE: Faults = Faults { drop: 0, dup: 0, jitter: 0, delay: 1000 };
    pub const LOSSY: Faults = Faults { drop: 5, dup: 5, jitter: 20_000, delay: 1000 };
}

/// A packet on the wire: (deliver at, sequence, to node, bytes).
type InFlight = (u64, u64, usize, Vec<u8>);
/// Drops chosen packets: `(from node, packet) -> drop?`.
pub type Cut = Box<dyn FnMut(usize, &Packet<'_>) -> bool>;

/// Two RC QPs (0 and 1) on a simulated wire.
pub struct Sim {
    pub n: [Node; 2],
    pub now: u64,
    pub rng: Rng,
    pub faults: Faults,
    /// (deliver at, sequence, to node, bytes)
    wire: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    flows: (Flow, Flow),
    /// Decides, per packet from node `from`, to drop it regardless of `faults` (tests' knife).
    pub cut: Option<Cut>,
    /// Packets put on the wire by each node (after `cut`, before random faults).
    pub carried: [u32; 2],
    /// A receiver's CPU: each node takes `service` ns per packet, one at a time in arrival
    /// order (0: instantly), and takes none during `pause` = (node, from, until).
    pub service: u64,
    pub pause: Option<(usize, u64, u64)>,
    busy: [u64; 2],
}

impl Sim {
    pub fn new(cfg0: RcConfig, seed: u64, faults: Faults) -> Self {
        let mut cfg1 = cfg0;
        cfg1.qpn = cfg0.dest_qpn;
        cfg1.dest_qpn = cfg0.qpn;
        cfg1.sq_psn = cfg0.rq_psn;
        cfg1.rq_psn = cfg0.sq_psn;
        let f = flows();
        let node = |cfg: &RcConfig, flow: Flow| Node {
            qp: RcQp::new(cfg),
            mem: TestMem::default(),
            rq: TestRq::default(),
            out: TestOut::new(flow),
            sent: 0,
        };
        Sim {
            n: [node(&cfg0, f.0), node(&cfg1, f.1)],
            now: 0,
            rng: Rng::new(seed),
            faults,
            wire: BinaryHeap::new(),
            seq: 0,
            flows: f,
            cut: None,
            carried: [0; 2],
            service: 0,
            pause: None,
            busy: [0; 2],
        }
    }

    pub fn post(&mut self, i: usize, wr: SendWr) {
        let Node { qp, out, .. } = &mut self.n[i];
        qp.post(wr, out).expect("post");
    }

    fn flow_to(&self, to: usize) -> &Flow {
        if to == 1 {
            &self.flows.0
        } else {
            &self.flows.1
        }
    }

    /// Moves the nodes' new packets onto the wire through the faults.
    fn carry(&mut self) {
        for i in 0..2 {
            while self.n[i].sent < self.n[i].out.packets.len() {
                let b = self.n[i].out.packets[self.n[i].sent].clone();
                self.n[i].sent += 1;
                if let Some(cut) = self.cut.as_mut() {
                    let p = roce::decode(&b, if i == 0 { &self.flows.0 } else { &self.flows.1 })
                        .unwrap();
                    if cut(i, &p) {
                        continue;
                    }
                }
                self.carried[i] += 1;
                if self.rng.pct(self.faults.drop) {
                    continue;
                }
                let copies = if self.rng.pct(self.faults.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at = self.now + self.faults.delay + self.rng.below(self.faults.jitter);
                    let to = 1 - i;
                    if self.service > 0 {
                        at = at.max(self.busy[to]);
                        if let Some((_, from, until)) = self.pause.filter(|p| p.0 == to) {
                            if (from..until).contains(&at) {
                                at = until;
                            }
                        }
                        at += self.service;
                        self.busy[to] = at;
                    }
                    self.seq += 1;
                    self.wire.push(Reverse((at, self.seq, to, b.clone())));
                }
            }
        }
    }

    /// Runs until `done` holds or nothing more can happen, at most `max_steps` events.
    /// Returns whether `done` held.
    pub fn run(&mut self, max_steps: u32, mut done: impl FnMut(&Sim) -> bool) -> bool {
        for _ in 0..max_steps {
            for i in 0..2 {
                let Node { qp, mem, out, .. } = &mut self.n[i];
                qp.poll(self.now, mem, out);
            }
            self.carry();
            if done(self) {
                return true;
            }
            let next_pkt = self.wire.peek().map(|w| w.0 .0);
            let next_timer = self.n.iter().filter_map(|n| n.qp.next_deadline()).min();
            let t = match (next_pkt, next_timer) {
                (None, None) => return done(self),
                (a, b) => a.into_iter().chain(b).min().unwrap(),
            };
            self.now = self.now.max(t);
            // Deliver the earliest packet due (one at a time, in (time, seq) order).
            if self.wire.peek().is_some_and(|w| w.0 .0 <= self.now) {
                let Some(Reverse((_, _, to, bytes))) = self.wire.pop() else { break };
                let flow = *self.flow_to(to);
                let pkt = roce::decode(&bytes, &flow).expect("decodes");
                let Node { qp, mem, rq, out, .. } = &mut self.n[to];
                qp.on_packet(&pkt, self.now, mem, rq, out);
            }
        }
        done(self)
    }

    /// Node `i`'s packets, decoded.
    pub fn sent_by(&self, i: usize) -> Vec<Packet<'_>> {
        self.n[i].out.decoded()
    }
}

/// A send work request with defaults.
pub fn wr(wr_id: u64, op: WrOp, sgl: Sgl, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op,
        sgl,
        len,
        remote_va: 0,
        rkey: 0,
        signaled: true,
        solicited: false,
        xrc_srqn: 0,
    }
}
