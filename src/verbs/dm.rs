//! Device memory (`ibv_alloc_dm`, `ibv_free_dm`, `ibv_memcpy_to_dm`/`_from_dm`,
//! `ibv_reg_dm_mr`).
//!
//! A soft device has no memory of its own, so its "device memory" is host memory the library
//! owns: an anonymous mapping per DM (zeroed, page-granular, aligned as `log_align_req` asks),
//! unmapped when the last user is gone. The process may hold at most [`MAX_DM_SIZE`] bytes of
//! it at once, the `max_dm_size` that `ibv_query_device_ex` advertises.
//!
//! `ibv_reg_dm_mr` registers `[offset, offset + length)` of a DM as a zero-based MR through the
//! one registration path of [`Mr`] (its [`super::mr::Reg`] holds the DM's memory, so an RDMA
//! operation in flight never outlives the pages). While such an MR exists `ibv_free_dm` fails
//! with `EBUSY`, as the kernel answers for a DM in use.
//!
//! Errors as rdma-core (mlx5, the provider that has device memory, and the kernel's checks):
//! `EINVAL` for a `comp_mask` bit, a length of 0 or beyond `max_dm_size`, and for a registration
//! without `IBV_ACCESS_ZERO_BASED`, with other flags, of an empty range or one outside the DM;
//! `ENOMEM` when the process's device memory is used up; `EFAULT` for a copy outside the DM.

use super::device::Context;
use super::mr::Mr;
use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::runtime::lock;
use crate::sys::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The device memory a process may hold at once (`max_dm_size`).
pub const MAX_DM_SIZE: usize = 256 * 1024;

/// The largest `log_align_req` accepted: 2 MiB (a huge page; larger would only waste space).
pub const MAX_LOG_ALIGN: u32 = 21;

/// Bytes of device memory allocated in this process.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// The access flags a DM registration may carry (mlx5's `MLX5_DM_ALLOWED_ACCESS`).
const DM_ACCESS: u32 = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
    | ibv_access_flags::IBV_ACCESS_ZERO_BASED.0
    | ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0; // = IBV_ACCESS_OPTIONAL_RANGE
const ZERO_BASED: u32 = ibv_access_flags::IBV_ACCESS_ZERO_BASED.0;
const MASK_HANDLE: u32 = IBV_DM_MASK_HANDLE;

/// The bytes of one DM: `len` bytes at `addr`, inside a private mapping of `map_len` bytes at
/// `map`. Unmapped when dropped (after the DM and every registration over it are gone).
pub struct DmMem {
    map: usize,
    map_len: usize,
    addr: usize,
    len: usize,
    /// What it holds of the device's `ALLOCATED` budget, given back when it goes.
    reserved: usize,
    /// Another process's DM, mapped here (`remote.rs`): the mapping is this file's, not ours.
    file: Option<crate::runtime::shm::Shm>,
    /// Our pages as another process maps them (`remote.rs`).
    exported: Mutex<Option<Arc<dyn crate::provider::SharedRegion>>>,
}

mod remote;
pub use remote::DescribedDm;

impl DmMem {
    /// `len` zeroed bytes aligned to `1 << log_align` (at least a page).
    fn new(len: usize, log_align: u32) -> Result<DmMem> {
        let page = page_size();
        let (map_len, align) = layout(len, log_align, page).ok_or(Errno::EINVAL)?;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a fresh anonymous mapping where the kernel picks; nothing is replaced.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), map_len, prot, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(Errno::ENOMEM);
        }
        let map = p as usize;
        let addr = map.next_multiple_of(align);
        Ok(DmMem { map, map_len, addr, len, reserved: 0, file: None, exported: Mutex::default() })
    }

    pub fn addr(&self) -> usize {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DmMem {
    fn drop(&mut self) {
        // The device's memory is given back with the last DM or registration over it.
        ALLOCATED.fetch_sub(self.reserved, Ordering::AcqRel);
        if self.file.is_some() {
            return; // another process's pages: the file's mapping goes with it
        }
        // Other processes lose the pages first (they go back to private memory).
        if let Some(s) = lock(&self.exported).take() {
            s.revoke();
        }
        // SAFETY: our own mapping, made in `new`; nobody reaches it any more (its last `Arc`
        // is being dropped: the DM and every registration over it are gone).
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf is always safe to call.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize
}

/// The mapping length and the alignment for `len` bytes aligned to `1 << log_align` with pages
/// of `page` bytes: whole pages, plus room to align the start when the alignment is larger
/// than a page. `None` for an alignment beyond [`MAX_LOG_ALIGN`] or a length that overflows.
fn layout(len: usize, log_align: u32, page: usize) -> Option<(usize, usize)> {
    if log_align > MAX_LOG_ALIGN {
        return None;
    }
    let align = (1usize << log_align).max(page);
    let pages = len.checked_next_multiple_of(page)?;
    // align >= page: nothing extra when the pages are aligned enough.
    Some((pages.checked_add(align - page)?, align))
}

/// `[offset, offset + length)` lies in a DM of `size` bytes (no arithmetic may overflow).
fn within(size: usize, offset: u64, length: usize) -> bool {
    let end = u64::try_from(length).ok().and_then(|l| offset.checked_add(l));
    end.is_some_and(|e| e <= size as u64)
}

/// Reserves `len` bytes of the process's device memory: `EINVAL` for 0 or more than
/// [`MAX_DM_SIZE`], `ENOMEM` if the rest does not hold them.
fn reserve(used: &AtomicUsize, len: usize) -> Result<()> {
    if len == 0 || len > MAX_DM_SIZE {
        return Err(Errno::EINVAL);
    }
    used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
        u.checked_add(len).filter(|&t| t <= MAX_DM_SIZE)
    })
    .map(|_| ())
    .map_err(|_| Errno::ENOMEM)
}

pub struct Dm {
    pub raw: CBox<ibv_dm>,
    pub ctx: Arc<Context>,
    mem: Arc<DmMem>,
    /// Set by a successful `ibv_free_dm`; held across a registration, so that a DM is never
    /// freed between its check and the MR's publication.
    freed: Mutex<bool>,
}

impl Dm {
    /// `ibv_alloc_dm`: `fill` installs the C struct's copy functions.
    pub fn alloc(
        ctx: Arc<Context>,
        a: &ibv_alloc_dm_attr,
        fill: impl FnOnce(&mut ibv_dm),
    ) -> Result<*mut ibv_dm> {
        if a.comp_mask != 0 {
            return Err(Errno::EINVAL);
        }
        // Other processes given the cmd_fd may import it (best effort, as for a PD).
        let _ = super::import_remote::start_serving();
        reserve(&ALLOCATED, a.length)?;
        let mem = match DmMem::new(a.length, a.log_align_req) {
            Ok(mut m) => {
                m.reserved = a.length;
                Arc::new(m)
            }
            Err(e) => {
                ALLOCATED.fetch_sub(a.length, Ordering::AcqRel);
                return Err(e);
            }
        };
        let mut raw: CBox<ibv_dm> = CBox::zeroed();
        let r = raw.init();
        r.context = ctx.ptr();
        r.handle = super::fresh_handle(|h| {
            objects().dms.values().iter().any(|d| d.raw.read().handle == h)
        });
        r.comp_mask = MASK_HANDLE;
        fill(r);
        let p = raw.as_ptr();
        objects().dms.insert(p as usize, Arc::new(Dm { raw, ctx, mem, freed: Mutex::new(false) }));
        Ok(p)
    }

    /// `ibv_import_dm`: another DM struct on `ctx` for this DM's memory, with its handle and
    /// ops; letting it go (`ibv_unimport_dm`) leaves the memory to the original.
    pub fn import_on(&self, ctx: Arc<Context>) -> *mut ibv_dm {
        let mut raw: CBox<ibv_dm> = CBox::zeroed();
        let r = raw.init();
        *r = self.raw.read();
        r.context = ctx.ptr();
        let p = raw.as_ptr();
        let dm = Dm { raw, ctx, mem: self.mem.clone(), freed: Mutex::new(false) };
        objects().dms.insert(p as usize, Arc::new(dm));
        p
    }

    /// The DM's length in bytes.
    pub fn mem_len(&self) -> usize {
        self.mem.len
    }

    /// Whether `ibv_free_dm` freed it.
    pub fn is_freed(&self) -> bool {
        *lock(&self.freed)
    }

    /// `ibv_free_dm`: `EBUSY` while an MR is registered over the DM.
    pub fn free(p: *mut ibv_dm) -> Result<()> {
        let dm = objects().dms.get(p)?;
        let mut freed = lock(&dm.freed);
        if *freed {
            return Err(Errno::EINVAL);
        }
        if objects().mrs.values().iter().any(|m| m.reg().holds(&dm.mem)) {
            return Err(Errno::EBUSY);
        }
        *freed = true;
        objects().dms.remove(p);
        Ok(())
    }

    /// `ibv_memcpy_to_dm`.
    ///
    /// # Safety
    /// `src` is valid for reads of `length` bytes.
    pub unsafe fn copy_to(&self, offset: u64, src: *const u8, length: usize) -> Result<()> {
        let at = self.at(offset, length, src.is_null())?;
        // SAFETY: `at` is `length` bytes inside our mapping (checked); src per the contract;
        // a caller's buffer is never our DM's mapping (which we never hand out).
        unsafe { std::ptr::copy(src, at as *mut u8, length) };
        Ok(())
    }

    /// `ibv_memcpy_from_dm`.
    ///
    /// # Safety
    /// `dst` is valid for writes of `length` bytes.
    pub unsafe fn copy_from(&self, dst: *mut u8, offset: u64, length: usize) -> Result<()> {
        let at = self.at(offset, length, dst.is_null())?;
        // SAFETY: as in copy_to, the other way.
        unsafe { std::ptr::copy(at as *const u8, dst, length) };
        Ok(())
    }

    /// The address of `[offset, offset + length)` of the DM: `EFAULT` outside it (as mlx5),
    /// `EINVAL` for a NULL host buffer.
    fn at(&self, offset: u64, length: usize, host_null: bool) -> Result<usize> {
        if !within(self.mem.len, offset, length) {
            return Err(Errno::EFAULT);
        }
        if host_null && length > 0 {
            return Err(Errno::EINVAL);
        }
        Ok(self.mem.addr + offset as usize)
    }

    /// `ibv_reg_dm_mr`: a zero-based MR of `pd` over `[offset, offset + length)` of the DM.
    pub fn reg_mr(
        &self,
        pd: &Arc<Pd>,
        offset: u64,
        length: usize,
        access: u32,
    ) -> Result<*mut ibv_mr> {
        if access & ZERO_BASED == 0 || access & !DM_ACCESS != 0 {
            return Err(Errno::EINVAL);
        }
        if !Arc::ptr_eq(&pd.ctx, &self.ctx) {
            return Err(Errno::EINVAL);
        }
        if length == 0 || !within(self.mem.len, offset, length) {
            return Err(Errno::EINVAL);
        }
        let freed = lock(&self.freed);
        if *freed {
            return Err(Errno::EINVAL);
        }
        let addr = (self.mem.addr + offset as usize) as *mut libc::c_void;
        let r = pd.reg_mr(|d| Mr::register_dm(d, addr, length, access as i32, self.mem.clone()));
        drop(freed);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_whole_aligned_pages() {
        let page = 4096;
        assert_eq!(layout(256, 3, page), Some((4096, 4096)), "small alignments get a page");
        assert_eq!(layout(4096, 12, page), Some((4096, 4096)));
        assert_eq!(layout(4097, 0, page), Some((8192, 4096)));
        // Beyond a page: room to move the start to the alignment.
        assert_eq!(layout(100, 16, page), Some((4096 + 65536 - 4096, 65536)));
        assert_eq!(layout(100, MAX_LOG_ALIGN + 1, page), None);
        assert_eq!(layout(usize::MAX - 10, 0, page), None, "overflow");
    }

    #[test]
    fn mapping_is_aligned_and_zeroed() {
        for log in [0, 3, 12, 16, MAX_LOG_ALIGN] {
            let m = DmMem::new(1000, log).unwrap();
            assert_eq!(m.addr() % (1 << log), 0, "log_align_req {log}");
            assert!(m.addr() >= m.map && m.addr() + m.len() <= m.map + m.map_len);
            // SAFETY: the mapping holds len readable bytes at addr.
            let b = unsafe { std::slice::from_raw_parts(m.addr() as *const u8, m.len()) };
            assert!(b.iter().all(|&x| x == 0));
        }
        assert_eq!(DmMem::new(64, MAX_LOG_ALIGN + 1).err(), Some(Errno::EINVAL));
    }

    #[test]
    fn bounds() {
        assert!(within(256, 0, 256));
        assert!(within(256, 32, 16));
        assert!(within(256, 256, 0), "empty at the end");
        assert!(!within(256, 250, 16));
        assert!(!within(256, 257, 0));
        assert!(!within(256, u64::MAX, 2), "no overflow");
        assert!(!within(256, 1, usize::MAX));
    }

    #[test]
    fn reservation() {
        let used = AtomicUsize::new(0);
        assert_eq!(reserve(&used, 0), Err(Errno::EINVAL));
        assert_eq!(reserve(&used, MAX_DM_SIZE + 1), Err(Errno::EINVAL));
        assert_eq!(reserve(&used, MAX_DM_SIZE - 64), Ok(()));
        assert_eq!(reserve(&used, 128), Err(Errno::ENOMEM), "the total is bounded");
        assert_eq!(reserve(&used, 64), Ok(()));
        assert_eq!(used.load(Ordering::Relaxed), MAX_DM_SIZE);
        assert_eq!(reserve(&used, 1), Err(Errno::ENOMEM));
    }
}
