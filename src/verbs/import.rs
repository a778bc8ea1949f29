//! Sharing a context's objects through its command descriptor: `ibv_import_device` on a
//! duplicate of `cmd_fd`, then `ibv_import_pd`/`_mr`/`_dm` by handle, and the unimport calls.
//!
//! A context's `cmd_fd` is a sealed memfd of ours; the inode of its file names the objects'
//! namespace (`Context::ucontext`), which every context opened on a duplicate of it shares, as
//! contexts imported from one uverbs file share its kernel objects. An imported object is
//! another C struct for the same object: a PD wraps the original as a parent domain does (so
//! everything created on it lands in the original's domain), an MR shares the registration and
//! its keys, a DM the memory. Unimporting lets go of the struct only.
//!
//! The objects live in the process that created them. What is not found here is asked of that
//! process, when another process was given the `cmd_fd` (`import_remote/`).

use super::device::Context;
use super::import_remote;
use super::objects;
use super::pd::Pd;
use crate::errno::{check, Result};
use crate::sys::*;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// `ibv_import_device`: a new context of the device on `fd`. On success the context owns the
/// file (`ibv_close_device` closes `fd`); on failure `fd` is left to the caller.
pub fn import_device(fd: RawFd) -> Result<*mut ibv_context> {
    let ucontext = crate::runtime::shm::inode(fd)?;
    let id = crate::runtime::shm::file_id(fd)?;
    let known = objects().contexts.values().into_iter().find(|c| {
        crate::runtime::shm::file_id(c.vctx.read().context.cmd_fd).is_ok_and(|x| x == id)
    });
    let device = match known {
        Some(orig) => orig.vctx.read().context.device,
        None => {
            import_remote::hello(fd)?;
            super::device::device_ptr()
        }
    };
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor fstat just accepted only creates a descriptor.
    let dup = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: dup was just created and is owned here.
    let mine = unsafe { OwnedFd::from_raw_fd(dup) };
    let p = Context::open_on(device, mine, ucontext)?;
    // The context holds the file through its duplicate now: the caller's descriptor is its.
    // SAFETY: `fd` was handed over to us by the caller, who no longer uses it.
    unsafe { libc::close(fd) };
    Ok(p)
}

/// `ibv_import_pd`: the plain PD with `handle` in `ctx`'s namespace, as a PD of `ctx`.
pub fn import_pd(ctx: Arc<Context>, handle: u32) -> Result<*mut ibv_pd> {
    let found = objects()
        .pds
        .values()
        .into_iter()
        .find(|p| p.ctx.ucontext == ctx.ucontext && p.parent.is_none() && p.handle() == handle);
    match found {
        Some(pd) => Pd::import(ctx, pd),
        None => import_remote::import_pd(ctx, handle),
    }
}

/// `ibv_import_mr`: the MR with `handle` whose domain is `pd`'s, as an MR of `pd`.
pub fn import_mr(pd: Arc<Pd>, handle: u32) -> Result<*mut ibv_mr> {
    let domain = pd.domain();
    let found = objects()
        .mrs
        .values()
        .into_iter()
        .find(|m| m.raw.read().handle == handle && Arc::ptr_eq(&m.reg().pd, &domain));
    match found {
        Some(m) => Ok(m.import_on(&pd)),
        None => import_remote::import_mr(pd, handle),
    }
}

/// `ibv_import_dm`: the DM with `handle` in `ctx`'s namespace, as a DM of `ctx` (`fill`
/// installs the C struct's copy functions on one of another process).
pub fn import_dm(ctx: Arc<Context>, handle: u32, fill: fn(&mut ibv_dm)) -> Result<*mut ibv_dm> {
    let found =
        objects().dms.values().into_iter().find(|d| {
            d.ctx.ucontext == ctx.ucontext && !d.is_freed() && d.raw.read().handle == handle
        });
    match found {
        Some(d) => Ok(d.import_on(ctx)),
        None => import_remote::import_dm(ctx, handle, fill),
    }
}

/// `ibv_unimport_pd`, `_mr`, `_dm`: the struct goes, the object stays (nothing to report: the
/// calls return void).
pub fn unimport_pd(p: *mut ibv_pd) {
    Pd::unimport(p);
}

pub fn unimport_mr(p: *mut ibv_mr) {
    super::mr::Mr::unimport(p);
}

pub fn unimport_dm(p: *mut ibv_dm) {
    objects().dms.remove(p);
}
