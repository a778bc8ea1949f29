//! Port 4791, RoCEv2's well-known port, without a daemon (docs/DESIGN-NOTES.md, "Port 4791").
//!
//! Other stacks (rxe, a RoCE NIC, a kernel CM) send every packet to `ip:4791`: CM MADs to QP1,
//! data to the destination QPN. Our QPNs name the UDP port of the process that owns them
//! (`endpoint`), so one process per network namespace owns port 4791 and passes each packet on:
//! QP1's to the connection manager's handler (it serves requests and answers by comm id), the
//! others by destination QPN to the inbox of the port that owns it ([`relay`](super::relay)).
//!
//! The owner is the first process that wants the port (it listens for connections, or has a
//! network QP socket) and can bind it; the others try again every [`RETRY`] while they want
//! it, so one takes over when the owner exits. A namespace-wide abstract name is the lock: the
//! UDP socket itself allows the multicast sockets bound to `group:4791` (SO_REUSEADDR) beside
//! it, so it cannot exclude a second owner by itself.

use super::endpoint::port_of;
use super::relay;
use crate::errno::Errno;
use crate::provider::soft::roce::{GSI_QPN, ROCE_UDP_PORT};
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, udp, unix};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How often a process that wants port 4791 tries again to own it.
pub const RETRY: Duration = Duration::from_secs(1);
/// The abstract name whose holder owns port 4791 in this network namespace.
const OWNER_LOCK: &str = "rdmashim/roce-4791-owner";
/// Datagrams taken per readiness event (a flood cannot hold the progress thread).
const PER_EVENT: usize = 64;

/// What the owner does with a packet to QP1: `(packet, from, to)`, `to` at port 4791.
pub type GsiHandler = fn(&[u8], SocketAddr, SocketAddr);

static GSI: OnceLock<GsiHandler> = OnceLock::new();

/// Sets the handler of packets to QP1 (the connection manager's, registered at load time: the
/// owner may be a process that never used the CM itself).
pub fn set_gsi_handler(h: GsiHandler) {
    let _ = GSI.set(h);
}

#[derive(Default)]
struct Owner {
    /// Reasons this process wants the port (listeners, the network endpoint).
    wanted: usize,
    /// While we own it: the UDP socket and the lock name.
    owned: Option<(Arc<OwnedFd>, OwnedFd)>,
    retry_armed: bool,
}

static OWNER: PerProcess<Mutex<Owner>> = PerProcess::new(|| Mutex::new(Owner::default()));

fn owner() -> MutexGuard<'static, Owner> {
    lock(OWNER.get())
}

/// One more reason to own port 4791: owns it now if it is free, or tries again later.
pub fn want() {
    owner().wanted += 1;
    try_own();
}

/// One reason fewer (the port stays ours if we own it: requests may be on their way).
pub fn unwant() {
    let mut o = owner();
    o.wanted = o.wanted.saturating_sub(1);
}

fn try_own() {
    let mut o = owner();
    if o.owned.is_some() || o.wanted == 0 {
        return;
    }
    let got = unix::bind(OWNER_LOCK)
        .and_then(|lock| udp::open_shared(ROCE_UDP_PORT).map(|fd| (Arc::new(fd), lock)));
    if let Ok((fd, lock)) = got {
        if watch(fd.clone()).is_ok() {
            o.owned = Some((fd, lock));
            return;
        }
    }
    if o.retry_armed {
        return;
    }
    o.retry_armed = true;
    drop(o);
    if let Ok(e) = engine() {
        e.after(
            RETRY,
            Box::new(|| {
                owner().retry_armed = false;
                try_own();
            }),
        );
    }
}

fn watch(fd: Arc<OwnedFd>) -> crate::errno::Result<()> {
    let w = Arc::downgrade(&fd);
    engine()?.watch(
        fd.as_raw_fd(),
        Arc::new(move |_| {
            let Some(fd) = w.upgrade() else { return };
            let mut buf = [0u8; 4096 + 256];
            for _ in 0..PER_EVENT {
                match udp::recv(fd.as_raw_fd(), &mut buf) {
                    // Without our address the ICRC cannot be checked: dropped.
                    Ok(Some(r)) => {
                        if let Some(to) = r.to {
                            dispatch(&buf[..r.len], r.from, SocketAddr::new(to, ROCE_UDP_PORT));
                        }
                    }
                    Err(e) if e == Errno::EINVAL => {} // truncated: dropped
                    _ => break,
                }
            }
        }),
    )
}

/// The destination QPN in a packet's BTH (bytes 5..8), if it has one.
pub fn dest_qpn(pkt: &[u8]) -> Option<u32> {
    let b = pkt.get(5..8)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// One packet that came to port 4791: QP1's to the CM, the others to the inbox of the port
/// that owns their QPN. Nothing is checked here but the QPN: the receiver checks the rest.
fn dispatch(pkt: &[u8], from: SocketAddr, to: SocketAddr) {
    match dest_qpn(pkt) {
        Some(GSI_QPN) => {
            if let Some(h) = GSI.get() {
                h(pkt, from, to);
            }
        }
        Some(qpn) => {
            if relay::forward(port_of(qpn), pkt, from, to.ip()).is_err() {
                relay::DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        None => {
            relay::DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_qpn_is_read_from_the_bth() {
        let bth = [0x64, 0, 0xff, 0xff, 0, 0x12, 0x34, 0x56, 0, 0, 0, 1];
        assert_eq!(dest_qpn(&bth), Some(0x12_3456));
        assert_eq!(dest_qpn(&bth[..7]), None);
    }
}
