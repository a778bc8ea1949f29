//! The receive side of the UDP sockets: the progress engine reads a bounded batch per
//! readiness event, rebuilds each packet's IP/UDP flow from the real addresses and ports, checks
//! the ICRC (`roce::decode`) and hands the packet to the QP its BTH names. Anything that fails a
//! check is dropped silently and counted.

use super::endpoint::{self, Sock};
use crate::errno::Result;
use crate::provider::soft::qp::Delivered;
use crate::provider::soft::roce::{self, Flow};
use crate::runtime::engine::{engine, on_progress_thread, ARMED_CQS};
use crate::runtime::{lock, udp};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Buffers read per system call (each a datagram, or a burst the kernel kept whole: GRO).
pub(super) const BATCH: usize = 16;
/// Calls per readiness event: a flooding peer cannot keep the progress thread here.
const CALLS: usize = 8;
/// Room for the largest burst (a UDP datagram's limit); a lone packet is at most 4096 payload
/// and headers.
pub(super) const BUF: usize = 1 << 16;

/// Packets dropped: undecodable, bad ICRC, or for no QP of ours.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Makes the progress engine read `sock` (a socket from [`endpoint`]), except while an
/// application busy-polls it: then the application reads it (see [`drain_for_app`]) and the
/// progress thread, which would only wake to find the datagram taken, parks the socket and
/// looks again every millisecond.
pub fn watch(sock: Arc<Sock>) -> Result<()> {
    let raw = sock.as_raw_fd();
    let w = Arc::downgrade(&sock);
    engine()?.watch_parkable(
        raw,
        Arc::new(move |_| {
            let Some(s) = w.upgrade() else { return true };
            if app_polls(&s) {
                return false;
            }
            // A thread reading it now (an application) would leave readiness set: re-armed,
            // the watch would fire again at once, as long as it reads. It is looked at again
            // with the parked ones.
            drain_or_busy(&s)
        }),
    )
}

/// How recently an application must have read a socket for the progress thread to leave it
/// alone (ns).
const APP_READ_WINDOW_NS: u64 = 200_000;

/// Whether an application is busy-polling `sock`: it read the socket within the window and no
/// thread of the process sleeps on a completion channel (one that does needs the progress
/// thread to take the datagram that will wake it).
fn app_polls(sock: &Sock) -> bool {
    let at = sock.app_read_at.load(Ordering::Relaxed);
    at != 0
        && ARMED_CQS.load(Ordering::Relaxed) == 0
        && super::now_ns().saturating_sub(at) < APP_READ_WINDOW_NS
}

/// [`drain`] for a QP's progress: on an application's thread (polling a CQ, posting) it also
/// notes that the application reads the socket.
pub fn drain_for_app(sock: &Sock) -> bool {
    if on_progress_thread() {
        return drain(sock);
    }
    let now = super::now_ns().max(1);
    let was = sock.app_read_at.swap(now, Ordering::Relaxed);
    if was == 0 || now.saturating_sub(was) >= APP_READ_WINDOW_NS {
        // A polling session starts: what arrives is ours to read, not the progress thread's.
        if let Ok(e) = engine() {
            e.park(sock.as_raw_fd());
        }
    }
    // An application waits for a reader that holds the socket: spinning on a failed try
    // would keep that reader (the progress thread, preempted on a busy machine) off the CPU
    // for a whole time slice while nothing is read (gaps of 5 to 20 ms on 2 cores).
    let batch = lock(&sock.reading);
    read_batch(sock, batch)
}

/// On an application's thread: it has nothing more to complete on a QP of `sock`, so it no
/// longer counts as polling it, and the socket goes back to the progress thread now (its watch
/// re-armed from here: no wake-up unless something is there to read).
pub fn app_done(sock: &Sock) {
    if !on_progress_thread() && sock.app_read_at.swap(0, Ordering::Relaxed) != 0 {
        if let Ok(e) = engine() {
            e.unpark(sock.as_raw_fd());
        }
    }
}

/// Reads what waits at `sock` (a bounded batch) and hands it to the QPs; `false` if another
/// thread is reading it (it delivers in order) or nothing was there. Call with no QP locked.
pub fn drain(sock: &Sock) -> bool {
    let Ok(batch) = sock.reading.try_lock() else { return false };
    read_batch(sock, batch)
}

/// [`drain`] for the progress thread's watch: `false` if another thread holds the socket.
fn drain_or_busy(sock: &Sock) -> bool {
    let Ok(batch) = sock.reading.try_lock() else { return false };
    read_batch(sock, batch);
    true
}

fn read_batch(sock: &Sock, mut batch: std::sync::MutexGuard<'_, udp::RecvBatch>) -> bool {
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
            let Some(Ok(r)) = r.map(endpoint::received).ok().flatten() else {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            // A burst is its datagrams in order, each checked on its own.
            let to = SocketAddr::new(r.to, port);
            for pkt in data.chunks(r.segment) {
                if !deliver(&r.from, to, pkt, port, &mut delivered) {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        delivered.flush();
        if n < BATCH {
            return got;
        }
    }
    got
}

/// Checks one datagram sent from `from` to `to` and hands it to its QP, which must be one of
/// socket `port`'s: whether a QP took it.
fn deliver(
    from: &SocketAddr,
    to: SocketAddr,
    data: &[u8],
    port: u16,
    delivered: &mut Delivered,
) -> bool {
    let Some(flow) = Flow::new(*from, to) else { return false };
    let Ok(pkt) = roce::decode(data, &flow) else { return false };
    let qpn = pkt.bth.dest_qp();
    // A QPN names its socket: a packet for a QPN of another port is not ours.
    endpoint::port_of(qpn) == port
        && crate::provider::soft::qp::deliver_packet(qpn, &pkt, from, to.ip(), delivered)
}

/// A packet another stack sent to port 4791, passed on by its owner to the inbox of our socket
/// `port` (`relay`): checked and delivered as if it had come to that socket.
pub fn deliver_relayed(port: u16, data: &[u8], from: SocketAddr, to: SocketAddr) {
    let (from, to) = (endpoint::as_seen(from), endpoint::as_seen(to));
    let mut delivered = Delivered::default();
    if !deliver(&from, to, data, port, &mut delivered) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}
