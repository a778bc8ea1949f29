//! Ring segments as a malicious peer writes them: a stream of arbitrary headers is run through
//! the receive-side check (`segcheck::check`) with the receiver's own state kept as the
//! provider keeps it. Whatever the peer writes, every accepted step must stay inside what the
//! receiver recorded locally: data within the open message, responses within the local
//! request, NAKs with a remote error status only.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::provider::soft::ring::{SegHdr, SEG_DATA};
use rdmashim::provider::soft::segcheck::{check, Awaits, Open, Outstanding, Step};
use rdmashim::sys::ibv_wc_status::{
    IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR,
};

const HDR: usize = 64;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

fn header(b: &[u8]) -> SegHdr {
    SegHdr {
        msg_len: u32_at(b, 0),
        // Small values are the interesting ones: fold most lengths into the slot size.
        seg_len: if b[60] & 1 == 0 { u32_at(b, 4) % (SEG_DATA as u32 + 2) } else { u32_at(b, 4) },
        flags: u32_at(b, 8) % 32,
        opcode: u32_at(b, 12) % 9,
        // A NAK's status rides here: fold most values near the valid ones.
        imm: if b[61] & 1 == 0 { u32_at(b, 16) % 16 } else { u32_at(b, 16) },
        rkey: u32_at(b, 20),
        remote_addr: u64_at(b, 24),
        compare_add: u64_at(b, 32),
        swap: u64_at(b, 40),
        req_seq: u64_at(b, 48) % 6,
        // The rest (XRC's SRQ number) segcheck does not read: an XRC target resolves it
        // against its own SRQ table.
        ..SegHdr::default()
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    // The receiver's own outstanding requests (req_seq 1..=4), from the first bytes.
    let mut out: Vec<Outstanding> = (0..4)
        .map(|i| Outstanding {
            awaits: match data[i] % 3 {
                0 => Awaits::Ack,
                1 => Awaits::Read,
                _ => Awaits::Atomic,
            },
            len: if data[i] % 3 == 2 { 8 } else { u32::from(data[4 + i]) * 1000 },
            got: 0,
            settled: false,
        })
        .collect();
    let mut open: Option<Open> = None;
    for b in data[8..].chunks_exact(HDR) {
        let h = header(b);
        let r = check(open, &h, |seq| (1..=4).contains(&seq).then(|| out[seq as usize - 1]));
        let Ok(step) = r else { continue };
        match step {
            Step::Data { len, off, n, .. } => {
                assert!(n as usize <= SEG_DATA);
                assert!(off.checked_add(n).is_some_and(|end| end <= len));
                if let Some(o) = open {
                    assert_eq!((o.len, o.got), (len, off));
                }
            }
            Step::Response { off, n, last } => {
                let o = &mut out[h.req_seq as usize - 1];
                assert!(!o.settled);
                assert!(off + n <= o.len.max(8));
                assert_eq!(off, o.got.min(off));
                o.got = off + n;
                o.settled = last;
            }
            Step::Nak { status } => {
                assert!(
                    matches!(
                        status,
                        IBV_WC_REM_ACCESS_ERR | IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_OP_ERR
                    ),
                    "a NAK status passed through: {status}"
                );
                out[h.req_seq as usize - 1].settled = true;
            }
            Step::Single { .. } => assert!(open.is_none()),
        }
        open = step.next_open(open);
    }
});
