//! The network link: RoCEv2 over UDP to QPs in other network namespaces or on other hosts.
//!
//! * [`endpoint`]: this process's UDP sockets and the QPN ↔ (port, slot) scheme;
//! * [`recv`]: the progress engine reads the sockets, checks each packet's ICRC and hands it to
//!   the QP its BTH names;
//! * [`rc`]: an RC QP's network path, the transport engine (`transport::RcQp`) joined to the
//!   QP's memory keys, receive queue, CQs and the socket;
//! * [`io`]: an RC QP's send side: batched, segmented sends, ACKs coalesced and kept back;
//! * [`faults`]: `RDMASHIM_FAULTS`, drops/duplicates/reordering/delays on the send side;
//! * [`trace`]: `RDMASHIM_NET_DEBUG`, an RC QP's last packets and engine state on a stall;
//! * [`well_known`]: port 4791, owned by one process per namespace, which passes other stacks'
//!   packets on ([`relay`]) to the process whose socket owns their QPN;
//! * [`route`]: whether a GID is ours (same namespace: the shared-memory rings) and the path
//!   MTU towards it.

pub mod endpoint;
pub mod faults;
mod io;
pub mod mcast;
pub mod rc;
mod rc_mem;
pub mod recv;
pub mod relay;
pub mod route;
pub mod trace;
pub mod well_known;

use std::sync::OnceLock;
use std::time::Instant;

/// The transport engine's clock: nanoseconds since the first use in this process.
pub fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// The instant of an engine time.
pub fn instant_of(ns: u64) -> Instant {
    base() + std::time::Duration::from_nanos(ns)
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}
