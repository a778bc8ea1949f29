//! Completion queues and completion channels.
//!
//! **Lock order** (outer first; never take an earlier lock while holding a later one):
//! verbs QP attribute record (modify only) -> the provider's QP state (`SoftQp::st`; the provider
//! pushes completions through `CompletionSink` with it held) -> CQ state (`Cq::st`) -> an
//! `FdQueue`'s items (completion channel, async events). An SRQ's two locks are taken one at a time under a QP state lock and released
//! before anything else is taken. `Cq::qps` (the QPs feeding a CQ) is a leaf: it is held
//! only to copy the list or to find a QP, never while another of these locks is taken. So
//! `poll` retires send queue entries after dropping the CQ state lock, and `progress_qps` runs
//! the QPs from a snapshot of the list. No function here waits on a lock while calling out.
//! The extended-poll session lock (`cq_ex::SessionLock`) is outermost: it is held across the
//! application's `ibv_start_poll` .. `ibv_end_poll`, and taken with no other lock held.
//!
//! A completion channel's fd is a real eventfd in semaphore mode: one count per pending CQ
//! event, so `poll()`, `epoll` and `O_NONBLOCK` (`EAGAIN`) behave as with the kernel.

use super::cq_ex::CqAlloc;
use super::cq_mod::{Decision, Moderation};
use super::device::Context;
use super::objects;
use super::pd::Pd;
use super::qp::Qp;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{Completion, CompletionSink};
use crate::runtime::engine::{note_poll, ARMED_CQS};
use crate::runtime::fdqueue::FdQueue;
use crate::runtime::{lock, wait_on};
use crate::sys::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

/// Writes a provider completion as the `ibv_wc` C reads.
pub fn write_wc(c: &Completion, out: &mut ibv_wc) {
    out.wr_id = c.wr_id;
    out.status = c.status;
    out.opcode = c.opcode;
    out.vendor_err = 0;
    out.byte_len = c.byte_len;
    out.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t { imm_data: c.imm };
    out.qp_num = c.qp_num;
    out.src_qp = c.src_qp;
    out.wc_flags = c.wc_flags;
    out.pkey_index = 0;
    out.slid = 0;
    out.sl = 0;
    out.dlid_path_bits = 0;
}

pub struct CompChannel {
    pub raw: CBox<ibv_comp_channel>,
    pub ctx: Arc<Context>,
    /// Addresses of CQs with a pending event, in order; its descriptor is the channel's `fd`.
    queue: FdQueue<usize>,
}

impl CompChannel {
    pub fn create(ctx: Arc<Context>) -> Result<*mut ibv_comp_channel> {
        let queue = FdQueue::new()?;
        let mut raw: CBox<ibv_comp_channel> = CBox::zeroed();
        let r = raw.init();
        r.context = ctx.ptr();
        r.fd = queue.fd();
        r.refcnt = 0;
        let p = raw.as_ptr();
        objects().channels.insert(p as usize, Arc::new(CompChannel { raw, ctx, queue }));
        Ok(p)
    }

    /// `EBUSY` while a CQ still uses the channel.
    pub fn destroy(p: *mut ibv_comp_channel) -> Result<()> {
        let ch = objects().channels.get(p)?;
        if objects()
            .cqs
            .values()
            .iter()
            .any(|c| c.channel.as_ref().is_some_and(|x| Arc::ptr_eq(x, &ch)))
        {
            return Err(Errno::EBUSY);
        }
        objects().channels.remove(p);
        Ok(())
    }

    fn post(&self, cq: usize) {
        self.queue.push(cq);
    }

    /// Blocks (unless the fd is non-blocking) until a CQ event arrives; returns the CQ. The
    /// first thread of the process to wait is the one peers' doorbells wake (`engine::Direct`):
    /// it runs the rings itself, so an event costs one wake-up, not two.
    pub fn get_event(&self) -> Result<Arc<Cq>> {
        loop {
            let direct = crate::runtime::engine::running().and_then(|e| e.direct());
            let via = direct.as_ref().map(|d| d as &dyn crate::runtime::fdqueue::SharedSleep);
            let addr = self.queue.pop_wait_via(via);
            drop(direct);
            let addr = addr?;
            // A CQ destroyed after posting its event leaves its entry behind: skip it.
            if let Ok(cq) = objects().cqs.get(addr as *const ibv_cq) {
                lock(&cq.st).events_read += 1;
                return Ok(cq);
            }
        }
    }

    /// `refcnt` of the C struct (the CQs using the channel), updated from any thread.
    fn refcnt(&self) -> &AtomicI32 {
        // SAFETY: the field is a live, aligned c_int for as long as self (the box lives with
        // it); every Rust access to it goes through this atomic view, and C only reads it.
        unsafe { AtomicI32::from_ptr(std::ptr::addr_of_mut!((*self.raw.as_ptr()).refcnt)) }
    }

    fn forget(&self, cq: usize) {
        self.queue.take(|&c| c == cq);
    }
}

#[derive(Default)]
pub struct CqState {
    /// Completions with the time they were produced (0 unless the CQ asked for timestamps).
    wcs: VecDeque<(Completion, u64)>,
    /// 0: not armed; 1: next completion; 2: next solicited or error completion.
    armed: u8,
    pub events_read: u32,
    events_acked: u32,
    /// `ibv_destroy_cq` waits on `acked` (a notify costs a system call even with no waiter,
    /// and every event is acknowledged).
    destroying: bool,
    /// `ibv_modify_cq`'s moderation of the event (see `cq_mod`).
    moderation: Moderation,
}

/// What `ibv_create_cq_ex` adds to a CQ.
#[derive(Default)]
pub struct ExOpts {
    /// Timestamp every completion when produced (a timestamp `wc_flag`).
    pub stamp: bool,
    /// The parent domain of `IBV_CQ_INIT_ATTR_MASK_PD`, held while the CQ lives.
    pub parent: Option<Arc<Pd>>,
}

/// The C struct of a CQ. Every CQ is allocated as a `cq_ex::CqAlloc`: an `ibv_cq_ex` (whose
/// leading fields are the `ibv_cq` layout) followed by the extended-poll cursor, so the address
/// handed out serves both `ibv_cq` and `ibv_cq_ex` callers. Legacy CQs leave the extended
/// function pointers NULL, as libibverbs does.
pub struct CqRaw(CBox<CqAlloc>);

impl CqRaw {
    fn zeroed() -> CqRaw {
        CqRaw(CBox::zeroed())
    }

    /// The `ibv_cq` handed out (the same address as the `ibv_cq_ex`).
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.0.as_ptr().cast()
    }

    pub fn ex_ptr(&self) -> *mut ibv_cq_ex {
        self.0.as_ptr().cast()
    }

    pub fn alloc_ptr(&self) -> *mut CqAlloc {
        self.0.as_ptr()
    }

    pub fn addr(&self) -> usize {
        self.0.addr()
    }

    /// A copy of the public `ibv_cq` fields, read through the raw pointer.
    pub fn read(&self) -> ibv_cq {
        // SAFETY: ibv_cq is a layout prefix of ibv_cq_ex (checked at compile time in cq_ex), the
        // first member of the live allocation; a bitwise copy of plain C data.
        unsafe { std::ptr::read(self.as_ptr()) }
    }
}

pub struct Cq {
    pub raw: CqRaw,
    pub ctx: Arc<Context>,
    pub channel: Option<Arc<CompChannel>>,
    pub st: Mutex<CqState>,
    acked: Condvar,
    qps: Mutex<Vec<Weak<Qp>>>,
    /// How many completions the state holds, stored under its lock whenever that changes: an
    /// empty poll reads this instead of taking the lock twice (a hint: see [`Cq::ready`]).
    queued: AtomicUsize,
    /// Extended CQs created with a timestamp `wc_flag`: stamp each completion when produced.
    stamp: bool,
    /// The parent domain the CQ was created on (`ibv_create_cq_ex`).
    pub parent: Option<Arc<Pd>>,
    /// Held from `ibv_start_poll` to `ibv_end_poll` (see `cq_ex`).
    pub(super) session: super::cq_ex::SessionLock,
}

impl Cq {
    pub fn create(
        ctx: Arc<Context>,
        cqe: i32,
        cq_context: *mut libc::c_void,
        channel: Option<Arc<CompChannel>>,
        comp_vector: i32,
    ) -> Result<*mut ibv_cq> {
        Self::create_with(ctx, cqe, cq_context, channel, comp_vector, ExOpts::default(), |_| {})
    }

    /// `ibv_create_cq_ex`: the same CQ, with `init` filling the `ibv_cq_ex` part (its poll and
    /// reader functions) before the CQ is published, and `ex`'s options.
    pub fn create_ex(
        ctx: Arc<Context>,
        cqe: i32,
        cq_context: *mut libc::c_void,
        channel: Option<Arc<CompChannel>>,
        comp_vector: i32,
        ex: ExOpts,
        init: impl FnOnce(&mut ibv_cq_ex),
    ) -> Result<*mut ibv_cq_ex> {
        Self::create_with(ctx, cqe, cq_context, channel, comp_vector, ex, init).map(|p| p.cast())
    }

    fn create_with(
        ctx: Arc<Context>,
        cqe: i32,
        cq_context: *mut libc::c_void,
        channel: Option<Arc<CompChannel>>,
        comp_vector: i32,
        ex: ExOpts,
        init: impl FnOnce(&mut ibv_cq_ex),
    ) -> Result<*mut ibv_cq> {
        if cqe < 1 || cqe as u32 > super::device::MAX_CQE || !(0..1).contains(&comp_vector) {
            return Err(Errno::EINVAL);
        }
        let mut raw = CqRaw::zeroed();
        let handle = raw.addr() as u32;
        // Not yet published: ordinary exclusive access. The `ibv_cq` fields are the leading
        // fields of `ibv_cq_ex`, under the same names.
        let r = &mut raw.0.init().ex;
        init(r);
        r.context = ctx.ptr();
        r.channel = channel.as_ref().map_or(std::ptr::null_mut(), |c| c.raw.as_ptr());
        r.cq_context = cq_context;
        r.handle = handle;
        r.cqe = cqe;
        let p = raw.as_ptr();
        if let Some(c) = &channel {
            c.refcnt().fetch_add(1, Ordering::Relaxed);
        }
        let cq = Arc::new(Cq {
            raw,
            ctx,
            channel,
            st: Mutex::new(CqState::default()),
            acked: Condvar::new(),
            qps: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            stamp: ex.stamp,
            parent: ex.parent,
            session: Default::default(),
        });
        objects().cqs.insert(p as usize, cq);
        Ok(p)
    }

    /// Destroys the CQ once every event read from its channel has been acknowledged. The CQ
    /// stays registered while it waits, so that another thread's `ibv_ack_cq_events` reaches
    /// it (conformance: ibv_get_cq_event NOTE-DESTROY-WAITS).
    pub fn destroy(p: *mut ibv_cq) -> Result<()> {
        let cq = objects().cqs.get(p)?;
        let busy = || {
            objects().qps.values().iter().any(|q| q.uses_cq(&cq))
                || objects()
                    .srqs
                    .values()
                    .iter()
                    .any(|s| s.xrc.as_ref().is_some_and(|x| Arc::ptr_eq(&x.cq, &cq)))
        };
        if busy() {
            return Err(Errno::EBUSY);
        }
        {
            let mut st = lock(&cq.st);
            if st.armed != 0 {
                ARMED_CQS.fetch_sub(1, Ordering::Relaxed);
                st.armed = 0;
            }
            st.moderation.raised();
            st.destroying = true;
            while st.events_acked < st.events_read {
                st = wait_on(&cq.acked, st);
            }
        }
        // A QP created on the CQ while it waited keeps it.
        if busy() {
            lock(&cq.st).destroying = false;
            return Err(Errno::EBUSY);
        }
        super::async_event::wait_acked(p as usize);
        if objects().cqs.remove(p).is_none() {
            // Another thread destroyed it meanwhile.
            return Err(Errno::EINVAL);
        }
        if let Some(c) = &cq.channel {
            c.forget(p as usize);
            c.refcnt().fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `qp` feeds this CQ (once, however many of its queues or SRQs complete here).
    pub fn attach(&self, qp: Weak<Qp>) {
        let mut l = lock(&self.qps);
        l.retain(|w| w.strong_count() > 0);
        if !l.iter().any(|w| w.ptr_eq(&qp)) {
            l.push(qp);
        }
    }

    /// Adds a completion and raises the channel event if the CQ is armed for it (once its
    /// moderation lets it, see `cq_mod`).
    pub fn push(&self, wc: Completion) {
        let ts = if self.stamp { super::cq_ex::now_ns() } else { 0 };
        let mut st = lock(&self.st);
        st.wcs.push_back((wc, ts));
        self.queued.store(st.wcs.len(), Ordering::Relaxed);
        if wakes(st.armed, &wc) {
            self.fire(st);
        }
    }

    /// A completion the armed CQ waits for is in its queue: raises the event, or holds it back
    /// as the CQ's moderation says.
    fn fire(&self, mut st: MutexGuard<'_, CqState>) {
        match st.moderation.on_event() {
            Decision::Raise => self.raise(&mut st),
            Decision::Hold => {}
            Decision::Time(after, generation) => {
                drop(st);
                // The timer needs the CQ's Arc: look it up (it is registered while it lives);
                // without it the event is raised now rather than held.
                match objects().cqs.get(self.raw.as_ptr()) {
                    Ok(me) => super::cq_mod::start_timer(&me, after, generation),
                    Err(_) => self.moderation_expired(generation),
                }
            }
        }
    }

    /// Raises the armed CQ's event (the state lock held).
    fn raise(&self, st: &mut CqState) {
        st.armed = 0;
        st.moderation.raised();
        ARMED_CQS.fetch_sub(1, Ordering::Relaxed);
        if let Some(c) = &self.channel {
            c.post(self.raw.addr());
        }
    }

    /// A moderation period of `generation` has passed: raises the event it held back.
    pub fn moderation_expired(&self, generation: u64) {
        let mut st = lock(&self.st);
        if st.armed != 0 && st.moderation.expired(generation) {
            self.raise(&mut st);
        }
    }

    /// `ibv_modify_cq`: the moderation of later events.
    pub fn modify(&self, a: &ibv_modify_cq_attr) -> Result<()> {
        lock(&self.st).moderation.modify(a)
    }

    /// Takes up to `out.len()` completions, running the QPs feeding this CQ first if it holds
    /// none (see [`Cq::ready`]).
    pub fn poll(&self, out: &mut [ibv_wc]) -> usize {
        note_poll();
        // Send queue positions to retire, newest per QP, applied once the state lock is dropped
        // (lock order, see the module comment). A batch stops early rather than allocate when it
        // spans more QPs than this holds: returning fewer completions is always allowed.
        const MAX_QPS: usize = 8;
        let mut retire = [(0u32, 0u64); MAX_QPS];
        let mut nr = 0;
        let mut n = 0;
        {
            let mut st = self.ready();
            while n < out.len() {
                let Some(&(wc, _)) = st.wcs.front() else { break };
                if wc.sq_seq != 0 {
                    match retire[..nr].iter_mut().find(|(q, _)| *q == wc.qp_num) {
                        Some(r) => r.1 = r.1.max(wc.sq_seq),
                        None if nr < MAX_QPS => {
                            retire[nr] = (wc.qp_num, wc.sq_seq);
                            nr += 1;
                        }
                        None => break,
                    }
                }
                st.wcs.pop_front();
                write_wc(&wc, &mut out[n]);
                n += 1;
            }
            self.queued.store(st.wcs.len(), Ordering::Relaxed);
        }
        for &(qpn, seq) in &retire[..nr] {
            self.retire(qpn, seq);
        }
        n
    }

    /// A polled send completion frees its send queue entries (and those of the unsignaled
    /// requests before it), as a hardware provider's send queue tail moves on poll. Called
    /// without the state lock.
    fn retire(&self, qpn: u32, sq_seq: u64) {
        let qps = lock(&self.qps);
        if let Some(q) = qps.iter().filter_map(|w| w.upgrade()).find(|q| q.qpn == qpn) {
            q.retire(sq_seq);
        }
    }

    /// Extended polling: takes one completion and its timestamp, after running the QPs feeding
    /// this CQ if `progress` (`ibv_start_poll` does, `ibv_next_poll` does not).
    pub fn take_one(&self, progress: bool) -> Option<(Completion, u64)> {
        let mut st = if progress {
            note_poll();
            self.ready()
        } else {
            lock(&self.st)
        };
        let got = st.wcs.pop_front();
        self.queued.store(st.wcs.len(), Ordering::Relaxed);
        drop(st);
        if let Some((wc, _)) = &got {
            if wc.sq_seq != 0 {
                self.retire(wc.qp_num, wc.sq_seq);
            }
        }
        got
    }

    /// The CQ's state, locked, after running the QPs feeding it unless it holds completions
    /// already: those are returned first, and the poll that finds the CQ empty reads on. A
    /// program that polls its send CQ right after its receive CQ (whose poll read both
    /// completions from one datagram batch) then pays no socket read that can only come back
    /// empty (`ib_send_lat` across namespaces: one `recvmmsg` per message).
    ///
    /// Whether it holds any is read from `queued`, not under the lock (an empty poll took the
    /// lock twice). A stale count costs nothing lasting: one that says empty runs the QPs
    /// needlessly, one that says non-empty (another thread took the last completion just now)
    /// returns nothing this time, which a poll may, and the next poll runs the QPs.
    fn ready(&self) -> std::sync::MutexGuard<'_, CqState> {
        if self.queued.load(Ordering::Relaxed) == 0 {
            // No lock held: QP locks are taken after, never under, the CQ's (module comment).
            self.progress_qps();
        }
        lock(&self.st)
    }

    /// Runs the QPs feeding this CQ. The list lock is a leaf: a snapshot is taken and the lock
    /// dropped before any QP lock is taken.
    fn progress_qps(&self) {
        // Taken out of the lock first (progress may complete onto this CQ); on the stack for
        // the usual few QPs, so a poll allocates nothing.
        const ON_STACK: usize = 8;
        let mut few: [Option<Arc<Qp>>; ON_STACK] = Default::default();
        let mut more: Vec<Arc<Qp>> = Vec::new();
        {
            let l = lock(&self.qps);
            for (i, q) in l.iter().filter_map(|w| w.upgrade()).enumerate() {
                match few.get_mut(i) {
                    Some(slot) => *slot = Some(q),
                    None => more.push(q),
                }
            }
        }
        for q in few.iter().flatten().chain(more.iter()) {
            q.progress_now();
        }
    }

    /// `ibv_resize_cq`: `EINVAL` out of range or below the number of completions the CQ holds
    /// (the man page's rule). `cqe` is written under the state lock, the only Rust writer.
    pub fn resize(&self, cqe: i32) -> Result<()> {
        if cqe < 1 || cqe as u32 > super::device::MAX_CQE {
            return Err(Errno::EINVAL);
        }
        let st = lock(&self.st);
        if st.wcs.len() > cqe as usize {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a raw write of one field of the live allocation (no reference to memory C
        // reads), serialised with other Rust writers by the state lock held here.
        unsafe { std::ptr::addr_of_mut!((*self.raw.as_ptr()).cqe).write(cqe) };
        drop(st);
        Ok(())
    }

    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // What already arrived becomes completions first. A CQ armed while it holds completions
        // the arm asks for raises its event at once, as ConnectX hardware does (it arms with
        // the consumer index, and fires for any CQE past it): a program that polls a batch
        // smaller than what is queued, re-arms and waits (perftest's `-e`) must not wait for
        // a completion that never comes. A CQ without a channel may be armed too: the event
        // goes nowhere, as with the kernel.
        self.progress_qps();
        let mut st = lock(&self.st);
        let first = st.armed == 0;
        if first {
            // SeqCst: pairs with the progress thread's nap check (`Engine::cq_armed`).
            ARMED_CQS.fetch_add(1, Ordering::SeqCst);
        }
        st.armed = if solicited_only { 2 } else { 1 };
        if st.wcs.iter().any(|(wc, _)| wakes(st.armed, wc)) {
            self.fire(st);
        } else {
            drop(st);
        }
        if first {
            if let Ok(e) = crate::runtime::engine::engine() {
                e.cq_armed();
            }
        }
        Ok(())
    }

    pub fn ack_events(&self, n: u32) {
        let mut st = lock(&self.st);
        st.events_acked = st.events_acked.wrapping_add(n).min(st.events_read);
        if st.destroying {
            self.acked.notify_all();
        }
    }
}

/// Whether `wc` raises the event of a CQ armed as `armed` (0: not armed; 1: any completion;
/// 2: solicited only, where an unsuccessful completion counts as solicited).
fn wakes(armed: u8, wc: &Completion) -> bool {
    match armed {
        1 => true,
        2 => wc.solicited || wc.status != ibv_wc_status::IBV_WC_SUCCESS,
        _ => false,
    }
}

impl CompletionSink for Cq {
    fn push(&self, c: Completion) {
        Cq::push(self, c)
    }
}
