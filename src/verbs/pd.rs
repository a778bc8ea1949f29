//! Protection domains.

use super::device::Context;
use super::objects;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::sys::*;
use std::sync::Arc;

pub struct Pd {
    pub raw: CBox<ibv_pd>,
    pub ctx: Arc<Context>,
}

impl Pd {
    pub fn alloc(ctx: Arc<Context>) -> Result<*mut ibv_pd> {
        let mut raw: CBox<ibv_pd> = CBox::zeroed();
        let handle = raw.addr() as u32;
        let r = raw.init();
        r.context = ctx.ptr();
        r.handle = handle;
        let p = raw.as_ptr();
        objects().pds.insert(p as usize, Arc::new(Pd { raw, ctx }));
        Ok(p)
    }

    /// `EBUSY` while MRs, QPs, SRQs or AHs still use the PD, as the kernel answers.
    pub fn dealloc(p: *mut ibv_pd) -> Result<()> {
        let pd = objects().pds.get(p)?;
        let o = objects();
        let busy = o.mrs.values().iter().any(|m| Arc::ptr_eq(&m.pd(), &pd))
            || o.qps.values().iter().any(|q| Arc::ptr_eq(&q.pd, &pd))
            || o.srqs.values().iter().any(|s| Arc::ptr_eq(&s.pd, &pd))
            || o.ahs.values().iter().any(|a| Arc::ptr_eq(&a.pd, &pd));
        if busy {
            return Err(Errno::EBUSY);
        }
        o.pds.remove(p);
        Ok(())
    }
}
