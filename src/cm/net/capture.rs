//! `RDMASHIM_PCAP` for the CM messages of one network namespace: they travel over a unix
//! connection, so each one an id sends is written to the capture as the InfiniBand CM MAD it
//! stands for, in the RoCEv2 UD SEND to QP1 that the MAD carrier would send (from our address
//! to the peer's, UDP port 4791 both ways), so `tshark -r FILE` shows the exchange as it shows
//! one across hosts. The comm ids are each end's rdma_cm address, hashed: both ends compute
//! the same pair with no message of their own.

use super::translate::{self, Ctx};
use super::wire::{self, Cm, MAD_LEN};
use crate::cm::proto::{self, Msg};
use crate::runtime::pcap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};

/// What the id knows of its connection when it sends `m` over the unix carrier.
pub struct UnixConn {
    pub ps: u32,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub path_mtu: u32,
    pub peer_qpn: u32,
    /// The id answered a request (its REJ refers to the REQ).
    pub passive: bool,
}

/// The comm id that stands for the end at `addr`: never 0, as no comm id is.
fn comm_id(addr: SocketAddr) -> u32 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    addr.hash(&mut h);
    (h.finish() as u32).max(1)
}

/// Writes `m`, sent on a unix CM connection `c`, as its CM MAD.
pub fn unix_message(m: &Msg, c: &UnixConn) {
    if !pcap::on() {
        return;
    }
    // The listener's port names the service (the active end's remote, the passive end's local).
    let listener = if c.passive { c.local } else { c.remote };
    let ctx = Ctx {
        local_id: comm_id(c.local),
        remote_id: if matches!(m.kind, proto::REQ | proto::SIDR_REQ) {
            0
        } else {
            comm_id(c.remote)
        },
        service_id: wire::service_id(c.ps as u16, listener.port()),
        local: c.local,
        remote: c.remote,
        path_mtu: c.path_mtu,
        peer_qpn: c.peer_qpn,
        passive: c.passive,
    };
    let Ok(msg) = translate::to_wire(m, &ctx) else { return };
    // One transaction per exchange, named by the active end's comm id.
    let active = if c.passive { ctx.remote_id } else { ctx.local_id };
    let mut mad = [0u8; MAD_LEN];
    if wire::encode(&Cm { tid: u64::from(active) << 32, msg }, &mut mad).is_err() {
        return;
    }
    static PSN: AtomicU32 = AtomicU32::new(0);
    let psn = PSN.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
    let (src, dst) = (gsi_addr(c.local), gsi_addr(c.remote));
    let mut buf = [0u8; 512];
    if let Ok(n) = super::gsi_packet(src, dst, psn, &mad, &mut buf) {
        pcap::datagram(src, dst, 0, &buf[..n]);
    }
}

/// The RoCEv2 address of an rdma_cm end: its IP, UDP port 4791.
fn gsi_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), crate::provider::soft::roce::ROCE_UDP_PORT)
}
