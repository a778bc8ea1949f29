//! The direct path of one-sided operations on the same host: RDMA WRITE, READ and atomics that
//! reach the target's registered memory from the initiator's own thread, with one copy and no
//! thread of the target running.
//!
//! * At `ibv_reg_mr`, a region with remote rights whose memory is private anonymous has its
//!   whole pages moved onto a memfd ([`share`]); anything else keeps the copy path.
//! * The first request a responder executes on a region through the ring (rkey, bounds and
//!   rights checked as always) makes it send the requester a grant over the link's socket:
//!   the memfd, read-only unless the requester may write ([`grant`]). It sends it before it
//!   releases the request's slot and counts it in the ring, so a requester that sees its
//!   request complete knows the grant is waiting and takes it on its next request.
//! * A requester with a grant executes a WRITE (without immediate), READ or atomic itself when
//!   it lies inside the grant, the grant is still valid, the responder's QP allows it and
//!   nothing earlier of ours is outstanding (so RC ordering holds); otherwise the copy path.
//! * Deregistering revokes: the control word first, then our pages go back to private memory,
//!   before `ibv_dereg_mr` returns.

pub mod grant;
pub mod share;

/// `RDMASHIM_DIRECT=off` keeps every region on the copy path (read once per process).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RDMASHIM_DIRECT").is_none_or(|v| v != "off"))
}

use grant::Granted;
use std::sync::Arc;

/// One link's grants, both ways (under the link's lock, a leaf under the QP's).
#[derive(Default)]
pub struct Grants {
    /// Grant messages we have read (compared with the count the responder publishes).
    pub taken: u64,
    /// The peer's regions we may reach, by rkey.
    pub by_key: rustc_hash::FxHashMap<u32, Arc<Granted>>,
    /// Regions we granted the peer: rkey → the region's address, so a later region that happens
    /// to get the same key is granted again. Our keys only, so a fast hash.
    pub sent: rustc_hash::FxHashMap<u32, usize>,
    /// A reader (not the progress thread) saw the peer hang up; the progress thread's own read
    /// reports it.
    pub hung_up: bool,
}
