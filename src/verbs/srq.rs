//! Shared receive queues.

use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{RecvWqe, SharedRecvQueue};
use crate::sys::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

pub struct Srq {
    pub raw: CBox<ibv_srq>,
    pub pd: Arc<Pd>,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: Mutex<u32>,
    pub queue: Mutex<VecDeque<RecvWqe>>,
    /// A QP found this SRQ empty with a message waiting (RNR): the next post must wake it.
    pub starved: std::sync::atomic::AtomicBool,
}

impl Srq {
    pub fn create(
        pd: Arc<Pd>,
        ctx: *mut libc::c_void,
        attr: &mut ibv_srq_attr,
    ) -> Result<*mut ibv_srq> {
        // Created in the PD's domain; the C struct names the PD (or parent domain) given.
        let (named, pd) = (pd.raw.as_ptr(), pd.domain());
        if attr.max_wr == 0
            || attr.max_wr > super::device::MAX_QP_WR
            || attr.max_sge > super::device::MAX_SGE
        {
            return Err(Errno::EINVAL);
        }
        if attr.max_sge == 0 {
            attr.max_sge = 1;
        }
        let mut raw: CBox<ibv_srq> = CBox::zeroed();
        let handle = raw.addr() as u32;
        let r = raw.init();
        r.context = pd.ctx.ptr();
        r.srq_context = ctx;
        r.pd = named;
        r.handle = handle;
        let p = raw.as_ptr();
        objects().srqs.insert(
            p as usize,
            Arc::new(Srq {
                raw,
                pd,
                max_wr: attr.max_wr,
                max_sge: attr.max_sge,
                limit: Mutex::new(attr.srq_limit),
                queue: Mutex::new(VecDeque::new()),
                starved: std::sync::atomic::AtomicBool::new(false),
            }),
        );
        Ok(p)
    }

    pub fn destroy(p: *mut ibv_srq) -> Result<()> {
        let srq = objects().srqs.get(p)?;
        if objects()
            .qps
            .values()
            .iter()
            .any(|q| q.srq.as_ref().is_some_and(|s| Arc::ptr_eq(s, &srq)))
        {
            return Err(Errno::EBUSY);
        }
        super::async_event::wait_acked(p as usize);
        objects().srqs.remove(p).ok_or(Errno::EINVAL)?;
        Ok(())
    }

    /// Posts receives: `Err((index, errno))` names the first refused request.
    /// A QP that found the queue empty (RNR) is woken once a receive is queued.
    pub fn post(&self, wqes: Vec<RecvWqe>) -> std::result::Result<(), (usize, Errno)> {
        let mut pushed = 0;
        let r = self.push(wqes, &mut pushed);
        if pushed > 0 && self.starved.swap(false, std::sync::atomic::Ordering::AcqRel) {
            // It must see the new receive even if nobody polls.
            self.pd.ctx.provider.progress();
        }
        r
    }

    fn push(
        &self,
        wqes: Vec<RecvWqe>,
        pushed: &mut usize,
    ) -> std::result::Result<(), (usize, Errno)> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for (i, w) in wqes.into_iter().enumerate() {
            if w.sges.len() > self.max_sge as usize {
                return Err((i, Errno::EINVAL));
            }
            if q.len() >= self.max_wr as usize {
                return Err((i, Errno::ENOMEM));
            }
            q.push_back(w);
            *pushed += 1;
        }
        Ok(())
    }

    /// Takes the oldest receive; an armed limit that the queue drops below raises
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` once (the limit disarms, as the verbs spec says).
    pub fn pop(&self) -> Option<RecvWqe> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let w = q.pop_front()?;
        let left = q.len() as u32;
        drop(q);
        let mut limit = self.limit.lock().unwrap_or_else(|e| e.into_inner());
        if *limit > 0 && left < *limit {
            *limit = 0;
            drop(limit);
            self.pd.ctx.events.push((
                ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED,
                super::async_event::Element::Srq(self.raw.addr()),
            ));
        }
        Some(w)
    }
}

impl SharedRecvQueue for Srq {
    fn pop(&self) -> Option<RecvWqe> {
        Srq::pop(self)
    }

    fn is_empty(&self) -> bool {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    fn set_starved(&self) {
        self.starved.store(true, std::sync::atomic::Ordering::Release);
    }
}
