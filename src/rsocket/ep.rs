//! A connected stream rsocket's RDMA resources (CQ and its channel, RC QP, the three
//! registered buffers) and the protocol counters of librdmacm's credit scheme.

use super::capi;
use super::wire::{self, Sge, SGE_LEN, SGL_SIZE};
use crate::errno::{zero_or, Errno, Result};
use crate::sys::*;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::ptr;

/// librdmacm's `RS_QP_CTRL_SIZE`: control messages (credits, shutdown) in flight at once.
pub const CTRL_SIZE: u32 = 4;
/// librdmacm's `RS_SNDLOWAT`: a send waits until this much send buffer is free.
pub const SNDLOWAT: u32 = 2048;
const QP_MIN: u16 = 16;
const QP_MAX: u16 = 0xFFFE;

/// Sizes chosen before the connection (options, defaults files, inherited by accepted sockets).
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub sq_size: u16,
    pub rq_size: u16,
    pub sq_inline: u32,
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub iomap_size: u32,
}

/// A zeroed heap buffer the NIC (the soft provider, or a peer through RDMA WRITE) accesses
/// behind Rust's back: only raw pointers are ever made into it.
pub struct Buf {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Buf {
    pub fn new(len: usize) -> Result<Buf> {
        let layout = Layout::from_size_align(len.max(64), 64).map_err(|_| Errno::ENOMEM)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Errno::ENOMEM);
        }
        Ok(Buf { ptr, len })
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(64), 64).expect("checked at new");
        // SAFETY: allocated by `new` with this layout; the MR over it is deregistered first
        // (Ep::drop), so nothing writes into it any more.
        unsafe { dealloc(self.ptr, layout) };
    }
}

/// The resources and counters. Field names follow librdmacm's where they mean the same.
pub struct Ep {
    pub id: *mut rdma_cm_id,
    pub comp: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub sbuf: Buf,
    pub smr: *mut ibv_mr,
    pub rbuf: Buf,
    pub rmr: *mut ibv_mr,
    /// Our target SGL (written by the peer) followed by our iomap table.
    pub tgt: Buf,
    pub tmr: *mut ibv_mr,
    pub sz: Sizes,
    pub ctrl_seqno: u32,
    pub ctrl_max_seqno: u32,
    pub sseq_no: u16,
    pub sseq_comp: u16,
    pub rseq_no: u16,
    pub rseq_comp: u16,
    pub remote_sgl: Sge,
    pub remote_sge: u32,
    pub remote_iomap: Sge,
    pub swap: bool,
    pub target_sge: usize,
    /// Our copy of the target SGL: a slot is read from `tgt` only once the completion of the
    /// peer's write into it is polled (so never while the peer may be writing it).
    targets: [Sge; SGL_SIZE],
    /// The slot the peer's next SGE write goes to (it fills them in turn, from 1).
    tgt_next: usize,
    /// Our copy of the iomap table the peer writes (after `tgt`'s SGL), entry by entry as the
    /// completions of its announcements are polled (`iomap::take_write`).
    pub peer_iomap: Vec<[u8; wire::IOMAP_LEN]>,
    pub rbuf_bytes_avail: u32,
    pub rbuf_free_offset: u32,
    pub rbuf_offset: u32,
    /// Bytes announced by data messages and not yet read: never more than the buffer.
    pub rbuf_pending: u32,
    pub sbuf_bytes_avail: u32,
    pub spos: u32,
    pub sqe_avail: i64,
    pub rmsg: VecDeque<u32>,
    pub cq_armed: bool,
    /// Our riomap registrations.
    pub iomaps: Vec<super::iomap::IoMap>,
}

// SAFETY: the raw pointers are handles of this library (checked by every entry point) and
// buffers owned by the Ep; the Ep is only used under its socket's state mutex.
unsafe impl Send for Ep {}

fn clamp_qp(v: u16) -> u16 {
    v.clamp(QP_MIN, QP_MAX)
}

impl Ep {
    /// Creates the CQ, the QP on `id` and the buffers, and posts the receives.
    pub fn create(id: *mut rdma_cm_id, mut sz: Sizes) -> Result<Ep> {
        sz.sq_size = clamp_qp(sz.sq_size);
        sz.rq_size = clamp_qp(sz.rq_size);
        sz.sbuf_size = sz.sbuf_size.max(SNDLOWAT * 2);
        sz.rbuf_size = sz.rbuf_size.max(SNDLOWAT * 2) & !1;
        // SAFETY: `id` is a live id of ours; reading one field.
        let verbs = unsafe { (*id).verbs };
        let mut ep = Ep {
            id,
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            sbuf: Buf::new(sz.sbuf_size as usize + SGE_LEN * CTRL_SIZE as usize)?,
            smr: ptr::null_mut(),
            rbuf: Buf::new(sz.rbuf_size as usize)?,
            rmr: ptr::null_mut(),
            tgt: Buf::new(SGE_LEN * SGL_SIZE + wire::IOMAP_LEN * sz.iomap_size as usize)?,
            tmr: ptr::null_mut(),
            sz,
            ctrl_seqno: 0,
            ctrl_max_seqno: CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: sz.rq_size >> 1,
            remote_sgl: Sge::default(),
            remote_sge: 1,
            remote_iomap: Sge::default(),
            swap: false,
            target_sge: 0,
            targets: [Sge::default(); SGL_SIZE],
            tgt_next: 1 % SGL_SIZE,
            peer_iomap: vec![[0; wire::IOMAP_LEN]; sz.iomap_size as usize],
            rbuf_bytes_avail: sz.rbuf_size >> 1,
            rbuf_free_offset: sz.rbuf_size >> 1,
            rbuf_offset: 0,
            rbuf_pending: 0,
            sbuf_bytes_avail: sz.sbuf_size,
            spos: 0,
            sqe_avail: sz.sq_size as i64 - CTRL_SIZE as i64,
            rmsg: VecDeque::with_capacity(sz.rq_size as usize),
            cq_armed: false,
            iomaps: Vec::new(),
        };
        // SAFETY: `verbs` is the id's context; the calls check their arguments.
        unsafe {
            ep.comp = capi::ibv_create_comp_channel(verbs);
            if ep.comp.is_null() {
                return Err(Errno::last());
            }
            let fd = (*ep.comp).fd;
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
            let cqe = sz.sq_size as i32 + sz.rq_size as i32;
            ep.cq = capi::ibv_create_cq(verbs, cqe, ptr::null_mut(), ep.comp, 0);
            if ep.cq.is_null() {
                return Err(Errno::last());
            }
            let mut attr: ibv_qp_init_attr = std::mem::zeroed();
            attr.send_cq = ep.cq;
            attr.recv_cq = ep.cq;
            attr.qp_type = ibv_qp_type::IBV_QPT_RC;
            attr.sq_sig_all = 1;
            attr.cap.max_send_wr = sz.sq_size as u32;
            attr.cap.max_recv_wr = sz.rq_size as u32;
            attr.cap.max_send_sge = 2;
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = sz.sq_inline;
            if capi::rdma_create_qp(id, ptr::null_mut(), &mut attr) != 0 {
                return Err(Errno::last());
            }
            ep.sz.sq_inline = attr.cap.max_inline_data;
            ep.qp = (*id).qp;
            let pd = (*id).pd;
            let local = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
            let remote = local | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 as i32;
            ep.smr = capi::ibv_reg_mr(pd, ep.sbuf.ptr.cast(), ep.sbuf.len, local);
            ep.rmr = capi::ibv_reg_mr(pd, ep.rbuf.ptr.cast(), ep.rbuf.len, remote);
            ep.tmr = capi::ibv_reg_mr(pd, ep.tgt.ptr.cast(), ep.tgt.len, remote);
            if ep.smr.is_null() || ep.rmr.is_null() || ep.tmr.is_null() {
                return Err(Errno::last());
            }
        }
        for _ in 0..sz.rq_size {
            ep.post_recv()?;
        }
        Ok(ep)
    }

    pub fn comp_fd(&self) -> i32 {
        // SAFETY: our live completion channel.
        unsafe { (*self.comp).fd }
    }

    pub fn post_recv(&self) -> Result<()> {
        // SAFETY: all-zero is a valid receive request (no SGEs).
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = RECV_FLAG;
        let mut bad = ptr::null_mut();
        // SAFETY: our live QP and a request on the stack.
        zero_or(unsafe { capi::ibv_post_recv(self.qp, &mut wr, &mut bad) })
    }

    /// Posts an RDMA WRITE with immediate `msg` (the data in `sges`, possibly none).
    pub fn post_write_msg(
        &self,
        sges: &mut [ibv_sge],
        msg: u32,
        inline: bool,
        addr: u64,
        rkey: u32,
    ) -> Result<()> {
        // SAFETY: all-zero is a valid send request; the fields used are set below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = msg as u64;
        wr.sg_list = if sges.is_empty() { ptr::null_mut() } else { sges.as_mut_ptr() };
        wr.num_sge = sges.len() as i32;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = if inline { ibv_send_flags::IBV_SEND_INLINE.0 } else { 0 };
        wr.imm_data_invalidated_rkey_union.imm_data = msg.to_be();
        wr.wr.rdma = rdma_t { remote_addr: addr, rkey };
        let mut bad = ptr::null_mut();
        // SAFETY: our live QP; the SGEs point into the registered send buffer or, inline,
        // at caller memory that is copied during the call.
        zero_or(unsafe { capi::ibv_post_send(self.qp, &mut wr, &mut bad) })
    }

    /// Posts an RDMA WRITE without immediate (riowrite: data straight into a peer's iomap).
    pub fn post_write(
        &self,
        sges: &mut [ibv_sge],
        wr_id: u32,
        inline: bool,
        addr: u64,
        rkey: u32,
    ) -> Result<()> {
        // SAFETY: as in post_write_msg.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id as u64;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as i32;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = if inline { ibv_send_flags::IBV_SEND_INLINE.0 } else { 0 };
        wr.wr.rdma = rdma_t { remote_addr: addr, rkey };
        let mut bad = ptr::null_mut();
        // SAFETY: as in post_write_msg.
        zero_or(unsafe { capi::ibv_post_send(self.qp, &mut wr, &mut bad) })
    }

    /// Our target SGL slot `i` (the peer refills it, we consume it).
    pub fn target(&self, i: usize) -> Sge {
        self.targets[i]
    }

    pub fn set_target(&mut self, i: usize, s: Sge) {
        self.targets[i] = s;
    }

    /// Takes in the SGE the peer has just written (an SGL message with 16 bytes of data, whose
    /// completion was polled): the next slot in turn, in the peer's byte order.
    pub fn take_target_write(&mut self) {
        let i = self.tgt_next;
        let mut b = [0u8; SGE_LEN];
        // SAFETY: i < SGL_SIZE, inside `tgt`; a volatile copy since it is the peer's memory
        // to write (a misbehaving peer may write it at any time: we only get its bytes).
        unsafe {
            let p = self.tgt.ptr.add(i * SGE_LEN);
            for (k, x) in b.iter_mut().enumerate() {
                *x = ptr::read_volatile(p.add(k));
            }
        }
        let s = Sge::from_bytes(&b);
        self.targets[i] = if self.swap {
            Sge {
                addr: s.addr.swap_bytes(),
                key: s.key.swap_bytes(),
                length: s.length.swap_bytes(),
            }
        } else {
            s
        };
        self.tgt_next = (i + 1) % SGL_SIZE;
    }

    /// Copies `n` bytes of the receive ring at `off` (wrapping) to `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `n` writes; `n` ≤ the ring size.
    pub unsafe fn ring_copy(&self, off: u32, dst: *mut u8, n: usize) {
        let size = self.sz.rbuf_size as usize;
        let off = off as usize % size;
        let first = n.min(size - off);
        // SAFETY: both ranges lie inside the ring; `dst` per the contract.
        unsafe {
            ptr::copy_nonoverlapping(self.rbuf.ptr.add(off), dst, first);
            ptr::copy_nonoverlapping(self.rbuf.ptr, dst.add(first), n - first);
        }
    }

    /// Moves the QP to ERR so queued receives flush (a waiter in rpoll wakes up).
    pub fn to_error(&self) {
        // SAFETY: all-zero plus the state is a valid modify request on our live QP.
        unsafe {
            let mut a: ibv_qp_attr = std::mem::zeroed();
            a.qp_state = ibv_qp_state::IBV_QPS_ERR;
            capi::ibv_modify_qp(self.qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32);
        }
    }
}

impl Drop for Ep {
    fn drop(&mut self) {
        // SAFETY: every handle is ours and destroyed once, MRs before their buffers (the
        // buffers drop after this body), the QP before its CQ, the CQ before its channel.
        unsafe {
            for m in self.iomaps.drain(..) {
                capi::ibv_dereg_mr(m.mr);
            }
            for mr in [self.smr, self.rmr, self.tmr] {
                if !mr.is_null() {
                    capi::ibv_dereg_mr(mr);
                }
            }
            if !self.qp.is_null() {
                capi::rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                capi::ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                capi::ibv_destroy_comp_channel(self.comp);
            }
        }
    }
}

/// `wr_id` bit of receive requests (librdmacm's `RS_WR_ID_FLAG_RECV`).
pub const RECV_FLAG: u64 = 1 << 63;
