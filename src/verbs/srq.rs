//! Shared receive queues.

use super::cq::Cq;
use super::objects;
use super::pd::Pd;
use super::xrcd::Xrcd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{RecvWqe, SharedRecvQueue};
use crate::runtime::lock;
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
    /// An XRC SRQ: its domain, number and CQ.
    pub xrc: Option<XrcSrq>,
}

/// What an XRC SRQ has beyond a basic one.
pub struct XrcSrq {
    pub xrcd: Arc<Xrcd>,
    pub srqn: u32,
    /// Keeps `srqn` unique on the host while the SRQ lives (`xrcd::claim_srqn`).
    pub _claim: std::os::fd::OwnedFd,
    /// Where the receives of requests that name this SRQ complete.
    pub cq: Arc<Cq>,
}

impl Srq {
    pub fn create(
        pd: Arc<Pd>,
        ctx: *mut libc::c_void,
        attr: &mut ibv_srq_attr,
    ) -> Result<*mut ibv_srq> {
        Self::create_typed(pd, ctx, attr, None)
    }

    /// `ibv_create_srq_ex`: a basic SRQ, or an XRC SRQ (PD, XRC domain and CQ required);
    /// tag matching is not offered (`EOPNOTSUPP`).
    pub fn create_ex(a: &mut ibv_srq_init_attr_ex) -> Result<*mut ibv_srq> {
        use ibv_srq_init_attr_mask as m;
        let known = m::IBV_SRQ_INIT_ATTR_TYPE.0
            | m::IBV_SRQ_INIT_ATTR_PD.0
            | m::IBV_SRQ_INIT_ATTR_XRCD.0
            | m::IBV_SRQ_INIT_ATTR_CQ.0
            | m::IBV_SRQ_INIT_ATTR_TM.0;
        if a.comp_mask & !known != 0 || a.comp_mask & m::IBV_SRQ_INIT_ATTR_PD.0 == 0 {
            return Err(Errno::EINVAL);
        }
        let o = objects();
        let pd = o.pds.get(a.pd)?;
        let srq_type = if a.comp_mask & m::IBV_SRQ_INIT_ATTR_TYPE.0 != 0 {
            a.srq_type
        } else {
            ibv_srq_type::IBV_SRQT_BASIC
        };
        let xrc = match srq_type {
            ibv_srq_type::IBV_SRQT_BASIC => None,
            ibv_srq_type::IBV_SRQT_XRC => {
                let need = m::IBV_SRQ_INIT_ATTR_XRCD.0 | m::IBV_SRQ_INIT_ATTR_CQ.0;
                if a.comp_mask & need != need {
                    return Err(Errno::EINVAL);
                }
                let xrcd = o.xrcds.get(a.xrcd)?;
                let cq = o.cqs.get(a.cq)?;
                if !Arc::ptr_eq(&xrcd.ctx, &pd.ctx) || !Arc::ptr_eq(&cq.ctx, &pd.ctx) {
                    return Err(Errno::EINVAL);
                }
                let (srqn, _claim) = super::xrcd::claim_srqn()?;
                Some(XrcSrq { xrcd, srqn, _claim, cq })
            }
            ibv_srq_type::IBV_SRQT_TM => return Err(Errno::EOPNOTSUPP),
            _ => return Err(Errno::EINVAL),
        };
        Self::create_typed(pd, a.srq_context, &mut a.attr, xrc)
    }

    fn create_typed(
        pd: Arc<Pd>,
        ctx: *mut libc::c_void,
        attr: &mut ibv_srq_attr,
        xrc: Option<XrcSrq>,
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
        let srq = Arc::new(Srq {
            raw,
            pd,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: Mutex::new(attr.srq_limit),
            queue: Mutex::new(VecDeque::new()),
            starved: std::sync::atomic::AtomicBool::new(false),
            xrc,
        });
        if let Some(x) = &srq.xrc {
            x.xrcd.add_srq(&srq, x.srqn);
        }
        objects().srqs.insert(p as usize, srq);
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
        let srq = objects().srqs.remove(p).ok_or(Errno::EINVAL)?;
        if let Some(x) = &srq.xrc {
            x.xrcd.remove_srq(x.srqn);
        }
        Ok(())
    }

    /// `ibv_get_srq_num`: an XRC SRQ's number (`EINVAL` for a basic SRQ, which has none).
    pub fn number(&self) -> Result<u32> {
        self.xrc.as_ref().map(|x| x.srqn).ok_or(Errno::EINVAL)
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
        let mut q = lock(&self.queue);
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
        let mut q = lock(&self.queue);
        let w = q.pop_front()?;
        let left = q.len() as u32;
        drop(q);
        let mut limit = lock(&self.limit);
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
        lock(&self.queue).is_empty()
    }

    fn set_starved(&self) {
        self.starved.store(true, std::sync::atomic::Ordering::Release);
    }
}
