//! The requester's direct path on the same host: a one-sided request (RDMA WRITE without
//! immediate, READ, aligned atomic) executed by the requester itself on the peer's granted
//! memory (`direct`), when RC order allows it: nothing of ours outstanding, or only one-sided
//! requests the ring will drain first.

use super::direct::grant::{Executed, Granted};
use super::link::Link;
use super::qp::{Inner, SoftQp};
use super::rc::Inflight;
use crate::provider::Xrc;
use crate::sys::ibv_wc_opcode::*;
use crate::sys::ibv_wc_status::IBV_WC_LOC_PROT_ERR;
use std::sync::Arc;

impl SoftQp {
    /// Executes the front request on the peer's memory itself, if the peer granted the region
    /// and its QP allows the access (see `direct`), and completes it. `false`: the copy path.
    /// Called only with nothing of ours outstanding.
    pub(super) fn try_direct(&self, st: &mut Inner, link: &Link) -> bool {
        let Some(g) = self.direct_grant(st, link) else { return false };
        let Some(w) = st.sq.front() else { return false };
        let data_len = if w.awaits_response() { 0 } else { w.len };
        let executed = g.execute(w, &*self.keys);
        if executed == Executed::Declined {
            return false;
        }
        let mut f = self.retire_front(st, data_len, 0, 0);
        f.done = true; // executed: complete at once (nothing earlier is outstanding)
        if executed == Executed::LocalFault {
            f.error = Some(IBV_WC_LOC_PROT_ERR);
        }
        st.inflight.push_back(f);
        self.reap(st, 0);
        true
    }

    /// Whether the front request could take the direct path and only requests that need no
    /// receive at the target (WRITE, READ, atomics) are outstanding on the ring, so holding it
    /// until they complete costs no SEND's progress.
    pub(super) fn direct_after_drain(&self, st: &Inner, link: &Link) -> bool {
        let one_sided = |f: &Inflight| {
            f.error.is_none()
                && matches!(
                    f.wc_opcode,
                    IBV_WC_RDMA_WRITE | IBV_WC_RDMA_READ | IBV_WC_COMP_SWAP | IBV_WC_FETCH_ADD
                )
        };
        if st.inflight.is_empty() || !st.inflight.iter().all(one_sided) {
            return false;
        }
        let Some(g) = self.direct_grant(st, link) else { return false };
        st.sq.front().is_some_and(|w| g.takes(w))
    }

    /// The peer's grant for the front request, if the request is of a kind that may take the
    /// direct path and the peer's QP allows its access.
    fn direct_grant(&self, st: &Inner, link: &Link) -> Option<Arc<Granted>> {
        // UC requests complete when sent: a direct WRITE could overtake earlier SENDs still
        // in the ring. An XRC request's rights come from the SRQ it names, which a grant of
        // one region cannot stand for.
        if self.uc || !matches!(self.xrc, Xrc::None) {
            return None;
        }
        let w = st.sq.front()?;
        let need = super::direct::grant::right_needed(w)?;
        if st.peer_gone || link.out.is_closed() || link.inn.is_closed() {
            return None;
        }
        if link.out.peer_access().is_none_or(|a| a & need != need) {
            return None;
        }
        link.grant_for(w.rkey)
    }
}
