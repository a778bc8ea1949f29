//! Whether registered memory can be reached, and on-demand paging (ODP).
//!
//! The soft provider copies into and out of registered memory as it stands, with no pinning, so
//! every registration is "on demand" underneath. What pinning gives hardware, refusing memory
//! the access flags cannot be honoured on, is checked here at `ibv_reg_mr` time; an ODP region
//! (`IBV_ACCESS_ON_DEMAND`, explicit or implicit: the whole address space) pins nothing even in
//! the kernel, so its pages are checked at every access instead, and an access to memory that
//! is not there (or not writable) fails as a page fault an ODP device cannot resolve does, with
//! a protection error, never a fault in this process. `ibv_advise_mr` prefetches with
//! `MADV_POPULATE_READ`/`_WRITE`.

use super::mr::lookup;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::provider::{
    KeySpace, Sge, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_WRITE,
};
use crate::sys::*;

/// IBV_ACCESS_ON_DEMAND.
pub const ACCESS_ON_DEMAND: u32 = ibv_access_flags::IBV_ACCESS_ON_DEMAND.0;

/// Access flags under which the kernel pins a registration's pages for writing
/// (`ib_access_writable`): read-only memory is refused with them.
const WRITABLE: u32 = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE_WRITE
    | ACCESS_REMOTE_ATOMIC
    | ibv_access_flags::IBV_ACCESS_MW_BIND.0;

/// `IBV_ADVISE_MR_FLAG_FLUSH` (`IB_UVERBS_ADVISE_MR_FLAG_FLUSH`, which rdma-sys does not
/// carry): the advice completes before the call returns.
const ADVISE_FLAG_FLUSH: u32 = 1;

/// Whether access flags (or an access's needs) write to the memory.
pub fn writes(access: u32) -> bool {
    access & WRITABLE != 0
}

/// An implicit ODP registration: address 0, length `SIZE_MAX`, `IBV_ACCESS_ON_DEMAND`.
pub fn is_implicit(addr: usize, len: usize, access: u32) -> bool {
    addr == 0 && len == usize::MAX && access & ACCESS_ON_DEMAND != 0
}

/// `xrc_odp_caps` of `ibv_query_device_ex`: XRC has every operation of RC, and its ODP regions
/// take the same copy path.
pub fn xrc_odp_caps() -> u32 {
    odp_caps().per_transport_caps.rc_odp_caps
}

/// What `ibv_query_device_ex` says of ODP: explicit and implicit regions, every operation of
/// each transport (ODP regions take the copy path, which serves them all).
pub fn odp_caps() -> ibv_odp_caps {
    type Bits = ibv_odp_transport_cap_bits;
    let (send, recv) = (Bits::IBV_ODP_SUPPORT_SEND.0, Bits::IBV_ODP_SUPPORT_RECV.0);
    let (read, atomic) = (Bits::IBV_ODP_SUPPORT_READ.0, Bits::IBV_ODP_SUPPORT_ATOMIC.0);
    let srq_recv = Bits::IBV_ODP_SUPPORT_SRQ_RECV.0;
    let all = send | recv | Bits::IBV_ODP_SUPPORT_WRITE.0 | read | atomic | srq_recv;
    let general =
        ibv_odp_general_caps::IBV_ODP_SUPPORT.0 | ibv_odp_general_caps::IBV_ODP_SUPPORT_IMPLICIT.0;
    ibv_odp_caps {
        general_caps: general as u64,
        per_transport_caps: ibv_odp_caps__bindgen_ty_1 {
            rc_odp_caps: all,
            // UC has no READ or atomics; UD only SEND and RECV.
            uc_odp_caps: all & !(read | atomic),
            ud_odp_caps: send | recv | srq_recv,
        },
    }
}

/// Whether `addr` is at the start of a page.
pub fn is_page_aligned(addr: usize) -> bool {
    addr % page_size() == 0
}

fn page_size() -> usize {
    // SAFETY: sysconf is always safe to call.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize
}

/// The whole pages `[addr, addr+len)` touches, or `None` where the end overflows.
fn page_range(addr: usize, len: usize) -> Option<(usize, usize)> {
    let page = page_size();
    let end = addr.checked_add(len)?.checked_next_multiple_of(page)?;
    Some((addr & !(page - 1), end))
}

/// Whether every byte of `[addr, addr+len)` is mapped and readable, and writable if `write`.
pub fn accessible(addr: usize, len: usize, write: bool) -> bool {
    let Some((start, end)) = page_range(addr, len) else { return false };
    crate::runtime::maps::permits(start, end, write).unwrap_or_else(|| is_mapped(start, end))
}

/// What the kernel's pinning of a registration (not ODP) demands of `[addr, addr+len)`: every
/// page mapped and readable, writable if `write`, and none that touching would make raise
/// SIGBUS (a file mapping past the file's end: the map does not show it). Pinning faults every
/// page in; here only memory other than private anonymous memory (which cannot raise SIGBUS)
/// is, so that registering a large buffer never touched still commits none of it.
pub fn pinnable(addr: usize, len: usize, write: bool) -> bool {
    let Some((start, end)) = page_range(addr, len) else { return false };
    match crate::runtime::maps::permits_and_anon(start, end, write) {
        Some((false, _)) => false,
        Some((true, true)) => true,
        // Not only private anonymous memory, or a map that cannot be read: fault it in.
        _ => fault_in(addr, len, write),
    }
}

/// An on-demand access to `[addr, addr+len)`: faults its pages in as a device's page fault
/// would (`MADV_POPULATE_READ`/`_WRITE`, one system call), and says whether the access can be
/// served. It cannot where there is a hole (`ENOMEM`) or where touching a page would raise
/// SIGBUS (`EFAULT`: a file mapping past the file's end), which the map does not show. Pages
/// the access may not touch (`EINVAL`, as are I/O mappings and kernels before 5.14) and any
/// other error are answered by the map, which is slower but exact about permissions.
pub fn fault_in(addr: usize, len: usize, write: bool) -> bool {
    let Some((start, end)) = page_range(addr, len) else { return false };
    let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
    // SAFETY: MADV_POPULATE_* only faults in the pages of the range that are mapped (stopping
    // with an error at the first it cannot); it never reads or changes their contents.
    if unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) } == 0 {
        return true;
    }
    match Errno::last_raw() {
        libc::ENOMEM | libc::EFAULT | libc::EHWPOISON => false,
        _ => accessible(addr, len, write),
    }
}

/// Whether `[start, end)` (whole pages) is mapped: `msync(MS_ASYNC)` fails with ENOMEM on
/// unmapped pages and otherwise does nothing. The fallback where the map cannot be read.
fn is_mapped(start: usize, end: usize) -> bool {
    // SAFETY: msync with MS_ASYNC only inspects the mappings of the range.
    unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_ASYNC) == 0 }
}

/// `ibv_advise_mr`: each SGE must lie in an ODP region of `pd` (with local write for
/// `PREFETCH_WRITE`) and in memory that is there: `EFAULT` otherwise, as the man page says.
/// `ENOTSUP` for an unknown advice, `EINVAL` for unknown flags or an empty list (the kernel's
/// SGE-list attribute has a minimum size of one entry).
pub fn advise(pd: &Pd, advice: u32, flags: u32, sges: &[Sge]) -> Result<()> {
    use ib_uverbs_advise_mr_advice::*;
    if sges.is_empty() {
        return Err(Errno::EINVAL);
    }
    let (need, populate) = match advice {
        IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => (0, Some(libc::MADV_POPULATE_READ)),
        IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => {
            (ACCESS_LOCAL_WRITE, Some(libc::MADV_POPULATE_WRITE))
        }
        // Without faulting: pages already present are what the device would see; nothing to do.
        IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => (0, None),
        _ => return Err(Errno::EOPNOTSUPP),
    };
    if flags & !ADVISE_FLAG_FLUSH != 0 {
        return Err(Errno::EINVAL);
    }
    for s in sges {
        let len = s.length as usize;
        let (reg, addr) =
            lookup(s.lkey, pd, s.addr, len, need, KeySpace::Local).map_err(|_| Errno::EFAULT)?;
        if reg.access & ACCESS_ON_DEMAND == 0 {
            return Err(Errno::EFAULT); // prefetching is for ODP regions only
        }
        let Some(advice) = populate.filter(|_| len > 0) else { continue };
        let (start, end) = page_range(addr as usize, len).ok_or(Errno::EFAULT)?;
        // SAFETY: madvise only faults in the pages of the range (checked mapped by `lookup`);
        // it never changes their contents.
        if unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) } != 0 {
            let e = Errno::last();
            // A kernel without MADV_POPULATE_* (before 5.14): the advice is only advice.
            if e != Errno::EINVAL {
                return Err(Errno::EFAULT);
            }
        }
    }
    Ok(())
}
