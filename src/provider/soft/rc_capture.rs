//! `RDMASHIM_PCAP` on the same-host RC/UC path, the requester's part: what a request it
//! starts and the completion that ends it stand for (PSNs from `sq_psn`, the responder's MSN),
//! handed to `ring_capture` to be written as RoCEv2 packets.

use super::qp::{Inner, SoftQp};
use super::rc::Inflight;
use super::roce::opcode::Transport;
use super::sgl_copy::{gather, take_out};
use crate::provider::SendWqe;
use crate::sys::ibv_wc_opcode::*;
use crate::sys::ibv_wc_status::*;

impl SoftQp {
    /// Writes request `w` (its first `data_len` bytes of payload) to the capture as the packets
    /// it stands for (`ring_capture`). Its local entries were checked.
    pub(super) fn capture(&self, st: &mut Inner, w: &SendWqe, data_len: u64) -> Option<(u32, u32)> {
        let mut data = vec![0u8; data_len as usize];
        // A region deregistered since the request was pushed leaves zeros in the capture.
        // SAFETY: `data` holds data_len bytes, at most the payload's length.
        let _ = unsafe { take_out(&*self.keys, &w.payload, 0, data.as_mut_ptr(), data.len()) };
        let t = if self.uc { Transport::Uc } else { Transport::Rc };
        let a = &st.attr;
        let (sgid, dgid, dest) = (a.sgid, a.dgid, a.dest_qp_num);
        // A new sq_psn (the QP was reset and connected again) starts the count again.
        let (base, mut psn) = st.capture_psn.unwrap_or((a.sq_psn, a.sq_psn));
        if base != a.sq_psn {
            psn = a.sq_psn;
        }
        let psns = super::ring_capture::request(t, &sgid, &dgid, dest, &mut psn, w, &data);
        st.capture_psn = Some((a.sq_psn, psn));
        psns
    }

    /// Writes the response that completing `f` stands for (`ring_capture::response`): the
    /// requester saw it happen, so it writes it. `error` is the completion's status.
    pub(super) fn capture_response(&self, st: &mut Inner, f: &Inflight, error: Option<u32>) {
        use super::ring_capture::Response;
        use super::roce::headers::NakCode;
        let Some(psns) = f.captured else { return };
        if self.uc {
            return; // nobody answers UC
        }
        let mut value = [0u8; 8];
        let mut data = Vec::new();
        let r = match error {
            Some(IBV_WC_REM_ACCESS_ERR) => Response::Nak(NakCode::RemoteAccessError),
            Some(IBV_WC_REM_INV_REQ_ERR) => Response::Nak(NakCode::InvalidRequest),
            Some(IBV_WC_REM_OP_ERR) => Response::Nak(NakCode::RemoteOperationalError),
            Some(_) => return, // a local error, a flush or retries run out: no response
            None => match (f.wc_opcode, &f.local) {
                (IBV_WC_RDMA_READ, Some(sgl)) => {
                    // The response has just been copied into the READ's buffers (zeros in the
                    // capture where one was deregistered since).
                    data.resize(f.len as usize, 0);
                    let _ = gather(&*self.keys, sgl, &mut data);
                    Response::Read(&data)
                }
                (IBV_WC_COMP_SWAP | IBV_WC_FETCH_ADD, Some(sgl)) => {
                    let _ = gather(&*self.keys, sgl, &mut value); // the original value
                    Response::Atomic(u64::from_ne_bytes(value))
                }
                _ => Response::Ack,
            },
        };
        if error.is_none() {
            st.capture_msn = (st.capture_msn + 1) & 0x00ff_ffff;
        }
        let a = &st.attr;
        super::ring_capture::response(&a.sgid, &a.dgid, self.qpn, psns, st.capture_msn, r);
    }
}
