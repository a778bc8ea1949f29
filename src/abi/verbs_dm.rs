//! Device memory at the C boundary: the `verbs_context` ops `alloc_dm`, `free_dm` and
//! `reg_dm_mr` that verbs.h's inline `ibv_alloc_dm`, `ibv_free_dm` and `ibv_reg_dm_mr` call,
//! and the `ibv_dm` members `memcpy_to_dm`/`memcpy_from_dm` behind `ibv_memcpy_to_dm` and
//! `ibv_memcpy_from_dm` (`verbs::dm` has the logic). None is an exported symbol (libibverbs
//! exports none of them either); each runs through [`crate::entry_body!`] under the name the
//! program calls.

use crate::abi::{arg, NullOr, PositiveErrno};
use crate::sys::*;
use crate::verbs::dm::Dm;
use crate::verbs::objects;
use libc::{c_int, c_uint, c_void};

/// Installs the device-memory ops in a new context (from `verbs_ex::fill_context_ops`).
pub fn fill_dm_ops(v: &mut verbs_context) {
    v.alloc_dm = Some(alloc_dm);
    v.free_dm = Some(free_dm);
    v.reg_dm_mr = Some(reg_dm_mr);
}

fn fill_copy_ops(dm: &mut ibv_dm) {
    dm.memcpy_to_dm = Some(memcpy_to_dm);
    dm.memcpy_from_dm = Some(memcpy_from_dm);
}

unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    crate::entry_body!("ibv_alloc_dm"(context, attr) -> NullOr<ibv_dm> {
        let c = objects().contexts.get(context)?;
        // SAFETY: attr is NULL or valid for reads.
        Dm::alloc(c, unsafe { arg(attr) }?, fill_copy_ops)
    })
}

unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    crate::entry_body!("ibv_free_dm"(dm) -> PositiveErrno { Dm::free(dm) })
}

unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    crate::entry_body!("ibv_reg_dm_mr"(pd, dm, dm_offset, length, access) -> NullOr<ibv_mr> {
        let p = objects().pds.get(pd)?;
        let d = objects().dms.get(dm)?;
        d.reg_mr(&p, dm_offset, length, access)
    })
}

unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    crate::entry_body!("ibv_memcpy_to_dm"(dm, dm_offset, host_addr, length) -> PositiveErrno {
        let d = objects().dms.get(dm)?;
        // SAFETY: host_addr is NULL (checked) or valid for reads of length bytes.
        unsafe { d.copy_to(dm_offset, host_addr.cast(), length) }
    })
}

unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    crate::entry_body!("ibv_memcpy_from_dm"(host_addr, dm, dm_offset, length) -> PositiveErrno {
        let d = objects().dms.get(dm)?;
        // SAFETY: host_addr is NULL (checked) or valid for writes of length bytes.
        unsafe { d.copy_from(host_addr.cast(), dm_offset, length) }
    })
}
