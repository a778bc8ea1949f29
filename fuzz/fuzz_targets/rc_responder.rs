//! An RC QP (responder and requester halves) fed arbitrary packets: it must never panic, never
//! ask for local memory outside a posted list, never write a region without remote-write
//! rights, and only emit packets the codec can encode.
//!
//! Input: byte 0 picks the path MTU; then records of [len: u16 LE][len bytes], each a RoCEv2 packet
//! (decoded without ICRC check); a record whose first byte is 0xff advances the clock instead.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::provider::soft::roce::{self, Flow, Packet};
use rdmashim::provider::soft::transport::{
    Access, AtomicOp, Completion, MemError, Memory, QpEvent, RcConfig, RcQp, Recv, RecvQueue,
    SendWr, Sgl, Sink, WrOp,
};

const RKEY: u32 = 0x77;
const RO_KEY: u32 = 0x78;
const VA: u64 = 0x1_0000;

struct Mem {
    rw: Vec<u8>,
    ro: Vec<u8>,
    local: Vec<u8>,
    refused_local: bool,
}

impl Mem {
    fn remote(&mut self, rkey: u32, va: u64, n: u64, a: Access) -> Result<&mut [u8], MemError> {
        let (base, buf, ok) = match rkey {
            RKEY => (VA, &mut self.rw, true),
            RO_KEY => (VA + 4096, &mut self.ro, a == Access::RemoteRead),
            _ => return Err(MemError::Access),
        };
        let end = va.checked_add(n).ok_or(MemError::Access)?;
        if !ok || va < base || end > base + buf.len() as u64 {
            return Err(MemError::Access);
        }
        Ok(&mut buf[(va - base) as usize..(end - base) as usize])
    }
    fn local(&mut self, sgl: Sgl, off: u64, n: usize) -> Result<&mut [u8], MemError> {
        // List k is bytes [k * 1024, k * 1024 + 1024).
        let ok = sgl.0 < 8 && off.checked_add(n as u64).is_some_and(|e| e <= 1024);
        if !ok {
            self.refused_local = true;
            return Err(MemError::Access);
        }
        let at = (sgl.0 * 1024 + off) as usize;
        Ok(&mut self.local[at..at + n])
    }
}

impl Memory for Mem {
    fn read_local(&mut self, sgl: Sgl, off: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let n = dst.len();
        dst.copy_from_slice(self.local(sgl, off, n)?);
        Ok(())
    }
    fn write_local(&mut self, sgl: Sgl, off: u64, src: &[u8]) -> Result<(), MemError> {
        self.local(sgl, off, src.len())?.copy_from_slice(src);
        Ok(())
    }
    fn check_remote(&mut self, rkey: u32, va: u64, len: u64, a: Access) -> Result<(), MemError> {
        self.remote(rkey, va, len, a).map(|_| ())
    }
    fn read_remote(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        dst.copy_from_slice(self.remote(rkey, va, dst.len() as u64, Access::RemoteRead)?);
        Ok(())
    }
    fn write_remote(&mut self, rkey: u32, va: u64, src: &[u8]) -> Result<(), MemError> {
        self.remote(rkey, va, src.len() as u64, Access::RemoteWrite)?.copy_from_slice(src);
        Ok(())
    }
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            return Err(MemError::Access);
        }
        let cell = self.remote(rkey, va, 8, Access::RemoteAtomic)?;
        let orig = u64::from_ne_bytes(cell[..8].try_into().unwrap());
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
        Ok(orig)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        if rkey == RKEY {
            Ok(())
        } else {
            Err(MemError::Access)
        }
    }
}

struct Rq(u64);

impl RecvQueue for Rq {
    fn pop(&mut self) -> Option<Recv> {
        (self.0 < 8).then(|| {
            self.0 += 1;
            Recv { wr_id: self.0, sgl: Sgl(self.0 - 1), len: 1024 - (self.0 as u32 % 3) * 300 }
        })
    }
}

struct Out {
    flow: Flow,
    buf: Vec<u8>,
    events: usize,
}

impl Sink for Out {
    fn packet(&mut self, pkt: &Packet<'_>) {
        roce::encode(pkt, &self.flow, &mut self.buf).expect("the engine emits encodable packets");
    }
    fn completion(&mut self, _c: Completion) {}
    fn event(&mut self, _e: QpEvent) {
        self.events += 1;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, mut rest)) = data.split_first() else { return };
    let mut cfg = RcConfig::new(0x22, 0x11, 1000, 500);
    cfg.mtu = 256 << (m % 5);
    cfg.max_dest_rd_atomic = 2;
    let flow =
        Flow::new("10.0.0.1:49152".parse().unwrap(), "10.0.0.2:4791".parse().unwrap()).unwrap();
    let mut out = Out { flow, buf: vec![0; 8192], events: 0 };
    let mut mem =
        Mem { rw: vec![0; 4096], ro: vec![0; 4096], local: vec![0; 8192], refused_local: false };
    let mut rq = Rq(0);
    let mut qp = RcQp::new(&cfg);
    let ops = [WrOp::Send, WrOp::Read, WrOp::FetchAdd { add: 1 }, WrOp::Write];
    for (k, op) in ops.into_iter().enumerate() {
        let len = if op.is_atomic() { 8 } else { 700 };
        let wr = SendWr {
            wr_id: k as u64,
            op,
            sgl: Sgl(k as u64),
            len,
            remote_va: VA,
            rkey: RKEY,
            signaled: true,
            solicited: false,
            xrc_srqn: 0,
        };
        qp.post(wr, &mut out).unwrap();
    }
    let mut now = 0u64;
    qp.poll(now, &mut mem, &mut out);
    while rest.len() >= 2 {
        let (len, tail) = rest.split_at(2);
        let n = usize::from(u16::from_le_bytes([len[0], len[1]])).min(tail.len());
        let (rec, next) = tail.split_at(n);
        rest = next;
        if rec.first() == Some(&0xff) {
            now += u64::from(rec.get(1).copied().unwrap_or(1)) << 20;
        } else if let Ok(p) = roce::decode_unverified(rec) {
            qp.on_packet(&p, now, &mut mem, &mut rq, &mut out);
        }
        qp.poll(now, &mut mem, &mut out);
    }
    assert!(mem.ro.iter().all(|b| *b == 0), "a region without remote write was written");
    assert!(!mem.refused_local, "the engine asked for local memory outside a list");
    assert!(out.events <= 1);
});
