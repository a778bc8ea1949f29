//! The embedded software provider: the [`Soft`] implementation of the provider seam
//! (`crate::provider`).
//!
//! * [`qp`]: a soft QP (`TransportQp`): its QPN and socket, the `BY_QPN` table that leads a
//!   peer's handshake to it, the link handshake at RTR, the move to ERR and its flushes;
//! * `rc` (requester: segments into the ring, completions in order, RNR and transport timers)
//!   and `rc_recv` (responder: every segment checked by [`segcheck`], then executed);
//! * `ud` (datagrams, GRH, qkey) over [`datagram`]; [`ring`] and [`link`] are the shared-memory
//!   rings and their handshake.
//!
//! It reaches memory, CQs, SRQs and async events only through the seam's traits, and the
//! process-wide plumbing (progress engine, sockets, shm, fork) through `crate::runtime`.
//!
//! Same-host transport, one scheme for threads and processes alike:
//! * every RC QP owns an abstract unix socket named after its QPN (so QPNs are unique per
//!   network namespace and lead to the owning process without a daemon);
//! * when a QP reaches RTR, the QP with the smaller QPN connects to its peer's socket and hands it
//!   a shared-memory segment (memfd) holding two single-producer rings, one per direction, plus
//!   its process doorbell; the peer answers with its own doorbell ([`link`]);
//! * data moves by copying into and out of ring slots; the sender's completion is generated when
//!   the receiver has consumed the message into a posted receive (the RC ACK);
//! * work moves when the application posts or polls (no system call on that path) and otherwise
//!   in the per-process progress thread ([`crate::runtime::engine`]) that sleeps in `epoll_wait`
//!   and is woken through an eventfd only when it has said, in shared memory, that it is asleep.

pub mod datagram;
pub mod direct;
pub mod groups;
pub mod link;
pub mod net;
pub mod qp;
mod rc;
mod rc_capture;
mod rc_direct;
mod rc_net;
mod rc_recv;
pub mod ring;
mod ring_capture;
pub mod roce;
pub mod segcheck;
mod sgl_copy;
#[cfg(test)]
mod test_keys;
pub mod transport;
mod ud;
mod ud_backlog;
mod ud_net;
mod ud_ring;
mod wqe;

use crate::errno::Result;
use crate::provider::{Provider, QpInit, TransportQp};
use std::sync::Arc;

/// The soft provider's operations.
pub struct Soft;

/// The one instance (the provider keeps no per-device state of its own).
pub static SOFT: Soft = Soft;

impl Provider for Soft {
    fn name(&self) -> &'static str {
        "soft"
    }

    fn create_qp(&self, init: QpInit) -> Result<Arc<dyn TransportQp>> {
        Ok(qp::SoftQp::create(init)?)
    }

    fn progress(&self) {
        if let Ok(e) = crate::runtime::engine::engine() {
            e.kick();
        }
    }

    fn share_memory(
        &self,
        addr: usize,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Option<Arc<dyn crate::provider::SharedRegion>> {
        if !direct::enabled() {
            return None;
        }
        let shared = direct::share::SharedMem::create(addr, len, iova, access);
        trace_move((addr, len), &shared, "direct path for peers", "copy path");
        shared.ok().map(|s| s as Arc<dyn crate::provider::SharedRegion>)
    }

    fn export_memory(
        &self,
        addr: usize,
        len: usize,
        access: u32,
    ) -> Result<Arc<dyn crate::provider::SharedRegion>> {
        let shared = direct::share::SharedMem::create_span(addr, len, access);
        trace_move((addr, len), &shared, "for another process", "not exported");
        match shared {
            Ok(s) => Ok(s),
            Err(_) => Err(crate::errno::Errno::EOPNOTSUPP),
        }
    }
}

/// The trace line saying whether a region's pages moved onto a memfd (and `why` they did) or
/// not (`kept`, and the reason).
fn trace_move(
    (addr, len): (usize, usize),
    r: &std::result::Result<Arc<direct::share::SharedMem>, direct::share::NotShared>,
    why: &str,
    kept: &str,
) {
    match r {
        Ok(s) => crate::trace::note(format_args!(
            "region {addr:#x}+{len}: pages {:#x}+{} on a memfd, {why}",
            s.base, s.len
        )),
        Err(e) => crate::trace::note(format_args!("region {addr:#x}+{len}: {kept} ({e:?})")),
    }
}
