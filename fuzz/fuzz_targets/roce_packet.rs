//! A RoCEv2 packet from the network: decoding must accept any bytes without panicking, and what
//! decodes must re-encode to the same packet (every bit the encoder writes, ICRC aside, comes
//! from the input; only reserved bits (the BTH's, DETH's and XRCETH's) and pad bytes may be
//! dropped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::provider::soft::roce::{self, DecodeError, Flow};

fuzz_target!(|data: &[u8]| {
    // The flow examples/roce_vectors writes its seeds on.
    let flow =
        Flow::new("127.0.0.1:49374".parse().unwrap(), "127.0.0.2:4791".parse().unwrap()).unwrap();
    let verified = roce::decode(data, &flow);
    let p = match roce::decode_unverified(data) {
        Ok(p) => p,
        Err(e) => {
            assert_eq!(verified, Err(e), "verification may only add an ICRC error");
            return;
        }
    };
    match verified {
        Ok(v) => assert_eq!(v, p),
        Err(e) => assert_eq!(e, DecodeError::IcrcMismatch),
    }
    let info = p.info().expect("a decoded opcode is in the table");
    assert!(info.payload || p.payload.is_empty());

    let mut buf = vec![0u8; data.len() + 4];
    let n = roce::encode(&p, &flow, &mut buf).expect("what decodes re-encodes");
    assert_eq!(n, data.len(), "same length");
    for i in 0..n - 4 {
        assert_eq!(buf[i] & !data[i], 0, "byte {i}: the encoder set a bit the packet did not have");
    }
    let q = roce::decode(&buf[..n], &flow).expect("the re-encoded packet verifies");
    assert_eq!(q.payload, p.payload);
    assert_eq!(q.bth, p.bth.canonical());
    let mut ext = p.ext;
    ext.deth = ext.deth.map(|d| d.canonical());
    ext.xrc = ext.xrc.map(|x| x.canonical());
    assert_eq!(q.ext, ext);
    // A packet that verified and had nothing to drop comes back byte for byte.
    let pad = &data[n - 4 - usize::from(p.bth.pad_cnt())..n - 4];
    // (Only if its ICRC was right for IPv4 ID 0: one accepted for a GSO segment's ID comes back
    // with the ID-0 ICRC the encoder computes.)
    let icrc_at_id0 = <[u8; 4]>::try_from(&data[n - 4..n])
        .is_ok_and(|b| roce::icrc::compute(&flow, &data[..n - 4]) == Some(u32::from_le_bytes(b)));
    if verified.is_ok()
        && icrc_at_id0
        && p.bth == p.bth.canonical()
        && ext == p.ext
        && pad.iter().all(|b| *b == 0)
    {
        assert_eq!(&buf[..n], data);
    }
});
