//! The CM message a peer sends over a connection's socket: decoding and the accessors the CM
//! uses on it must accept any bytes without panicking or reading out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::cm::proto::Msg;
use rdmashim::runtime::unix::Pod;

fuzz_target!(|data: &[u8]| {
    if let Some(m) = Msg::from_bytes(data) {
        let p = m.private_data();
        assert!(p.len() <= rdmashim::cm::proto::MAX_PRIVATE);
    }
});
