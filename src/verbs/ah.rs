//! Address handles.

use super::objects;
use super::pd::Pd;
use crate::errno::Result;
use crate::handle::CBox;
use crate::sys::*;
use std::sync::Arc;

pub struct Ah {
    pub raw: CBox<ibv_ah>,
    pub pd: Arc<Pd>,
    pub attr: ibv_ah_attr,
}

impl Ah {
    pub fn create(pd: Arc<Pd>, attr: &ibv_ah_attr) -> Result<*mut ibv_ah> {
        let mut raw: CBox<ibv_ah> = CBox::zeroed();
        let handle = raw.addr() as u32;
        let r = raw.init();
        r.context = pd.ctx.ptr();
        r.pd = pd.raw.as_ptr();
        r.handle = handle;
        let p = raw.as_ptr();
        objects().ahs.insert(p as usize, Arc::new(Ah { raw, pd, attr: *attr }));
        Ok(p)
    }
}
