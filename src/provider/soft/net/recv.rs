//! The receive side of the UDP sockets: the progress engine reads a bounded batch per
//! readiness event, rebuilds each packet's IP/UDP flow from the real addresses and ports, checks
//! the ICRC (`roce::decode`) and hands the packet to the QP its BTH names. Anything that fails a
//! check is dropped silently and counted.

use super::endpoint;
use crate::errno::Result;
use crate::provider::soft::roce::{self, Flow};
use crate::runtime::engine::engine;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Datagrams read per readiness event: a flooding peer cannot keep the progress thread here.
const BATCH: usize = 64;
/// Room for the largest RoCEv2 packet we accept (4096 payload + headers) and then some.
const BUF: usize = 4096 + 256;

/// Packets dropped: undecodable, bad ICRC, or for no QP of ours.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Makes the progress engine read `fd` (a socket from [`endpoint`]).
pub fn watch(fd: Arc<OwnedFd>) -> Result<()> {
    let raw = fd.as_raw_fd();
    let w = Arc::downgrade(&fd);
    engine()?.watch(
        raw,
        Arc::new(move |_| {
            if let Some(fd) = w.upgrade() {
                drain(&fd);
            }
        }),
    )
}

fn drain(fd: &OwnedFd) {
    let Ok(port) = local_port(fd) else { return };
    let mut buf = [0u8; BUF];
    for _ in 0..BATCH {
        let r = match endpoint::recv_one(fd.as_raw_fd(), &mut buf) {
            None => return,
            Some(Err(_)) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Some(Ok(r)) => r,
        };
        let Some(flow) = Flow::new(r.from, SocketAddr::new(r.to, port)) else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let pkt = match roce::decode(&buf[..r.len], &flow) {
            Ok(p) => p,
            Err(_) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let qpn = pkt.bth.dest_qp();
        // A QPN names its socket: a packet for a QPN of another port is not ours.
        if endpoint::port_of(qpn) != port
            || !crate::provider::soft::qp::deliver_packet(qpn, &pkt, &r.from, r.to)
        {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn local_port(fd: &OwnedFd) -> Result<u16> {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: sa has room for len bytes.
    crate::errno::check(unsafe {
        libc::getsockname(fd.as_raw_fd(), (&mut sa as *mut libc::sockaddr_in6).cast(), &mut len)
    })?;
    Ok(u16::from_be(sa.sin6_port))
}
