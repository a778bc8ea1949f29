//! The one builder of send requests. `ibv_post_send` (through [`post_send_wr`]) and the
//! `ibv_wr_*` posting API (`qp_ex.rs`) both make their [`SendWqe`] here, so a request is read,
//! copied (inline data) and checked the same way whichever API posted it.

use super::ah::Ah;
use super::mw::LocalOp;
use super::objects;
use super::qp::Qp;
use crate::errno::{Errno, Result};
use crate::provider::{InlineData, Payload, SendWqe, Sge, Sgl};
use crate::sys::*;
use std::sync::Arc;

use ibv_wr_opcode::*;

/// The operation part of a work request (`ibv_send_wr.opcode` and its union, or an `ibv_wr_<op>`
/// call).
pub struct Op {
    pub opcode: u32,
    pub imm: Option<u32>,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// `IBV_WR_BIND_MW`: the window and what to bind it to.
    pub bind: Option<BindArgs>,
}

/// A window bind as given (`wr.bind_mw`, `ibv_wr_bind_mw` or `ibv_bind_mw`), checked by
/// `mw::check_bind` against the QP when the request is posted.
#[derive(Clone, Copy)]
pub struct BindArgs {
    /// The window's address (a registry key, dereferenced only after a lookup).
    pub mw: usize,
    /// Type 2: the new rkey; `None` for an `ibv_bind_mw` (type 1).
    pub rkey: Option<u32>,
    pub mr: usize,
    pub addr: u64,
    pub length: u64,
    pub access: u32,
}

impl BindArgs {
    pub fn new(mw: *mut ibv_mw, rkey: Option<u32>, info: &ibv_mw_bind_info) -> BindArgs {
        BindArgs {
            mw: mw as usize,
            rkey,
            mr: info.mr as usize,
            addr: info.addr,
            length: info.length,
            access: info.mw_access_flags,
        }
    }

    fn info(&self) -> ibv_mw_bind_info {
        ibv_mw_bind_info {
            mr: self.mr as *mut ibv_mr,
            addr: self.addr,
            length: self.length,
            mw_access_flags: self.access,
        }
    }
}

impl Op {
    pub fn new(opcode: u32) -> Op {
        Op { opcode, imm: None, remote_addr: 0, rkey: 0, compare_add: 0, swap: 0, bind: None }
    }
}

/// Operations of the send queue that reach no peer (executed by verbs when posted).
fn is_local(opcode: u32) -> bool {
    matches!(opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV)
}

fn is_atomic(opcode: u32) -> bool {
    matches!(opcode, IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD)
}

/// Operations that need no response: their data may be inline (copied at post time), and they
/// are all a UC QP may post.
fn one_way(opcode: u32) -> bool {
    matches!(
        opcode,
        IBV_WR_SEND
            | IBV_WR_SEND_WITH_IMM
            | IBV_WR_SEND_WITH_INV
            | IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
    )
}

/// A send request being built: operation, then data (SGEs or inline), then (UD) destination;
/// [`SendWr::check`] validates its shape and [`SendWr::post`] posts it.
pub struct SendWr {
    wqe: SendWqe,
    /// Number of SGEs given (counted against `max_send_sge`; 0 for `wr_set_inline_data`).
    num_sge: usize,
    /// `IBV_SEND_INLINE` was set.
    inline_flag: bool,
    /// A UD destination was given (it may still have been refused).
    has_ud: bool,
    /// The UD destination (address handle, remote QPN and qkey), resolved by `post`.
    ud: Option<(Arc<Ah>, u32, u32)>,
    /// The data given cannot be posted (a NULL inline buffer, inline data for a READ, …).
    refused: bool,
    /// `IBV_WR_BIND_MW`: the bind given.
    bind: Option<BindArgs>,
}

impl SendWr {
    /// Starts a request; `EINVAL` for an operation this provider does not implement (TSO,
    /// atomic write, …).
    pub fn new(wr_id: u64, send_flags: u32, op: Op) -> Result<SendWr> {
        if !matches!(
            op.opcode,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_RDMA_READ
                | IBV_WR_ATOMIC_CMP_AND_SWP
                | IBV_WR_ATOMIC_FETCH_AND_ADD
                | IBV_WR_BIND_MW
                | IBV_WR_LOCAL_INV
                | IBV_WR_SEND_WITH_INV
        ) {
            return Err(Errno::EINVAL);
        }
        if op.opcode == IBV_WR_BIND_MW && op.bind.is_none() {
            return Err(Errno::EINVAL);
        }
        let f = |b: ibv_send_flags| send_flags & b.0 != 0;
        Ok(SendWr {
            wqe: SendWqe {
                wr_id,
                opcode: op.opcode,
                signaled: f(ibv_send_flags::IBV_SEND_SIGNALED),
                solicited: f(ibv_send_flags::IBV_SEND_SOLICITED),
                imm: op.imm,
                payload: Payload::Sges(Sgl::empty()),
                len: 0,
                remote_addr: op.remote_addr,
                rkey: op.rkey,
                compare_add: op.compare_add,
                swap: op.swap,
                ud: None,
                xrc_srqn: 0,
                seq: 0,
                local_status: 0,
            },
            num_sge: 0,
            inline_flag: f(ibv_send_flags::IBV_SEND_INLINE),
            has_ud: false,
            ud: None,
            refused: false,
            bind: op.bind,
        })
    }

    pub fn opcode(&self) -> u32 {
        self.wqe.opcode
    }

    /// The scatter/gather list. With `IBV_SEND_INLINE`, a SEND or RDMA WRITE copies the data now
    /// (`EINVAL`, and the request is refused, if it cannot be read).
    ///
    /// # Safety
    /// With `IBV_SEND_INLINE` set, every entry's buffer is readable for its length (the verbs
    /// contract for inline data).
    pub unsafe fn set_sges(&mut self, sges: &[ibv_sge]) -> Result<()> {
        self.wqe.len = sges.iter().map(|s| s.length as u64).sum();
        self.num_sge = sges.len();
        self.wqe.payload = if self.inline_flag && one_way(self.wqe.opcode) {
            let bufs = sges.iter().map(|s| (s.addr as *const u8, s.length as usize));
            // SAFETY: per the function's contract.
            match unsafe { InlineData::gather(bufs) } {
                Ok(v) => Payload::Inline(v),
                Err(e) => {
                    self.refused = true;
                    self.wqe.payload = Payload::Sges(Sgl::empty());
                    return Err(e);
                }
            }
        } else {
            Payload::Sges(sgl_of(sges, !one_way(self.wqe.opcode)))
        };
        Ok(())
    }

    /// Inline data given as buffers (`wr_set_inline_data`): copied now. READ and atomics need a
    /// local buffer for their result, so they refuse it.
    ///
    /// # Safety
    /// Every buffer is readable for its length.
    pub unsafe fn set_inline(&mut self, bufs: &[(*const u8, usize)]) -> Result<()> {
        // SAFETY: per the function's contract.
        match unsafe { InlineData::gather(bufs.iter().copied()) } {
            Ok(v) if one_way(self.wqe.opcode) => {
                self.wqe.len = v.as_slice().len() as u64;
                self.wqe.payload = Payload::Inline(v);
                self.num_sge = 0;
                Ok(())
            }
            Ok(_) => {
                self.refused = true;
                Err(Errno::EINVAL)
            }
            Err(e) => {
                self.refused = true;
                Err(e)
            }
        }
    }

    /// The destination of a UD send (`EINVAL` for an address handle that is not live).
    pub fn set_ud_addr(
        &mut self,
        ah: *mut ibv_ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result<()> {
        self.has_ud = true;
        let ah = objects().ahs.get(ah);
        self.ud = ah.as_ref().ok().map(|ah| (ah.clone(), remote_qpn, remote_qkey));
        ah.map(|_| ())
    }

    /// The SRQ at the target that an XRC request names (`wr.qp_type.xrc.remote_srqn`,
    /// `ibv_wr_set_xrc_srqn`).
    pub fn set_xrc_srqn(&mut self, srqn: u32) {
        self.wqe.xrc_srqn = srqn;
    }

    /// The checks every request passes before anything is queued: data accepted, SGE count,
    /// atomics on exactly one 8-byte entry, and for UD a destination and a SEND opcode.
    pub fn check(&self, qp: &Qp) -> Result<()> {
        let w = &self.wqe;
        if self.refused || self.num_sge > qp.cap.max_send_sge as usize {
            return Err(Errno::EINVAL);
        }
        if is_atomic(w.opcode) && (self.num_sge != 1 || w.len != 8) {
            return Err(Errno::EINVAL);
        }
        // A bind or local invalidate carries no data (`ibv_wr_set_sge` after one is refused).
        if is_local(w.opcode) && (self.num_sge != 0 || w.len != 0) {
            return Err(Errno::EINVAL);
        }
        // UC has no responses: no READ, no atomics (IBA 9.4; rdma-core providers say EINVAL).
        if qp.qp_type == ibv_qp_type::IBV_QPT_UC && !one_way(w.opcode) && !is_local(w.opcode) {
            return Err(Errno::EINVAL);
        }
        if let Some(b) = &self.bind {
            if qp.qp_type != ibv_qp_type::IBV_QPT_UD {
                super::mw::check_bind(qp.pd()?, b.mw as *mut ibv_mw, b.rkey, &b.info())?;
            }
        }
        if qp.qp_type == ibv_qp_type::IBV_QPT_UD {
            if !self.has_ud || self.ud.is_none() {
                return Err(Errno::EINVAL);
            }
            if !matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) {
                return Err(Errno::EINVAL);
            }
        }
        Ok(())
    }

    /// Posts the request (checked by [`SendWr::check`]) through `Qp::post_send`, which takes
    /// it from the builder where it was built: a request is large (its inline data), and is
    /// not copied on the way (so a builder posts once). `EINVAL` for a bind whose window or MR
    /// went since `check`. An RC QP ignores a UD destination, as it ignores `wr.ud`.
    pub fn post(&mut self, qp: &Qp) -> Result<()> {
        if qp.qp_type == ibv_qp_type::IBV_QPT_UD {
            if let Some((ah, qpn, qkey)) = &self.ud {
                self.wqe.ud = Some(super::ud::resolve(ah, *qpn, *qkey));
            }
        }
        let local = match (self.wqe.opcode, &self.bind) {
            (IBV_WR_BIND_MW, Some(b)) => Some(LocalOp::Bind(super::mw::check_bind(
                qp.pd()?,
                b.mw as *mut ibv_mw,
                b.rkey,
                &b.info(),
            )?)),
            (IBV_WR_LOCAL_INV, _) => {
                Some(LocalOp::Invalidate { pd: qp.pd()?.domain(), rkey: self.wqe.rkey })
            }
            _ => None,
        };
        qp.post_send(&mut self.wqe, self.num_sge, local)
    }
}

/// A C scatter/gather array as a slice (`EINVAL` for a negative count or a NULL array).
///
/// # Safety
/// `sg` is valid for `n` entries, for `'a`, when `n > 0`.
unsafe fn sge_slice<'a>(sg: *const ibv_sge, n: i32) -> Result<&'a [ibv_sge]> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(Errno::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: per the function's contract.
    Ok(unsafe { std::slice::from_raw_parts(sg, n as usize) })
}

/// Reads a C scatter/gather array (a receive's).
///
/// # Safety
/// `sg` is valid for `n` entries when `n > 0`.
pub unsafe fn read_sgl(sg: *const ibv_sge, n: i32) -> Result<Sgl> {
    // SAFETY: per the function's contract.
    let s = unsafe { sge_slice(sg, n) }?;
    Ok(sgl_of(s, true))
}

/// A C scatter/gather array as the provider's list (one entry needs no allocation), its
/// addresses translated to this process's where a region has another iova or is a null MR
/// (`writes`: the operation writes the list, as receives, READs and atomics do).
pub fn sgl_of(s: &[ibv_sge], writes: bool) -> Sgl {
    let sge = |e: &ibv_sge| {
        super::mr::translate_sge(Sge { addr: e.addr, length: e.length, lkey: e.lkey }, writes)
    };
    match s {
        [one] => Sgl::One(sge(one)),
        _ => Sgl::Many(s.iter().map(sge).collect()),
    }
}

/// Builds the request an `ibv_send_wr` describes for `qp`, checks it and posts it.
///
/// # Safety
/// `wr` is a valid work request; its SGE array and, for inline sends, the buffers are readable.
pub unsafe fn post_send_wr(qp: &Qp, wr: &ibv_send_wr) -> Result<()> {
    // SAFETY: for the *_WITH_IMM opcodes the union holds imm_data (read only for them).
    let imm_data = unsafe { wr.imm_data_invalidated_rkey_union.imm_data };
    let op = match wr.opcode {
        IBV_WR_SEND => Op::new(IBV_WR_SEND),
        IBV_WR_SEND_WITH_IMM => Op { imm: Some(imm_data), ..Op::new(wr.opcode) },
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_READ | IBV_WR_RDMA_WRITE_WITH_IMM => {
            // SAFETY: RDMA opcodes use the wr.rdma member of the union.
            let r = unsafe { wr.wr.rdma };
            let imm = (wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM).then_some(imm_data);
            Op { imm, remote_addr: r.remote_addr, rkey: r.rkey, ..Op::new(wr.opcode) }
        }
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            // SAFETY: atomic opcodes use the wr.atomic member of the union.
            let a = unsafe { wr.wr.atomic };
            Op {
                remote_addr: a.remote_addr,
                rkey: a.rkey,
                compare_add: a.compare_add,
                swap: a.swap,
                ..Op::new(wr.opcode)
            }
        }
        IBV_WR_BIND_MW => {
            // SAFETY: a bind uses the wr.bind_mw member of its union.
            let b = unsafe { &wr.bind_mw_tso_union.bind_mw };
            let args = BindArgs::new(b.mw, Some(b.rkey), &b.bind_info);
            Op { bind: Some(args), ..Op::new(wr.opcode) }
        }
        IBV_WR_LOCAL_INV | IBV_WR_SEND_WITH_INV => {
            // SAFETY: the *_INV opcodes use the union's invalidate_rkey.
            let rkey = unsafe { wr.imm_data_invalidated_rkey_union.invalidated_rkey };
            Op { rkey, ..Op::new(wr.opcode) }
        }
        _ => Op::new(wr.opcode), // refused by SendWr::new
    };
    let mut b = SendWr::new(wr.wr_id, wr.send_flags, op)?;
    // A bind or local invalidate has no data: its scatter/gather list is ignored, as by
    // rdma-core's providers.
    if !is_local(wr.opcode) {
        // SAFETY: per the function's contract.
        let sges = unsafe { sge_slice(wr.sg_list, wr.num_sge) }?;
        // SAFETY: an inline send's buffers are readable at post time (the verbs contract).
        unsafe { b.set_sges(sges) }?;
    }
    if qp.qp_type == ibv_qp_type::IBV_QPT_UD {
        // SAFETY: a UD QP's work requests use the wr.ud member of the union.
        let u = unsafe { wr.wr.ud };
        b.set_ud_addr(u.ah, u.remote_qpn, u.remote_qkey)?;
    }
    if qp.qp_type == ibv_qp_type::IBV_QPT_XRC_SEND {
        // SAFETY: an XRC_SEND QP's work requests use the qp_type.xrc member of the union.
        b.set_xrc_srqn(unsafe { wr.qp_type.xrc.remote_srqn });
    }
    b.check(qp)?;
    b.post(qp)
}

/// `ibv_bind_mw`: a type 1 window's bind through `qp`'s send queue, as a BIND_MW request.
pub fn bind_type1(qp: &Qp, mw: *mut ibv_mw, bind: &ibv_mw_bind) -> Result<()> {
    let args = BindArgs::new(mw, None, &bind.bind_info);
    let mut b = SendWr::new(
        bind.wr_id,
        bind.send_flags,
        Op { bind: Some(args), ..Op::new(IBV_WR_BIND_MW) },
    )?;
    b.check(qp)?;
    b.post(qp)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inline data through the builder: buffers concatenated, a NULL one refused.
    #[test]
    fn inline_buffers() {
        let a = [1u8, 2, 3];
        let b = [4u8];
        let mut w = SendWr::new(1, 0, Op::new(IBV_WR_SEND)).expect("SEND is supported");
        // SAFETY: both buffers are readable for their lengths.
        let r = unsafe { w.set_inline(&[(a.as_ptr(), 3), (std::ptr::null(), 0), (b.as_ptr(), 1)]) };
        assert_eq!(r, Ok(()));
        match &w.wqe.payload {
            Payload::Inline(d) => assert_eq!(d.as_slice(), &[1, 2, 3, 4]),
            Payload::Sges(_) => panic!("inline data kept as SGEs"),
        }
        // SAFETY: a NULL buffer is refused before being read.
        assert_eq!(unsafe { w.set_inline(&[(std::ptr::null(), 2)]) }, Err(Errno::EINVAL));
        assert!(w.refused);
        let mut r = SendWr::new(1, 0, Op::new(IBV_WR_RDMA_READ)).expect("READ is supported");
        // SAFETY: a is readable for its length.
        assert_eq!(unsafe { r.set_inline(&[(a.as_ptr(), 3)]) }, Err(Errno::EINVAL));
        assert!(SendWr::new(1, 0, Op::new(IBV_WR_BIND_MW)).is_err(), "a bind without a window");
        assert!(SendWr::new(1, 0, Op::new(IBV_WR_TSO)).is_err());
    }
}
