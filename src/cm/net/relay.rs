//! Requests that came to port 4791 ([`well_known`](crate::provider::soft::net::well_known)):
//! the owner of the port does not need to serve a request (REQ, SIDR_REQ) itself: it hands the
//! checked MAD, with the addresses it came with, to the process listening on (port space, port,
//! address) through that listener's own rendezvous name (`rdmashim/cm/...`), as a first message
//! of its own kind; that process answers from its own UDP socket, and the rest of the exchange
//! goes process to process (or, with another stack, through port 4791 by comm id).

use crate::cm::id::{addr_from_wire, addr_to_wire};
use crate::cm::wire::MAD_LEN;
use std::net::SocketAddr;

const MAGIC: &[u8; 8] = b"RSCMRLY1";
/// Magic, the sender's UDP address, the local address it was sent to, the MAD.
pub const RELAYED_LEN: usize = 8 + 28 + 28 + MAD_LEN;

/// The first message a relay sends to a listener.
pub fn encode(from: SocketAddr, to: SocketAddr, mad: &[u8; MAD_LEN]) -> [u8; RELAYED_LEN] {
    let mut b = [0u8; RELAYED_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..36].copy_from_slice(&addr_to_wire(&from));
    b[36..64].copy_from_slice(&addr_to_wire(&to));
    b[64..].copy_from_slice(mad);
    b
}

/// `true` if a listener's first message is a relayed request (not a unix CM message).
pub fn is_relayed(first: &[u8]) -> bool {
    first.len() == RELAYED_LEN && first.starts_with(MAGIC)
}

/// The addresses and MAD of a relayed request.
pub fn decode(b: &[u8]) -> Option<(SocketAddr, SocketAddr, [u8; MAD_LEN])> {
    if !is_relayed(b) {
        return None;
    }
    let from = addr_from_wire(b[8..36].try_into().ok()?);
    let to = addr_from_wire(b[36..64].try_into().ok()?);
    Some((from, to, b[64..].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let from: SocketAddr = "10.1.2.3:40000".parse().unwrap();
        let to: SocketAddr = "[fd00::1]:4791".parse().unwrap();
        let mad = [0x5a; MAD_LEN];
        let b = encode(from, to, &mad);
        assert!(is_relayed(&b));
        assert_eq!(decode(&b), Some((from, to, mad)));
        assert!(!is_relayed(&b[1..]));
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
    }
}
