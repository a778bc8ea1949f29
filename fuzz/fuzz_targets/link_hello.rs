//! The QP link handshake a peer sends first: any bytes decode or are refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmashim::provider::soft::link::Hello;
use rdmashim::runtime::unix::Pod;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = Hello::from_bytes(data) {
        let _ = (h.magic, h.kind, h.from_qpn, h.to_qpn);
    }
});
