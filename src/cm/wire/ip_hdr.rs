//! The header rdma_cm puts at the start of a REQ's and a SIDR_REQ's private data (IBA annex
//! A11, "RDMA IP CM Service"): version 0, IP version in the high nibble, the active side's
//! source port, then source and destination addresses in 16 bytes each (IPv4: the address in the
//! last 4, the first 12 zero). 36 bytes; the user's private data follows (REQ: 92 − 36 = 56).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const CMA_HDR_LEN: usize = 36;
/// The only version defined.
pub const CMA_VERSION: u8 = 0;

/// The rdma_cm IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHdr {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// Why private data does not start with a valid rdma_cm IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaHdrError {
    TooShort,
    BadVersion(u8),
    BadIpVersion(u8),
    /// Source and destination of different families.
    MixedFamilies,
}

impl CmaHdr {
    /// Writes the header into the first 36 bytes of `out` (a REQ's or SIDR_REQ's private data).
    pub fn write(&self, out: &mut [u8]) -> Result<(), CmaHdrError> {
        let out = out.get_mut(..CMA_HDR_LEN).ok_or(CmaHdrError::TooShort)?;
        out.fill(0);
        out[0] = CMA_VERSION;
        out[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out[1] = 4 << 4;
                out[16..20].copy_from_slice(&s.octets());
                out[32..36].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out[1] = 6 << 4;
                out[4..20].copy_from_slice(&s.octets());
                out[20..36].copy_from_slice(&d.octets());
            }
            _ => return Err(CmaHdrError::MixedFamilies),
        }
        Ok(())
    }

    /// Reads the header from the start of private data received from a peer.
    pub fn read(data: &[u8]) -> Result<CmaHdr, CmaHdrError> {
        let h = data.get(..CMA_HDR_LEN).ok_or(CmaHdrError::TooShort)?;
        if h[0] != CMA_VERSION {
            return Err(CmaHdrError::BadVersion(h[0]));
        }
        let src_port = u16::from_be_bytes([h[2], h[3]]);
        let addr16 = |at: usize| {
            let mut a = [0; 16];
            a.copy_from_slice(&h[at..at + 16]);
            a
        };
        let (src, dst) = match h[1] >> 4 {
            4 => {
                let v4 =
                    |at: usize| IpAddr::V4(Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]));
                (v4(16), v4(32))
            }
            6 => (IpAddr::V6(Ipv6Addr::from(addr16(4))), IpAddr::V6(Ipv6Addr::from(addr16(20)))),
            v => return Err(CmaHdrError::BadIpVersion(v)),
        };
        Ok(CmaHdr { src_port, src, dst })
    }
}
