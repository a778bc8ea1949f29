//! Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`, SEND
//! with invalidate).
//!
//! A window is an entry of the MR key table (`mr.rs`) under its current rkey: bound, it reaches
//! `[addr, addr+length)` of the MR it is bound to, from `addr` (or from 0 with
//! `IBV_ACCESS_ZERO_BASED`), with the window's rights only; unbound, it reaches nothing. So the
//! provider checks an rkey the same way whether it names an MR or a window, on the target,
//! against this process's table. A window's key is never an lkey.
//!
//! A window owns every key of its index (the upper 24 bits; `mr::fresh_key` keeps indices
//! apart), so a bind can take `ibv_inc_rkey(rkey)` (type 1) or the caller's key of the same
//! index (type 2) without a collision. Binds and invalidations are executed when posted (QP in
//! RTS) and complete in send-queue order (`SendWqe::local_status`).

use super::mr::{fresh_key, Mr, Reg, KEYS};
use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{AccessError, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_WRITE};
use crate::runtime::{lock, read_lock, write_lock};
use crate::sys::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use ibv_wc_status::*;

const TYPE_1: u32 = ibv_mw_type::IBV_MW_TYPE_1;
const TYPE_2: u32 = ibv_mw_type::IBV_MW_TYPE_2;
const ZERO_BASED: u32 = ibv_access_flags::IBV_ACCESS_ZERO_BASED.0;
const MW_BIND: u32 = ibv_access_flags::IBV_ACCESS_MW_BIND.0;
/// The rights a window may grant (`mw_access_flags`).
const WINDOW_RIGHTS: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;

/// `ibv_inc_rkey`: the low 8 bits (the tag) increase, the index stays.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

pub struct Mw {
    pub raw: CBox<ibv_mw>,
    /// The innermost PD (the one the key table compares).
    pub pd: Arc<Pd>,
    pub kind: u32,
    state: Mutex<State>,
}

struct State {
    /// The current rkey (in the key table, and in `raw.rkey`).
    rkey: u32,
    /// The MR the window is bound to.
    bound: Option<Arc<Mr>>,
}

/// What a window grants once bound: `[addr, addr+len)` of `mr`'s iova space, from `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub addr: u64,
    pub len: usize,
    pub access: u32,
}

/// The checks of a bind against the MR's registration (`mr_access`, its iova range): the
/// window's rights, where it starts in its own key space, and the range inside the MR.
/// `EINVAL` for rights a window cannot have, a range outside the MR or an MR without
/// `IBV_ACCESS_MW_BIND`; remote write and atomic need the MR's local write.
pub fn check_range(mr_access: u32, mr_iova: u64, mr_len: usize, r: Range) -> Result<u64> {
    if r.access & !(WINDOW_RIGHTS | ZERO_BASED) != 0 || mr_access & MW_BIND == 0 {
        return Err(Errno::EINVAL);
    }
    if r.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
        && mr_access & ACCESS_LOCAL_WRITE == 0
    {
        return Err(Errno::EINVAL);
    }
    let off = r.addr.checked_sub(mr_iova).ok_or(Errno::EINVAL)?;
    let end = off.checked_add(r.len as u64).ok_or(Errno::EINVAL)?;
    if end > mr_len as u64 {
        return Err(Errno::EINVAL);
    }
    Ok(if r.access & ZERO_BASED != 0 { 0 } else { r.addr })
}

impl Mw {
    /// `ibv_alloc_mw`: an unbound window of `pd` (`EINVAL` for an unknown type).
    pub fn alloc(pd: Arc<Pd>, kind: u32) -> Result<*mut ibv_mw> {
        if kind != TYPE_1 && kind != TYPE_2 {
            return Err(Errno::EINVAL);
        }
        let given = pd.raw.as_ptr();
        let dom = pd.domain();
        let mut raw: CBox<ibv_mw> = CBox::zeroed();
        let r = raw.init();
        r.context = dom.ctx.ptr();
        r.pd = given;
        r.type_ = kind;
        let p = raw.as_ptr();
        let mut keys = write_lock(KEYS.get());
        let rkey = fresh_key(&keys);
        // SAFETY: p is the fresh struct, ours, not yet handed out.
        unsafe {
            (*p).rkey = rkey;
            (*p).handle = rkey;
        }
        let mw = Arc::new(Mw {
            raw,
            pd: dom.clone(),
            kind,
            state: Mutex::new(State { rkey, bound: None }),
        });
        keys.insert(rkey, Arc::new(unbound(&mw)));
        objects().mws.insert(p as usize, mw);
        Ok(p)
    }

    /// `ibv_dealloc_mw`: the window's key reaches nothing from now on.
    pub fn dealloc(p: *mut ibv_mw) -> Result<()> {
        let mw = objects().mws.remove(p).ok_or(Errno::EINVAL)?;
        let mut st = lock(&mw.state);
        let old = write_lock(KEYS.get()).remove(&st.rkey);
        unbind(old, st.bound.take());
        Ok(())
    }

    /// The checks verbs.h's `ibv_bind_mw` makes before handing a bind to the provider, in its
    /// order: a type 1 window (`EINVAL`), no range without an MR (`EINVAL`), an MR of the
    /// window's PD (`EPERM`). An MR that is not a live one of ours is `EINVAL`.
    pub fn bind_call_checks(&self, info: &ibv_mw_bind_info) -> Result<()> {
        let raw = self.raw.read();
        bind_call_rule(raw.type_, raw.pd, info, |mr| Ok(objects().mrs.get(mr)?.raw.read().pd))
    }

    fn set_raw_rkey(&self, rkey: u32) {
        let raw = self.raw.as_ptr();
        // SAFETY: raw is the live window's struct, ours; a single-field write under the
        // window's state lock (CBox's rule), as a provider writes it after a bind.
        unsafe { (*raw).rkey = rkey };
    }
}

/// The entry of an unbound window: no range, no rights.
fn unbound(mw: &Arc<Mw>) -> Reg {
    Reg::window(mw.pd.clone(), (0, 0, 0, 0), Arc::downgrade(mw))
}

/// A bind as posted, checked: executed when the send queue takes it.
pub struct Bind {
    mw: Arc<Mw>,
    /// Type 2: the rkey the caller asked for (same index); type 1: `ibv_inc_rkey` of the current.
    rkey: Option<u32>,
    /// The MR and range, `None` (length 0) to unbind.
    to: Option<(Arc<Mr>, Range)>,
}

/// A local operation of the send queue, executed when posted.
pub enum LocalOp {
    Bind(Bind),
    Invalidate { pd: Arc<Pd>, rkey: u32 },
}

impl LocalOp {
    /// Executes the operation: the status of its completion.
    pub fn execute(&self) -> u32 {
        match self {
            LocalOp::Bind(b) => b.execute(),
            LocalOp::Invalidate { pd, rkey } => match invalidate(pd, *rkey) {
                Ok(()) => IBV_WC_SUCCESS,
                Err(_) => IBV_WC_MW_BIND_ERR,
            },
        }
    }
}

/// Checks a bind of window `mw` posted on a QP of `qp_pd` (`type_2`: through the send queue,
/// with the caller's new `rkey`). Every refusal is `EINVAL`, as rdma-core's providers say.
pub fn check_bind(
    qp_pd: &Arc<Pd>,
    mw: *mut ibv_mw,
    rkey: Option<u32>,
    info: &ibv_mw_bind_info,
) -> Result<Bind> {
    let mw = objects().mws.get(mw)?;
    let want = if rkey.is_some() { TYPE_2 } else { TYPE_1 };
    if mw.kind != want || !Arc::ptr_eq(&mw.pd, &qp_pd.domain()) {
        return Err(Errno::EINVAL);
    }
    if let Some(k) = rkey {
        let cur = lock(&mw.state).rkey;
        if k >> 8 != cur >> 8 {
            return Err(Errno::EINVAL); // a type 2 window keeps its index
        }
    }
    if info.length == 0 {
        return Ok(Bind { mw, rkey, to: None });
    }
    let mr = objects().mrs.get(info.mr)?;
    let reg = mr.reg();
    if !Arc::ptr_eq(&reg.pd, &mw.pd) {
        return Err(Errno::EINVAL);
    }
    let len = usize::try_from(info.length).map_err(|_| Errno::EINVAL)?;
    let range = Range { addr: info.addr, len, access: info.mw_access_flags };
    check_range(reg.access, reg.iova, reg.len, range)?;
    Ok(Bind { mw, rkey, to: Some((mr, range)) })
}

impl Bind {
    /// Binds (or unbinds) the window: its new key reaches the range with its rights, the old
    /// one nothing. `IBV_WC_MW_BIND_ERR` if the MR changed or went meanwhile, or a type 2
    /// window is bound already (it must be invalidated first).
    fn execute(&self) -> u32 {
        let mw = &self.mw;
        let mut st = lock(&mw.state);
        if mw.kind == TYPE_2 && st.bound.is_some() && self.to.is_some() {
            return IBV_WC_MW_BIND_ERR;
        }
        let new = self.rkey.unwrap_or_else(|| inc_rkey(st.rkey));
        let entry = match &self.to {
            None => unbound(mw),
            Some((mr, r)) => {
                let reg = mr.reg();
                let Ok(base) = check_range(reg.access, reg.iova, reg.len, *r) else {
                    return IBV_WC_MW_BIND_ERR; // re-registered meanwhile
                };
                let Some(local) = reg.local_of(r.addr, r.len) else { return IBV_WC_MW_BIND_ERR };
                let access = r.access & WINDOW_RIGHTS;
                Reg::window(
                    mw.pd.clone(),
                    (local as usize, r.len, base, access),
                    Arc::downgrade(mw),
                )
            }
        };
        let mut keys = write_lock(KEYS.get());
        if !objects().mws.contains(mw.raw.as_ptr()) {
            return IBV_WC_MW_BIND_ERR; // deallocated meanwhile
        }
        if let Some((mr, _)) = &self.to {
            if !keys.contains_key(&mr.key) {
                return IBV_WC_MW_BIND_ERR; // deregistered meanwhile
            }
            mr.windows.fetch_add(1, Ordering::AcqRel);
        }
        let old_entry = keys.remove(&st.rkey);
        keys.insert(new, Arc::new(entry));
        drop(keys);
        let old = std::mem::replace(&mut st.bound, self.to.as_ref().map(|(mr, _)| mr.clone()));
        unbind(old_entry, old);
        st.rkey = new;
        mw.set_raw_rkey(new);
        IBV_WC_SUCCESS
    }
}

/// Invalidates `rkey` if it is the key of a bound type 2 window of `pd` (a local invalidate,
/// or a peer's SEND with invalidate); the window keeps its key, unbound.
pub fn invalidate(pd: &Pd, rkey: u32) -> std::result::Result<(), AccessError> {
    // The window, found without its lock held (its lock comes before the table's).
    let weak: Option<Weak<Mw>> = read_lock(KEYS.get()).get(&rkey).and_then(|r| r.window.clone());
    let mw = weak.and_then(|w| w.upgrade()).ok_or(AccessError::Protection)?;
    if mw.kind != TYPE_2 || !std::ptr::eq(Arc::as_ptr(&mw.pd), pd) {
        return Err(AccessError::Protection);
    }
    let mut st = lock(&mw.state);
    if st.rkey != rkey || st.bound.is_none() {
        return Err(AccessError::Protection);
    }
    let mut keys = write_lock(KEYS.get());
    if !keys.contains_key(&rkey) {
        return Err(AccessError::Protection); // deallocated meanwhile
    }
    let old = keys.insert(rkey, Arc::new(unbound(&mw)));
    drop(keys);
    unbind(old, st.bound.take());
    Ok(())
}

/// A window's key no longer reaches what entry `old` did (it is out of the table): accesses
/// under way through it finish, and only then may the MR it was bound to (`mr`) be
/// deregistered. Called without the table's lock, under the window's.
fn unbind(old: Option<Arc<Reg>>, mr: Option<Arc<Mr>>) {
    if let Some(old) = old {
        old.retire();
    }
    if let Some(mr) = mr {
        mr.windows.fetch_sub(1, Ordering::AcqRel);
    }
}

/// verbs.h's `ibv_bind_mw` checks, before the op is called: a type 1 window (`EINVAL`), a range
/// only with an MR (`EINVAL`), the MR in the window's PD (`EPERM`); `mr_pd` reads an MR's PD.
pub fn bind_call_rule(
    mw_type: u32,
    mw_pd: *mut ibv_pd,
    info: &ibv_mw_bind_info,
    mr_pd: impl FnOnce(*mut ibv_mr) -> Result<*mut ibv_pd>,
) -> Result<()> {
    if mw_type != TYPE_1 {
        return Err(Errno::EINVAL);
    }
    if info.mr.is_null() {
        return if info.addr != 0 || info.length != 0 { Err(Errno::EINVAL) } else { Ok(()) };
    }
    if mr_pd(info.mr)? != mw_pd {
        return Err(Errno::EPERM);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: u32 = ACCESS_REMOTE_WRITE;
    const RD: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;

    #[test]
    fn inc_rkey_changes_the_tag_only() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
        assert_eq!(inc_rkey(7) >> 8, 0);
    }

    #[test]
    fn range_inside_the_mr() {
        let mr = MW_BIND | ACCESS_LOCAL_WRITE;
        let r = |addr, len, access| Range { addr, len, access };
        assert_eq!(check_range(mr, 0x1000, 8192, r(0x2000, 1024, RW)), Ok(0x2000));
        assert_eq!(check_range(mr, 0x1000, 8192, r(0x1000, 8192, RD)), Ok(0x1000));
        assert_eq!(check_range(mr, 0x1000, 8192, r(0x1000, 8193, RD)), Err(Errno::EINVAL));
        assert_eq!(check_range(mr, 0x1000, 8192, r(0xfff, 4, RD)), Err(Errno::EINVAL));
        assert_eq!(check_range(mr, 0x1000, 8192, r(u64::MAX, 4, RD)), Err(Errno::EINVAL));
        assert_eq!(check_range(mr, 0x1000, 64, r(0x1000, usize::MAX, RD)), Err(Errno::EINVAL));
        // ZERO_BASED: the window is addressed from 0.
        assert_eq!(check_range(mr, 0x1000, 8192, r(0x1800, 16, RW | ZERO_BASED)), Ok(0));
    }

    #[test]
    fn rights() {
        let r = Range { addr: 0, len: 8, access: RW };
        assert_eq!(check_range(ACCESS_LOCAL_WRITE, 0, 64, r), Err(Errno::EINVAL), "no MW_BIND");
        assert_eq!(check_range(MW_BIND, 0, 64, r), Err(Errno::EINVAL), "write needs local write");
        assert_eq!(check_range(MW_BIND, 0, 64, Range { access: RD, ..r }), Ok(0));
        let local = Range { access: ACCESS_LOCAL_WRITE, ..r };
        assert_eq!(check_range(MW_BIND | ACCESS_LOCAL_WRITE, 0, 64, local), Err(Errno::EINVAL));
    }
}
