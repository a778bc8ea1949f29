//! The extended posting API of `ibv_qp_ex` (`ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, …,
//! `ibv_wr_complete`) and the validation of `ibv_create_qp_ex` attributes.
//!
//! Every QP is allocated as an `ibv_qp_ex` (see `Qp::raw`). The first time a QP is used with this
//! API (`ibv_create_qp_ex`, `ibv_qp_to_qp_ex`), [`enable`] registers it here and fills its
//! function pointers. Between `wr_start` and `wr_complete` the work requests being built are kept
//! in this module, keyed by the QP's address, and `wr_complete` posts them in order through
//! `Qp::post_send` — the same path as `ibv_post_send`, so both APIs can be mixed on one QP.
//!
//! Errors are reported as real providers do: the builders return nothing, so a problem they meet
//! (an unsupported operation, a bad address handle, data before an operation) is remembered and
//! `wr_complete` returns it without posting anything. `wr_complete` checks the whole batch (shape
//! of every request, QP state, room in the send queue) before posting the first request, so a
//! batch is all-or-nothing except for a race with another thread posting to the same QP.

use super::objects;
use super::qp::Qp;
pub use super::send_wr::Op;
use super::send_wr::SendWr;
use crate::errno::{Errno, Result};
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, read_lock, wait_on, write_lock};
use crate::sys::*;
use std::collections::HashMap;
use std::mem::offset_of;
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

/// `send_ops_flags` this provider implements.
pub const SUPPORTED_SEND_OPS: u64 = (ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_IMM.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0
    | MW_OPS) as u64;

/// The memory-window operations (`verbs::mw`): RC and UC.
const MW_OPS: u32 = ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_BIND_MW.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_LOCAL_INV.0
    | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_INV.0;

/// What `ibv_create_qp_ex` asks beyond a basic QP.
#[derive(Debug, PartialEq, Eq)]
pub struct CreateEx {
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (UD multicast).
    pub block_self_mcast: bool,
}

/// Checks the extended part of an `ibv_qp_init_attr_ex`: a PD is required (`EINVAL` without);
/// `SEND_OPS_FLAGS` with the operations above and `CREATE_FLAGS` with no flag or
/// `BLOCK_SELF_MCAST_LB` are supported; XRC, TSO, RSS/indirection tables, other creation flags
/// and other send operations (memory windows, invalidation, TSO, atomic write) give `EOPNOTSUPP`;
/// unknown `comp_mask` bits give `EINVAL`.
pub fn check_create_attr(a: &ibv_qp_init_attr_ex) -> Result<CreateEx> {
    use ibv_qp_init_attr_mask as m;
    let known = m::IBV_QP_INIT_ATTR_PD.0
        | m::IBV_QP_INIT_ATTR_XRCD.0
        | m::IBV_QP_INIT_ATTR_CREATE_FLAGS.0
        | m::IBV_QP_INIT_ATTR_MAX_TSO_HEADER.0
        | m::IBV_QP_INIT_ATTR_IND_TABLE.0
        | m::IBV_QP_INIT_ATTR_RX_HASH.0
        | m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
    let supported = m::IBV_QP_INIT_ATTR_PD.0
        | m::IBV_QP_INIT_ATTR_XRCD.0
        | m::IBV_QP_INIT_ATTR_CREATE_FLAGS.0
        | m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
    // An XRC target lives in an XRC domain, every other QP in a PD.
    let owner = match a.qp_type {
        ibv_qp_type::IBV_QPT_XRC_RECV => m::IBV_QP_INIT_ATTR_XRCD.0,
        _ => m::IBV_QP_INIT_ATTR_PD.0,
    };
    if a.comp_mask & !known != 0 || a.comp_mask & owner == 0 {
        return Err(Errno::EINVAL);
    }
    if a.comp_mask & !supported != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let mut ex = CreateEx { block_self_mcast: false };
    if a.comp_mask & m::IBV_QP_INIT_ATTR_CREATE_FLAGS.0 != 0 {
        let block = ibv_qp_create_flags::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.0;
        if a.create_flags & !block != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        ex.block_self_mcast = a.create_flags & block != 0;
    }
    if a.comp_mask & m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0 != 0
        && a.send_ops_flags & !SUPPORTED_SEND_OPS != 0
    {
        return Err(Errno::EOPNOTSUPP);
    }
    // The operations the QP's transport takes (ibv_wr_post(3)'s table): a QP is not created
    // with ones it cannot do (conformance: ibv_wr_post USAGE-UNSUPPORTED).
    if a.comp_mask & m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0 != 0
        && a.send_ops_flags & !send_ops_of(a.qp_type) != 0
    {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(ex)
}

/// The supported send operations a QP type takes.
fn send_ops_of(qp_type: u32) -> u64 {
    use ibv_qp_create_send_ops_flags as f;
    let send = (f::IBV_QP_EX_WITH_SEND.0 | f::IBV_QP_EX_WITH_SEND_WITH_IMM.0) as u64;
    let write = (f::IBV_QP_EX_WITH_RDMA_WRITE.0 | f::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0) as u64;
    match qp_type {
        ibv_qp_type::IBV_QPT_UD => send,
        ibv_qp_type::IBV_QPT_UC => send | write | MW_OPS as u64,
        // A target sends nothing; an initiator has no windows of its own to bind.
        ibv_qp_type::IBV_QPT_XRC_RECV => 0,
        ibv_qp_type::IBV_QPT_XRC_SEND => SUPPORTED_SEND_OPS & !(MW_OPS as u64),
        _ => SUPPORTED_SEND_OPS,
    }
}

// Every field after `wr_flags` is a function pointer (`enable` copies that tail).
const _: () = {
    assert!(offset_of!(ibv_qp_ex, wr_flags) < offset_of!(ibv_qp_ex, wr_atomic_cmp_swp));
    assert!(offset_of!(ibv_qp_ex, wr_atomic_write) + 8 == std::mem::size_of::<ibv_qp_ex>());
};

#[derive(Default)]
struct Pending {
    open: bool,
    /// The thread inside the critical region `wr_start` opened (until its `wr_complete` or
    /// `wr_abort`): another thread's `wr_start` waits for it, as ibv_wr_post(3) promises
    /// (CONCURRENCY; conformance: ibv_wr_post CONCURRENCY).
    owner: Option<std::thread::ThreadId>,
    wrs: Vec<SendWr>,
    error: Option<Errno>,
}

/// The posting-API state of one QP.
pub struct QpEx {
    qp: Weak<Qp>,
    addr: usize,
    pending: Mutex<Pending>,
    /// Signalled when the critical region is left.
    left: Condvar,
}

/// QP address → posting state, for every QP enabled for the API.
static EX: PerProcess<RwLock<HashMap<usize, Arc<QpEx>>>> =
    PerProcess::new(|| RwLock::new(HashMap::new()));

/// Enables `qp` for the posting API (idempotent): registers its state here and, the first time,
/// lets `fill` set the function pointers of its `ibv_qp_ex` (in a template, copied in under the
/// QP's lock).
pub fn enable(qp: &Arc<Qp>, fill: impl FnOnce(&mut ibv_qp_ex)) -> Arc<QpEx> {
    let addr = qp.ptr() as usize;
    let mut map = write_lock(EX.get());
    if let Some(x) = map.get(&addr) {
        if x.qp.upgrade().is_some_and(|q| Arc::ptr_eq(&q, qp)) {
            return x.clone();
        }
    }
    // A new QP (possibly at the address of a destroyed one): forget QPs that are gone.
    map.retain(|_, x| x.qp.strong_count() > 0);
    // The function pointers are the tail of the struct, after `wr_flags`: fill a template and
    // copy only that tail, so that neither `qp_base` (which other threads may read) nor the
    // fields C owns (`comp_mask`, `wr_id`, `wr_flags`) are touched.
    // SAFETY: all-zero is a valid ibv_qp_ex.
    let mut t: ibv_qp_ex = unsafe { std::mem::zeroed() };
    fill(&mut t);
    let start = offset_of!(ibv_qp_ex, wr_atomic_cmp_swp);
    qp.with_modify_lock(|| {
        // SAFETY: both structs are live ibv_qp_ex; the range lies within them. We hold the QP's
        // lock; C reads these pointers only once the QP is handed to it by our caller.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&t as *const ibv_qp_ex).cast::<u8>().add(start),
                qp.raw.as_ptr().cast::<u8>().add(start),
                std::mem::size_of::<ibv_qp_ex>() - start,
            )
        };
    });
    let x = Arc::new(QpEx {
        qp: Arc::downgrade(qp),
        addr,
        pending: Mutex::new(Pending::default()),
        left: Condvar::new(),
    });
    map.insert(addr, x.clone());
    x
}

/// The posting state of a live `ibv_qp_ex` we handed out, `EINVAL` for anything else (including
/// a destroyed QP whose entry has not been pruned yet).
pub fn lookup(p: *const ibv_qp_ex) -> Result<Arc<QpEx>> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    let map = read_lock(EX.get());
    match map.get(&(p as usize)) {
        Some(x) if x.qp.strong_count() > 0 => Ok(x.clone()),
        _ => Err(Errno::EINVAL),
    }
}

impl QpEx {
    fn with<R>(&self, f: impl FnOnce(&mut Pending) -> R) -> R {
        f(&mut lock(&self.pending))
    }

    /// `wr_start`: enters the QP's critical region, waiting while another thread is inside
    /// it, and opens a new batch (dropping one this thread left open).
    pub fn start(&self) {
        let me = std::thread::current().id();
        let mut p = lock(&self.pending);
        while p.open && p.owner.is_some_and(|o| o != me) {
            p = wait_on(&self.left, p);
        }
        *p = Pending { open: true, owner: Some(me), ..Pending::default() };
    }

    /// Leaves the critical region: the batch is taken (and the region free for others).
    fn leave(&self) -> Pending {
        let p = self.with(std::mem::take);
        self.left.notify_all();
        p
    }

    /// `wr_abort`: drops the batch and leaves the critical region.
    pub fn abort(&self) {
        self.leave();
    }

    /// Remembers an error for `wr_complete` (the first one wins).
    pub fn fail(&self, e: Errno) {
        self.with(|p| {
            p.error.get_or_insert(e);
        });
    }

    /// An `ibv_wr_<op>` call: starts a work request with the `wr_id` and `wr_flags` the caller
    /// set in the `ibv_qp_ex`; its data (SGEs or inline) and address come next.
    pub fn add(&self, wr_id: u64, flags: u32, op: Op) {
        self.with(|p| {
            if !p.open {
                p.error.get_or_insert(Errno::EINVAL);
                return;
            }
            match SendWr::new(wr_id, flags, op) {
                Ok(b) => p.wrs.push(b),
                Err(e) => {
                    p.error.get_or_insert(e);
                }
            }
        });
    }

    /// Applies `f` to the request being built, or remembers `EINVAL` if there is none.
    fn current(&self, f: impl FnOnce(&mut SendWr)) {
        self.with(|p| match p.wrs.last_mut() {
            Some(b) if p.open => f(b),
            _ => {
                p.error.get_or_insert(Errno::EINVAL);
            }
        });
    }

    /// `wr_set_sge`/`wr_set_sge_list`: the request's scatter/gather list (see
    /// [`SendWr::set_sges`]; a refusal is reported by `wr_complete`).
    ///
    /// # Safety
    /// With `IBV_SEND_INLINE` set, every entry's buffer is readable for its length (the verbs
    /// contract for inline data).
    pub unsafe fn set_sges(&self, sges: &[ibv_sge]) {
        self.current(|b| {
            // SAFETY: per the function's contract.
            let _refused_is_remembered = unsafe { b.set_sges(sges) };
        });
    }

    /// `wr_set_inline_data`/`wr_set_inline_data_list`: copies the data now.
    ///
    /// # Safety
    /// Every buffer is readable for its length.
    pub unsafe fn set_inline(&self, bufs: &[(*const u8, usize)]) {
        self.current(|b| {
            // SAFETY: per the function's contract.
            let _refused_is_remembered = unsafe { b.set_inline(bufs) };
        });
    }

    /// `wr_set_ud_addr`: the destination of a UD send (ignored by RC QPs, as `wr.ud` is).
    pub fn set_ud_addr(&self, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
        self.current(|b| {
            let _refused_is_remembered = b.set_ud_addr(ah, remote_qpn, remote_qkey);
        });
    }

    /// `wr_set_xrc_srqn`: the SRQ at the target the request names (XRC_SEND QPs).
    pub fn set_xrc_srqn(&self, srqn: u32) {
        self.current(|b| b.set_xrc_srqn(srqn));
    }

    /// `wr_complete`: posts the batch, 0 or an errno (see the module comment).
    pub fn complete(&self) -> Result<()> {
        let p = self.leave();
        if !p.open {
            return Err(Errno::EINVAL);
        }
        if let Some(e) = p.error {
            return Err(e);
        }
        let qp = self.qp.upgrade().ok_or(Errno::EINVAL)?;
        if !objects().qps.contains(self.addr as *const ibv_qp) {
            return Err(Errno::EINVAL);
        }
        let ud = qp.qp_type == ibv_qp_type::IBV_QPT_UD;
        for b in &p.wrs {
            b.check(&qp)?;
        }
        if !ud {
            let state = qp.state();
            match state {
                ibv_qp_state::IBV_QPS_RTS | ibv_qp_state::IBV_QPS_ERR => {}
                _ => return Err(Errno::EINVAL),
            }
            if state == ibv_qp_state::IBV_QPS_RTS
                && qp.sq_outstanding() + p.wrs.len() as u64 > qp.cap.max_send_wr as u64
            {
                return Err(Errno::ENOMEM);
            }
        }
        for mut b in p.wrs {
            b.post(&qp)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mask: u32) -> ibv_qp_init_attr_ex {
        // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
        let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.comp_mask = mask;
        a
    }

    #[test]
    fn create_attr_checks() {
        use ibv_qp_init_attr_mask as m;
        let pd = m::IBV_QP_INIT_ATTR_PD.0;
        let ops = m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
        let fl = m::IBV_QP_INIT_ATTR_CREATE_FLAGS.0;
        let mut a = attr(pd | ops);
        a.send_ops_flags = SUPPORTED_SEND_OPS;
        assert_eq!(check_create_attr(&a), Ok(CreateEx { block_self_mcast: false }));
        a.send_ops_flags |= ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_TSO.0 as u64;
        assert_eq!(check_create_attr(&a), Err(Errno::EOPNOTSUPP));
        assert_eq!(check_create_attr(&attr(ops)), Err(Errno::EINVAL));
        assert_eq!(check_create_attr(&attr(pd | (1 << 12))), Err(Errno::EINVAL));
        // An XRC target needs its domain, not a PD.
        let mut x = attr(m::IBV_QP_INIT_ATTR_XRCD.0);
        x.qp_type = ibv_qp_type::IBV_QPT_XRC_RECV;
        assert!(check_create_attr(&x).is_ok());
        x.comp_mask = pd;
        assert_eq!(check_create_attr(&x), Err(Errno::EINVAL));
        let mut a = attr(pd | fl);
        assert!(check_create_attr(&a).is_ok());
        a.create_flags = ibv_qp_create_flags::IBV_QP_CREATE_SCATTER_FCS.0;
        assert_eq!(check_create_attr(&a), Err(Errno::EOPNOTSUPP));
        a.create_flags = ibv_qp_create_flags::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.0;
        assert_eq!(check_create_attr(&a), Ok(CreateEx { block_self_mcast: true }));
    }
}
