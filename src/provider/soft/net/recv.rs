//! The receive side of the UDP sockets: the progress engine reads a bounded batch per
//! readiness event, rebuilds each packet's IP/UDP flow from the real addresses and ports, checks
//! the ICRC (`roce::decode`) and hands the packet to the QP its BTH names. Anything that fails a
//! check is dropped silently and counted.

use super::endpoint::{self, Sock};
use crate::errno::Result;
use crate::provider::soft::qp::Delivered;
use crate::provider::soft::roce::{self, Flow};
use crate::runtime::engine::engine;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Datagrams read per system call.
pub(super) const BATCH: usize = 32;
/// Calls per readiness event: a flooding peer cannot keep the progress thread here.
const CALLS: usize = 8;
/// Room for the largest RoCEv2 packet we accept (4096 payload + headers) and then some.
pub(super) const BUF: usize = 4096 + 256;

/// Packets dropped: undecodable, bad ICRC, or for no QP of ours.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Makes the progress engine read `sock` (a socket from [`endpoint`]).
pub fn watch(sock: Arc<Sock>) -> Result<()> {
    let raw = sock.as_raw_fd();
    let w = Arc::downgrade(&sock);
    engine()?.watch(
        raw,
        Arc::new(move |_| {
            if let Some(s) = w.upgrade() {
                drain(&s);
            }
        }),
    )
}

/// Reads what waits at `sock` (a bounded batch) and hands it to the QPs; `false` if another
/// thread is reading it (it delivers in order) or nothing was there. Call with no QP locked.
pub fn drain(sock: &Sock) -> bool {
    let Ok(mut batch) = sock.reading.try_lock() else { return false };
    let (fd, port) = (sock.fd.as_raw_fd(), sock.port);
    let mut got = false;
    for _ in 0..CALLS {
        let n = match batch.recv(fd) {
            Ok(0) => return got,
            Ok(n) => n,
            Err(_) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        got = true;
        let mut delivered = Delivered::default();
        for i in 0..n {
            let Some((r, data)) = batch.get(i) else { break };
            if !deliver(r.map(endpoint::received), data, port, &mut delivered) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        delivered.flush();
        if n < BATCH {
            return got;
        }
    }
    got
}

/// Checks one datagram and hands it to its QP: whether a QP took it.
fn deliver(
    r: Result<Option<Result<endpoint::Received>>>,
    data: &[u8],
    port: u16,
    delivered: &mut Delivered,
) -> bool {
    let Ok(Some(Ok(r))) = r else { return false };
    let Some(flow) = Flow::new(r.from, SocketAddr::new(r.to, port)) else { return false };
    let Ok(pkt) = roce::decode(data, &flow) else { return false };
    let qpn = pkt.bth.dest_qp();
    // A QPN names its socket: a packet for a QPN of another port is not ours.
    endpoint::port_of(qpn) == port
        && crate::provider::soft::qp::deliver_packet(qpn, &pkt, &r.from, r.to, delivered)
}
