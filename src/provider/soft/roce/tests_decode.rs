//! Whole packets: encode/decode round trips for every opcode, every encode and decode error,
//! and decoding arbitrary bytes without a panic.

use super::headers::*;
use super::icrc::{self, Flow};
use super::opcode::{self, op, Ext};
use super::packet::{decode, decode_unverified, encode, DecodeError, EncodeError, Exts, Packet};
use std::net::SocketAddr;

fn flow() -> Flow {
    let s: SocketAddr = "127.0.0.1:49153".parse().unwrap();
    Flow::new(s, "127.0.0.3:4791".parse().unwrap()).unwrap()
}

/// A packet of `code` carrying every header its opcode lists, with distinct values.
fn sample(code: u8, payload: &[u8]) -> Packet<'_> {
    let mut p = Packet::new(code, 0x00ab_cdef, 0x00fe_dcba, payload);
    p.bth.set_se(true);
    p.bth.set_ack_req(true);
    p.bth.set_pkey(0x7fff);
    for h in opcode::lookup(code).unwrap().headers {
        match h {
            Ext::XrcEth => p.ext.xrc = Some(XrcEth::new(0x00ab_0123)),
            Ext::Deth => p.ext.deth = Some(Deth::new(0x8001_0000, 0x12_3456)),
            Ext::Reth => p.ext.reth = Some(Reth::new(0x7f00_0000_1000, 0xdead_beef, 3000)),
            Ext::AtomicEth => p.ext.atomic = Some(AtomicEth::new(0x2000, 5, 6, 7)),
            Ext::Aeth => p.ext.aeth = Some(Aeth::new(Syndrome::Ack { credits: 31 }, 42)),
            Ext::AtomicAckEth => p.ext.atomic_ack = Some(AtomicAckEth::new(99)),
            Ext::ImmDt => p.ext.imm = Some(ImmDt::new(0x0102_0304)),
            Ext::Ieth => p.ext.ieth = Some(Ieth::new(0x0506_0708)),
        }
    }
    p
}

fn enc(p: &Packet<'_>) -> Vec<u8> {
    let mut buf = vec![0xeeu8; p.wire_len() + 8];
    let n = encode(p, &flow(), &mut buf).unwrap();
    assert_eq!(n, p.wire_len());
    buf.truncate(n);
    buf
}

/// Rewrites the ICRC after a test changed a packet, so only the change is judged.
fn reseal(b: &mut [u8]) {
    let n = b.len() - 4;
    let c = icrc::compute(&flow(), &b[..n]).unwrap();
    b[n..].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn every_opcode_round_trips_with_every_pad() {
    let data: Vec<u8> = (0..64u8).collect();
    for row in &opcode::TABLE {
        let lens: &[usize] = if row.payload { &[0, 1, 2, 3, 4, 5, 63, 64] } else { &[0] };
        for &n in lens {
            let p = sample(row.code, &data[..n]);
            let wire = enc(&p);
            assert_eq!(wire.len() % 4, 0);
            assert_eq!(
                wire.len(),
                12 + row.headers_len() + n.next_multiple_of(4) + 4,
                "{}",
                row.name
            );
            assert_eq!(wire[0], row.code);
            assert_eq!(usize::from((wire[1] >> 4) & 3), (4 - n % 4) % 4, "{} pad", row.name);
            let d = decode(&wire, &flow()).unwrap_or_else(|e| panic!("{}: {e:?}", row.name));
            assert_eq!(d.payload, &data[..n]);
            assert_eq!(d.ext, p.ext, "{}", row.name);
            assert_eq!(
                (d.bth.dest_qp(), d.bth.psn(), d.bth.pkey()),
                (0xab_cdef, 0xfe_dcba, 0x7fff)
            );
            assert!(d.bth.se() && d.bth.ack_req() && !d.bth.mig_req());
            // Headers sit in table order right after the BTH.
            let mut at = 12;
            for h in row.headers {
                let want = match h {
                    Ext::XrcEth => zerocopy::IntoBytes::as_bytes(&p.ext.xrc.unwrap()).to_vec(),
                    Ext::Deth => zerocopy::IntoBytes::as_bytes(&p.ext.deth.unwrap()).to_vec(),
                    Ext::Reth => zerocopy::IntoBytes::as_bytes(&p.ext.reth.unwrap()).to_vec(),
                    Ext::AtomicEth => {
                        zerocopy::IntoBytes::as_bytes(&p.ext.atomic.unwrap()).to_vec()
                    }
                    Ext::Aeth => zerocopy::IntoBytes::as_bytes(&p.ext.aeth.unwrap()).to_vec(),
                    Ext::AtomicAckEth => {
                        zerocopy::IntoBytes::as_bytes(&p.ext.atomic_ack.unwrap()).to_vec()
                    }
                    Ext::ImmDt => zerocopy::IntoBytes::as_bytes(&p.ext.imm.unwrap()).to_vec(),
                    Ext::Ieth => zerocopy::IntoBytes::as_bytes(&p.ext.ieth.unwrap()).to_vec(),
                };
                assert_eq!(&wire[at..at + h.wire_len()], want, "{} {h:?}", row.name);
                at += h.wire_len();
            }
            assert_eq!(&wire[at..at + n], &data[..n]);
            assert!(wire[at + n..wire.len() - 4].iter().all(|b| *b == 0), "pad is zero");
            // Re-encoding the decoded packet gives the same bytes.
            assert_eq!(enc(&d), wire);
        }
    }
}

#[test]
fn encode_refuses_what_the_table_forbids() {
    let f = flow();
    let mut buf = [0u8; 256];
    let mut p = Packet::new(0x18, 1, 1, &[]);
    assert_eq!(encode(&p, &f, &mut buf), Err(EncodeError::UnknownOpcode(0x18)));
    p = Packet::new(op::WRITE_ONLY, 1, 1, &[]);
    assert_eq!(encode(&p, &f, &mut buf), Err(EncodeError::Headers), "missing RETH");
    p.ext.reth = Some(Reth::new(0, 0, 0));
    p.ext.imm = Some(ImmDt::new(0));
    assert_eq!(encode(&p, &f, &mut buf), Err(EncodeError::Headers), "extra ImmDt");
    p.ext.imm = None;
    assert_eq!(encode(&p, &f, &mut buf), Ok(32));
    p = sample(op::READ_REQUEST, b"x");
    assert_eq!(encode(&p, &f, &mut buf), Err(EncodeError::PayloadNotAllowed));
    let big = vec![0u8; 70_000];
    p = sample(op::SEND_ONLY, &big);
    assert_eq!(encode(&p, &f, &mut buf), Err(EncodeError::TooLong));
    p = sample(op::SEND_ONLY, &big[..100]);
    assert_eq!(encode(&p, &f, &mut buf[..115]), Err(EncodeError::BufferTooSmall));
    assert_eq!(encode(&p, &f, &mut buf[..116]), Ok(116));
    // TVer, PadCnt and reserved bits are the encoder's, whatever the description holds.
    p.bth.set_tver(5);
    p.bth.set_pad_cnt(3);
    let mut raw = [0u8; 12];
    raw[..4].copy_from_slice(&[op::SEND_ONLY, 0, 0xff, 0xff]);
    raw[4] = 0x3f;
    raw[8] = 0x7f;
    p.bth = zerocopy::FromBytes::read_from_bytes(&raw[..]).unwrap();
    assert_eq!(encode(&p, &f, &mut buf), Ok(116));
    assert_eq!(&buf[..12], [op::SEND_ONLY, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn decode_reports_every_error() {
    let f = flow();
    let good = enc(&sample(op::WRITE_ONLY_IMM, b"hello"));
    assert!(decode(&good, &f).is_ok());

    assert_eq!(decode(&[], &f), Err(DecodeError::TooShort));
    assert_eq!(decode(&good[..15], &f), Err(DecodeError::TooShort));

    let mut b = good.clone();
    b[1] |= 0x01;
    reseal(&mut b);
    assert_eq!(decode(&b, &f), Err(DecodeError::BadTver(1)));

    for code in [0x15u8, 0x2c, 0x40, 0x66, 0x81, 0xff] {
        let mut b = good.clone();
        b[0] = code;
        reseal(&mut b);
        assert_eq!(decode(&b, &f), Err(DecodeError::UnknownOpcode(code)));
    }

    // RETH + ImmDt need 20 bytes: a packet with only BTH + 16 + ICRC is truncated.
    let mut b = good[..12 + 16].to_vec();
    b.extend_from_slice(&[0; 4]);
    reseal(&mut b);
    assert_eq!(decode(&b, &f), Err(DecodeError::HeadersTruncated));

    let mut b = enc(&sample(op::ACK, &[]));
    b.splice(16..16, [0u8; 4]);
    reseal(&mut b);
    assert_eq!(decode(&b, &f), Err(DecodeError::UnexpectedPayload));

    let mut b = good.clone();
    b.insert(20, 0);
    assert_eq!(decode(&b, &f), Err(DecodeError::Misaligned));

    // Pad 3 on an empty payload, and on a no-payload opcode.
    let mut b = enc(&sample(op::SEND_ONLY, &[]));
    b[1] |= 0x30;
    reseal(&mut b);
    assert_eq!(decode(&b, &f), Err(DecodeError::PadTooLong));
    let mut b = enc(&sample(op::READ_REQUEST, &[]));
    b[1] |= 0x10;
    reseal(&mut b);
    assert_eq!(decode(&b, &f), Err(DecodeError::PadTooLong));

    let mut b = good.clone();
    let last = b.len() - 1;
    b[last] ^= 0x80;
    assert_eq!(decode(&b, &f), Err(DecodeError::IcrcMismatch));
    assert!(decode_unverified(&b).is_ok());
    let mut b = good.clone();
    b[30] ^= 1;
    assert_eq!(decode(&b, &f), Err(DecodeError::IcrcMismatch));
    assert_eq!(decode(&good, &f.reversed()), Err(DecodeError::IcrcMismatch));
}

#[test]
fn decode_accepts_reserved_bits_and_fecn_without_failing_the_icrc() {
    let f = flow();
    let mut b = enc(&sample(op::UD | op::SEND_ONLY, b"abcd"));
    b[4] |= 0xc0; // FECN/BECN set by a switch on the way: not covered by the ICRC.
    let d = decode(&b, &f).unwrap();
    assert!(d.bth.fecn() && d.bth.becn());
    b[16] = 0x5a; // DETH's reserved byte: covered by the ICRC, ignored by the decoder.
    reseal(&mut b);
    let d = decode(&b, &f).unwrap();
    assert_eq!(d.ext.deth, Some(Deth::read_from_raw([0x80, 1, 0, 0, 0x5a, 0x12, 0x34, 0x56])));
    assert_eq!(d.ext.deth.unwrap().src_qp(), 0x12_3456);
}

trait FromRaw {
    fn read_from_raw(b: [u8; 8]) -> Self;
}
impl FromRaw for Deth {
    fn read_from_raw(b: [u8; 8]) -> Self {
        zerocopy::FromBytes::read_from_bytes(&b[..]).unwrap()
    }
}

#[test]
fn decode_never_panics_on_truncations_or_noise() {
    let f = flow();
    let mut packets = Vec::new();
    let data = [7u8; 40];
    for row in &opcode::TABLE {
        packets.push(enc(&sample(row.code, if row.payload { &data[..37] } else { &[] })));
    }
    for p in &packets {
        for n in 0..=p.len() {
            let _ = decode(&p[..n], &f);
            let _ = decode_unverified(&p[..n]);
        }
    }
    // Every byte position of every packet with every value of its opcode byte.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for p in &packets {
        for code in 0..=255u8 {
            let mut b = p.clone();
            b[0] = code;
            let _ = decode(&b, &f);
        }
        for _ in 0..200 {
            let mut b = p.clone();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % b.len();
            b[i] = (x >> 32) as u8;
            b.truncate(((x >> 40) as usize) % (p.len() + 1));
            if let Ok(d) = decode_unverified(&b) {
                assert!(d.payload.len() <= b.len());
                let info = d.info().unwrap();
                assert_eq!(Exts::default() == d.ext, info.headers.is_empty());
            }
        }
    }
}
