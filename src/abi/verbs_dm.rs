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

/// The copy functions of every DM's C struct.
pub(super) fn fill_copy_ops(dm: &mut ibv_dm) {
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

#[cfg(test)]
mod tests {
    //! The busy rule, bad input and the process's limit through the ops a program reaches (the
    //! conformance program checks the clauses and an RDMA WRITE into a DM MR).
    use super::*;
    use crate::abi::verbs::ibv_open_device;
    use crate::abi::verbs::{ibv_alloc_pd, ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr};
    use crate::errno::Errno;
    use crate::verbs::dm::MAX_DM_SIZE;
    use std::ptr::{null, null_mut};

    const ZERO_BASED: u32 = ibv_access_flags::IBV_ACCESS_ZERO_BASED.0;
    const LOCAL_WRITE: u32 = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;

    fn attr(length: usize) -> ibv_alloc_dm_attr {
        ibv_alloc_dm_attr { length, log_align_req: 3, comp_mask: 0 }
    }

    #[test]
    fn dm_busy_while_registered_and_bad_input_is_refused() {
        crate::abi::init();
        // SAFETY: every pointer passed is live, NULL or deliberately foreign (never
        // dereferenced: the registries refuse it), and every buffer holds what is copied.
        unsafe {
            let ctx = ibv_open_device(crate::verbs::device::device_ptr());
            let pd = ibv_alloc_pd(ctx);
            let dm = alloc_dm(ctx, &mut attr(256));
            assert!(!dm.is_null());
            assert_eq!((*dm).context, ctx);
            let mut out = [7u8; 8];
            assert_eq!(memcpy_from_dm(out.as_mut_ptr().cast(), dm, 248, 8), 0);
            assert_eq!(out, [0; 8], "device memory starts zeroed");
            assert_eq!(memcpy_to_dm(dm, 250, out.as_ptr().cast(), 8), libc::EFAULT);
            assert_eq!(memcpy_to_dm(dm, 0, null(), 8), libc::EINVAL);
            let foreign = out.as_mut_ptr().cast::<ibv_dm>();
            assert_eq!(memcpy_to_dm(foreign, 0, out.as_ptr().cast(), 8), libc::EINVAL);
            assert!(reg_dm_mr(pd, dm, 0, 64, LOCAL_WRITE).is_null());
            assert_eq!(Errno::last(), Errno::EINVAL, "ZERO_BASED is required");
            assert!(reg_dm_mr(pd, dm, 200, 64, ZERO_BASED).is_null());
            assert_eq!(Errno::last(), Errno::EINVAL, "outside the DM");
            assert!(reg_dm_mr(pd, foreign, 0, 64, ZERO_BASED).is_null());
            let mr = reg_dm_mr(pd, dm, 64, 64, ZERO_BASED | LOCAL_WRITE);
            assert!(!mr.is_null());
            assert!((*mr).addr.is_null() && (*mr).length == 64);
            assert_eq!(free_dm(dm), libc::EBUSY);
            assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
            assert_eq!(ibv_dereg_mr(mr), 0);
            assert_eq!(free_dm(dm), 0);
            assert_eq!(free_dm(dm), libc::EINVAL, "a DM is freed once");
            assert_eq!(free_dm(null_mut()), libc::EINVAL);
            // The process's limit: all of it at once, then nothing more until it is freed.
            assert!(alloc_dm(ctx, &mut attr(0)).is_null());
            assert!(alloc_dm(ctx, &mut attr(MAX_DM_SIZE + 1)).is_null());
            assert_eq!(Errno::last(), Errno::EINVAL);
            assert!(alloc_dm(ctx, null_mut()).is_null());
            let all = alloc_dm(ctx, &mut attr(MAX_DM_SIZE));
            assert!(!all.is_null());
            assert!(alloc_dm(ctx, &mut attr(64)).is_null());
            assert_eq!(Errno::last(), Errno::ENOMEM);
            assert_eq!(free_dm(all), 0);
            let again = alloc_dm(ctx, &mut attr(64));
            assert!(!again.is_null());
            assert_eq!(free_dm(again), 0);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
        }
    }
}
