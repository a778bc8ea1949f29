//! A CM MAD from the network: decoding must accept any bytes without panicking, what decodes
//! must re-encode (every bit written comes from the input; only reserved bits may be dropped)
//! and decode to the same message, with the private data byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::cm::wire::{self as cm, CmaHdr, Msg, MAD_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(c) = cm::decode(data) else { return };
    let mut out = [0u8; MAD_LEN];
    cm::encode(&c, &mut out).expect("what decodes re-encodes");
    for (i, (o, d)) in out.iter().zip(data).enumerate() {
        assert_eq!(o & !d, 0, "byte {i}: the encoder set a bit the MAD did not have");
    }
    assert_eq!(cm::decode(&out), Ok(c));
    let pd = c.msg.private_data();
    assert_eq!(&data[MAD_LEN - pd.len()..], pd, "private data ends the MAD");
    let ip = match &c.msg {
        Msg::Req(r) => Some(r.private_data.as_slice()),
        Msg::SidrReq(r) => Some(r.private_data.as_slice()),
        _ => None,
    };
    if let Some(Ok(h)) = ip.map(CmaHdr::read) {
        let mut b = [0u8; cm::CMA_HDR_LEN];
        h.write(&mut b).expect("a header that reads writes");
        assert_eq!(CmaHdr::read(&b), Ok(h));
    }
});
