//! What the soft provider reads from a send request (completion opcode, rights its local
//! buffers need), and the completion of local requests (memory-window binds and local
//! invalidations, executed by verbs when posted) in send-queue order on the ring path.

use super::qp::{Inner, SoftQp};
use crate::provider::{QpState, SendWqe, ACCESS_LOCAL_WRITE};
use crate::sys::*;

use ibv_wc_opcode::*;
use ibv_wc_status::*;
use ibv_wr_opcode::*;

impl SendWqe {
    pub fn wc_opcode(&self) -> u32 {
        match self.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
            IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
            IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
            IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
            IBV_WR_BIND_MW => IBV_WC_BIND_MW,
            IBV_WR_LOCAL_INV => IBV_WC_LOCAL_INV,
            _ => IBV_WC_SEND,
        }
    }

    /// A local operation (bind, local invalidate): nothing goes to the peer.
    pub(super) fn is_local(&self) -> bool {
        matches!(self.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV)
    }

    pub(super) fn awaits_response(&self) -> bool {
        matches!(
            self.opcode,
            IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        )
    }

    /// Rights the local buffers need: READ and atomics write their result there.
    pub(super) fn local_access(&self) -> u32 {
        if self.awaits_response() {
            ACCESS_LOCAL_WRITE
        } else {
            0
        }
    }
}

impl SoftQp {
    /// Completes the local request at the front of the send queue behind what is in flight
    /// (its status decided when verbs executed it); `false` if its error failed the QP.
    pub(super) fn complete_local(&self, st: &mut Inner) -> bool {
        let Some(w) = st.sq.pop_front() else { return true };
        let status = w.local_status;
        let mut f = self.inflight(w, 0, 0);
        f.done = true;
        f.len = 0;
        if status != IBV_WC_SUCCESS {
            f.error = Some(status);
        }
        st.inflight.push_back(f);
        self.reap(st, 0);
        st.state == QpState::Rts
    }
}
