//! Extended CQs (`ibv_create_cq_ex`): polling one completion at a time with
//! `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and reading its fields with `ibv_wc_read_*`.
//!
//! Every CQ is allocated as a [`CqAlloc`] (see `cq::CqRaw`): the `ibv_cq_ex` C callers see, whose
//! leading fields are the legacy `ibv_cq` (so `ibv_poll_cq`, `ibv_req_notify_cq`,
//! `ibv_get_cq_event` and `ibv_destroy_cq` work on it unchanged), followed by the [`Cursor`]: the
//! completion the current poll session is on. `status` and `wr_id` live in the `ibv_cq_ex` itself,
//! where the inline readers of verbs.h read them; the other fields are read through the reader
//! functions, which only read the cursor.
//!
//! **Timestamps**: a CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` (or `_WALLCLOCK`)
//! stamps each completion with `CLOCK_MONOTONIC` in nanoseconds when the provider *produces* it
//! (the moment the work request completes, not when it is polled). The device reports
//! `hca_core_clock` = 1 000 000 kHz, so one "clock cycle" of `ibv_wc_read_completion_ts` is one
//! nanosecond; `completion_timestamp_mask` is all ones. The wall-clock reader converts the same
//! stamp to `CLOCK_REALTIME` nanoseconds with the offset between the two clocks at read time.

use super::cq::Cq;
use super::device::Context;
use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::provider::Completion;
use crate::runtime::fdqueue::futex;
use crate::sys::*;
use std::mem::offset_of;
use std::sync::atomic::{
    AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;

/// A poll session (`ibv_start_poll` until `ibv_end_poll`, or a failed `ibv_start_poll`) is
/// exclusive, as providers make it by holding their CQ lock across those calls: two threads
/// polling one extended CQ would otherwise overwrite each other's cursor. The lock outlives the
/// C calls, so it is a futex word (0 free, 1 held, 2 held with sleepers), not a guard. It is
/// outermost in the lock order: taken with no other lock held.
#[derive(Default)]
pub struct SessionLock(AtomicU32);

impl SessionLock {
    fn acquire(&self) {
        if self.0.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
            return;
        }
        while self.0.swap(2, Acquire) != 0 {
            futex(&self.0, libc::FUTEX_WAIT, 2);
        }
    }

    /// Idempotent: an `ibv_end_poll` without a session is harmless.
    fn release(&self) {
        if self.0.swap(0, Release) == 2 {
            futex(&self.0, libc::FUTEX_WAKE, 1);
        }
    }
}

/// The completion the current poll session is on. Atomics only so that a (misbehaving) reader on
/// another thread is not a data race; the session lock gives one poll session at a time.
#[derive(Default)]
pub struct Cursor {
    pub opcode: AtomicU32,
    pub byte_len: AtomicU32,
    pub imm: AtomicU32,
    pub qp_num: AtomicU32,
    pub src_qp: AtomicU32,
    pub wc_flags: AtomicU32,
    pub ts: AtomicU64,
}

/// The C allocation of every CQ. All-zero is valid (C integers, pointers, `Option<fn>` and
/// atomics), as `CBox::zeroed` requires.
#[repr(C)]
pub struct CqAlloc {
    pub ex: ibv_cq_ex,
    pub cursor: Cursor,
}

// SAFETY: a repr(C) struct of an rdma-core C struct and atomics: all-zero is valid, no drop
// glue, no ownership (the `CStruct` contract).
unsafe impl crate::handle::CStruct for CqAlloc {}

// `struct ibv_cq_ex` starts with the fields of `struct ibv_cq`: the same address serves both.
const _: () = {
    assert!(offset_of!(ibv_cq, context) == offset_of!(ibv_cq_ex, context));
    assert!(offset_of!(ibv_cq, channel) == offset_of!(ibv_cq_ex, channel));
    assert!(offset_of!(ibv_cq, cq_context) == offset_of!(ibv_cq_ex, cq_context));
    assert!(offset_of!(ibv_cq, handle) == offset_of!(ibv_cq_ex, handle));
    assert!(offset_of!(ibv_cq, cqe) == offset_of!(ibv_cq_ex, cqe));
    assert!(offset_of!(ibv_cq, mutex) == offset_of!(ibv_cq_ex, mutex));
    assert!(offset_of!(ibv_cq, cond) == offset_of!(ibv_cq_ex, cond));
    assert!(
        offset_of!(ibv_cq, comp_events_completed) == offset_of!(ibv_cq_ex, comp_events_completed)
    );
    assert!(
        offset_of!(ibv_cq, async_events_completed) == offset_of!(ibv_cq_ex, async_events_completed)
    );
    assert!(std::mem::size_of::<ibv_cq>() <= offset_of!(ibv_cq_ex, comp_mask));
    assert!(offset_of!(CqAlloc, ex) == 0);
};

const fn wc(f: ibv_create_cq_wc_flags) -> u64 {
    f.0 as u64
}

pub const WITH_BYTE_LEN: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN);
pub const WITH_IMM: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_IMM);
pub const WITH_QP_NUM: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_QP_NUM);
pub const WITH_SRC_QP: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SRC_QP);
pub const WITH_SLID: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SLID);
pub const WITH_SL: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SL);
pub const WITH_DLID_PATH_BITS: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_DLID_PATH_BITS);
pub const WITH_TS: u64 = wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
pub const WITH_TS_WALLCLOCK: u64 =
    wc(ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);

/// The `wc_flags` this provider can report. CVLAN, flow tag and tag matching are Ethernet-offload
/// and TM features it does not have: asking for them fails with `EOPNOTSUPP`, as real providers
/// answer for fields they cannot fill.
pub const SUPPORTED_WC_FLAGS: u64 = WITH_BYTE_LEN
    | WITH_IMM
    | WITH_QP_NUM
    | WITH_SRC_QP
    | WITH_SLID
    | WITH_SL
    | WITH_DLID_PATH_BITS
    | WITH_TS
    | WITH_TS_WALLCLOCK;

/// `hca_core_clock` in kHz: completion timestamps count nanoseconds.
pub const CORE_CLOCK_KHZ: u64 = 1_000_000;
/// `completion_timestamp_mask`: 64-bit timestamps.
pub const TIMESTAMP_MASK: u64 = u64::MAX;

/// Checks an `ibv_cq_init_attr_ex` beyond what `Cq::create` checks (cqe, channel, vector):
/// unknown `comp_mask` bits give `EINVAL`; unknown creation flags and `wc_flags` this provider
/// cannot fill give `EOPNOTSUPP`. The parent domain is [`parent_domain`]'s.
pub fn check_init_attr(a: &ibv_cq_init_attr_ex) -> Result<()> {
    let m_flags = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
    let m_pd = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0;
    if a.comp_mask & !(m_flags | m_pd) != 0 {
        return Err(Errno::EINVAL);
    }
    if a.comp_mask & m_flags != 0 {
        // Both known flags are hints this provider may ignore: it is thread-safe regardless,
        // and it never overruns (completions are queued, never dropped).
        let known = ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_SINGLE_THREADED.0
            | ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0;
        if a.flags & !known != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
    }
    if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if a.cqe == 0 || a.cqe > i32::MAX as u32 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The parent domain of a CQ created with `IBV_CQ_INIT_ATTR_MASK_PD`: `EINVAL` for a plain PD
/// or one of another context (as mlx5 answers). The CQ holds it: the parent domain is in use
/// until the CQ is destroyed.
pub fn parent_domain(ctx: &Arc<Context>, a: &ibv_cq_init_attr_ex) -> Result<Option<Arc<Pd>>> {
    if a.comp_mask & ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0 == 0 {
        return Ok(None);
    }
    let pd = objects().pds.get(a.parent_domain)?;
    if pd.parent.is_none() || !Arc::ptr_eq(&pd.ctx, ctx) {
        return Err(Errno::EINVAL);
    }
    Ok(Some(pd))
}

/// Whether a CQ with these `wc_flags` stamps its completions.
pub fn wants_stamp(wc_flags: u64) -> bool {
    wc_flags & (WITH_TS | WITH_TS_WALLCLOCK) != 0
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is a valid out-pointer; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(id, &mut t) };
    (t.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64)
}

/// The completion timestamp clock: `CLOCK_MONOTONIC` nanoseconds.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A completion timestamp as `CLOCK_REALTIME` nanoseconds.
pub fn wallclock_ns(ts: u64) -> u64 {
    let (real, mono) = (clock_ns(libc::CLOCK_REALTIME), now_ns());
    ts.wrapping_add(real.wrapping_sub(mono))
}

impl Cq {
    /// `ibv_start_poll` (`first`: takes the session, runs the QPs feeding the CQ) and
    /// `ibv_next_poll`: moves the cursor to the next completion, `ENOENT` when there is none. A
    /// `ibv_start_poll` that finds nothing ends the session (the application then does not call
    /// `ibv_end_poll`, per the man page).
    pub fn ex_poll(&self, first: bool) -> Result<()> {
        if first {
            self.session.acquire();
        }
        match self.take_one(first) {
            Some((wc, ts)) => {
                self.set_cursor(&wc, ts);
                Ok(())
            }
            None => {
                if first {
                    self.session.release();
                }
                Err(Errno::ENOENT)
            }
        }
    }

    /// `ibv_end_poll`: ends the session.
    pub fn end_poll(&self) {
        self.session.release();
    }

    fn set_cursor(&self, wc: &Completion, ts: u64) {
        let a = self.raw.alloc_ptr();
        // SAFETY: `status` and `wr_id` are written only here, by the poll session (one at a time:
        // the session lock), and read by C on that thread once the call returns; raw writes of
        // single fields; the allocation lives as long as self.
        unsafe {
            std::ptr::addr_of_mut!((*a).ex.status).write(wc.status);
            std::ptr::addr_of_mut!((*a).ex.wr_id).write(wc.wr_id);
        }
        // SAFETY: the allocation lives as long as self; the cursor is made of atomics, so a
        // shared reference to it is sound while C reads it.
        let c = unsafe { &*std::ptr::addr_of!((*a).cursor) };
        c.opcode.store(wc.opcode, Relaxed);
        c.byte_len.store(wc.byte_len, Relaxed);
        c.imm.store(wc.imm, Relaxed);
        c.qp_num.store(wc.qp_num, Relaxed);
        c.src_qp.store(wc.src_qp, Relaxed);
        c.wc_flags.store(wc.wc_flags, Relaxed);
        c.ts.store(ts, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr() -> ibv_cq_init_attr_ex {
        // SAFETY: all-zero is a valid ibv_cq_init_attr_ex.
        let mut a: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.cqe = 16;
        a
    }

    #[test]
    fn init_attr_checks() {
        let mut a = attr();
        a.wc_flags = WITH_BYTE_LEN | WITH_TS | WITH_QP_NUM | WITH_SRC_QP | WITH_IMM;
        assert!(check_init_attr(&a).is_ok());
        a.wc_flags |= ibv_create_cq_wc_flags::IBV_WC_EX_WITH_CVLAN.0 as u64;
        assert_eq!(check_init_attr(&a), Err(Errno::EOPNOTSUPP));
        let mut a = attr();
        a.comp_mask = 1 << 5;
        assert_eq!(check_init_attr(&a), Err(Errno::EINVAL));
        a.comp_mask = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0;
        assert!(check_init_attr(&a).is_ok());
        a.comp_mask = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
        a.flags = ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_SINGLE_THREADED.0;
        assert!(check_init_attr(&a).is_ok());
        a.flags = 1 << 7;
        assert_eq!(check_init_attr(&a), Err(Errno::EOPNOTSUPP));
        let mut a = attr();
        a.cqe = 0;
        assert_eq!(check_init_attr(&a), Err(Errno::EINVAL));
    }

    #[test]
    fn clocks() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
        let w = wallclock_ns(b);
        let real = clock_ns(libc::CLOCK_REALTIME);
        assert!(w <= real && real - w < 1_000_000_000);
    }
}
