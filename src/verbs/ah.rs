//! Address handles.

use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::sys::*;
use std::sync::Arc;

pub struct Ah {
    pub raw: CBox<ibv_ah>,
    pub pd: Arc<Pd>,
    pub attr: ibv_ah_attr,
}

impl Ah {
    /// `EINVAL` without a GRH (the port is RoCE: hardware and rxe refuse such an AH, as there
    /// is no LID to route by) or on a port other than 1.
    pub fn create(pd: Arc<Pd>, attr: &ibv_ah_attr) -> Result<*mut ibv_ah> {
        // Created in the PD's domain; the C struct names the PD (or parent domain) given.
        let (named, pd) = (pd.raw.as_ptr(), pd.domain());
        // A source GID index beyond the port's table is invalid (conformance: ibv_create_ah
        // ERR-ATTR).
        if attr.is_global == 0
            || attr.port_num != 1
            || attr.grh.sgid_index as usize >= super::device::GID_TABLE_LEN
        {
            return Err(Errno::EINVAL);
        }
        let mut raw: CBox<ibv_ah> = CBox::zeroed();
        let handle = raw.addr() as u32;
        let r = raw.init();
        r.context = pd.ctx.ptr();
        r.pd = named;
        r.handle = handle;
        let p = raw.as_ptr();
        objects().ahs.insert(p as usize, Arc::new(Ah { raw, pd, attr: *attr }));
        Ok(p)
    }
}
