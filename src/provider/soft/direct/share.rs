//! The target side: a registered region's whole pages moved onto a memfd at `ibv_reg_mr`, so a
//! peer that was granted the region maps the same pages, and moved back onto private memory
//! when the region is deregistered (or in a forked child, which must not write through to us).
//!
//! The memfd holds the region's pages and one control page after them; its first word is 1
//! while the grant holds and 0 once revoked. A peer checks it before each access; revoking
//! clears it and then replaces our pages with a private copy, so whatever a peer does with its
//! mapping afterwards reaches an orphaned file and never our memory.

use crate::provider::SharedRegion;
use crate::runtime::{fork, lock, maps};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The control word's value while the grant holds.
pub const VALID: u64 = 1;

/// The seals on a region's memfd: a peer holding it cannot make our mapping fault.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// A region's pages on a memfd.
pub struct SharedMem {
    /// The region's whole pages, `[base, base + len)`.
    pub base: usize,
    pub len: usize,
    /// Where peers address `base`: the region's iova space (page-aligned).
    pub remote_base: u64,
    /// The region's access flags (`ibv_access_flags`).
    pub access: u32,
    fd: OwnedFd,
    inode: u64,
    /// Our mapping of the control page.
    ctl: *mut AtomicU64,
    revoked: AtomicBool,
    /// A forked child's copy must neither revoke nor move its parent's pages.
    generation: u64,
}

// SAFETY: `ctl` points at a shared page mapped for the life of the value and is only accessed
// atomically; every other field is plain data or a descriptor.
unsafe impl Send for SharedMem {}
// SAFETY: `ctl` points at a shared page mapped for the life of the value and is only accessed
// atomically, so shared references from several threads touch it only through atomics.
unsafe impl Sync for SharedMem {}

/// The regions of this process that are on a memfd (used under `fork::shared()`, so a forked
/// child finds the lock free).
static LIVE: Mutex<Vec<Weak<SharedMem>>> = Mutex::new(Vec::new());

fn lock_live() -> std::sync::MutexGuard<'static, Vec<Weak<SharedMem>>> {
    lock(&LIVE)
}

/// Why a region keeps the copy path (for the trace).
#[derive(Debug)]
pub enum NotShared {
    NoWholePage,
    /// The pages' iova is not page-aligned (a peer's mapping needs it to be).
    UnalignedIova,
    NotPrivateAnonymous,
    Overlaps,
    System(i32),
}

impl SharedMem {
    /// Moves the whole pages of `[addr, addr + len)`, which peers address from `iova`, onto a
    /// new memfd.
    ///
    /// Writes to those pages by another thread while this runs may be lost (between the copy
    /// and the remap), as may writes during `revoke`: registering or deregistering memory that
    /// another thread is writing is a race on real hardware too.
    pub fn create(
        addr: usize,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<Arc<SharedMem>, NotShared> {
        let page = page_size();
        let base = addr.next_multiple_of(page);
        let end = (addr + len) / page * page;
        if end <= base {
            return Err(NotShared::NoWholePage);
        }
        let remote_base = iova
            .checked_add((base - addr) as u64)
            .filter(|b| b % page as u64 == 0 && b.checked_add((end - base) as u64).is_some())
            .ok_or(NotShared::UnalignedIova)?;
        Self::move_pages(base, end, remote_base, access)
    }

    /// Moves every page that `[addr, addr + len)` touches onto a new memfd, a partial last page
    /// included (a DM's, whose tail is the library's own mapping; verbs exports MRs on page
    /// boundaries only): for another process that was handed the region's context (an
    /// `ibv_import_mr` or `ibv_import_dm` across processes). Peers never get it (`remote_base`
    /// 0).
    pub fn create_span(addr: usize, len: usize, access: u32) -> Result<Arc<SharedMem>, NotShared> {
        let page = page_size();
        let base = addr / page * page;
        let end = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(page));
        match end {
            Some(end) if len > 0 => Self::move_pages(base, end, 0, access),
            _ => Err(NotShared::NoWholePage),
        }
    }

    /// Moves the pages `[base, end)` onto a new memfd.
    fn move_pages(
        base: usize,
        end: usize,
        remote_base: u64,
        access: u32,
    ) -> Result<Arc<SharedMem>, NotShared> {
        let (page, len) = (page_size(), end - base);
        if !maps::private_anon(base, end) {
            return Err(NotShared::NotPrivateAnonymous);
        }
        let f = fork::shared();
        let mut live = lock_live();
        live.retain(|w| w.strong_count() > 0);
        let overlaps =
            live.iter().filter_map(Weak::upgrade).any(|s| s.base < end && base < s.base + s.len);
        if overlaps {
            return Err(NotShared::Overlaps); // already on a memfd: private_anon saw to that too
        }
        let (fd, inode) = memfd(len + page).map_err(NotShared::System)?;
        let ctl = map(page, fd.as_raw_fd(), len).map_err(NotShared::System)?;
        let tmp = match map(len, fd.as_raw_fd(), 0) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: ctl was mapped above with this length.
                unsafe { libc::munmap(ctl, page) };
                return Err(NotShared::System(e));
            }
        };
        // SAFETY: [base, end) is mapped private anonymous read-write memory (checked above) and
        // tmp is a fresh mapping of len bytes; they do not overlap.
        unsafe { copy_nonzero(base as *const u8, tmp.cast::<u8>(), len) };
        // SAFETY: moves our fresh mapping onto the region's pages, replacing them atomically
        // (MREMAP_FIXED unmaps what was there); the contents were copied just before.
        if let Err(e) = unsafe { move_onto(tmp, len, base) } {
            // SAFETY: both mappings were made above with these lengths and are still ours (a
            // failed move leaves tmp where it was); the region is untouched.
            unsafe {
                libc::munmap(tmp, len);
                libc::munmap(ctl, page);
            }
            return Err(NotShared::System(e));
        }
        let ctl = ctl.cast::<AtomicU64>();
        // SAFETY: the control page is mapped, aligned, and only ever accessed atomically.
        unsafe { &*ctl }.store(VALID, Ordering::Release);
        let s = Arc::new(SharedMem {
            base,
            len,
            remote_base,
            access,
            fd,
            inode,
            ctl,
            revoked: AtomicBool::new(false),
            generation: fork::generation(),
        });
        live.push(Arc::downgrade(&s));
        drop(live);
        drop(f);
        fork::at_child(privatize_all);
        Ok(s)
    }

    /// The memfd, to pass to a peer.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }
}

impl SharedRegion for SharedMem {
    /// Peers lose the region: the control word first (a peer that checks it afterwards takes
    /// the copy path, where our key table refuses it), then our pages go back to private
    /// memory (a peer that checked it just before writes into the orphaned file).
    fn revoke(&self) {
        if self.generation != fork::generation() || self.revoked.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: the control page stays mapped until drop.
        unsafe { &*self.ctl }.store(0, Ordering::Release);
        let f = fork::shared();
        lock_live().retain(|w| w.upgrade().is_some_and(|s| !std::ptr::eq(&*s, self)));
        drop(f);
        privatize(self.base, self.len, self.inode);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn file(&self) -> (RawFd, usize, usize) {
        (self.fd.as_raw_fd(), self.base, self.len)
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        self.revoke();
        // SAFETY: the control page was mapped in create with one page's length.
        unsafe { libc::munmap(self.ctl.cast(), page_size()) };
    }
}

/// Copies `len` bytes (a multiple of the page size) to a fresh mapping, skipping pages that
/// are all zero: a memfd's holes and fresh anonymous memory read as zero already, and a large
/// region the program never touched then costs no memory.
///
/// # Safety
/// `src` and `dst` are valid, page-aligned and do not overlap for `len` bytes; `dst` reads as
/// zero.
unsafe fn copy_nonzero(src: *const u8, dst: *mut u8, len: usize) {
    let page = page_size();
    for off in (0..len).step_by(page) {
        // SAFETY: off + page <= len; page-aligned, so u64-aligned, inside src.
        let words = unsafe { std::slice::from_raw_parts(src.add(off).cast::<u64>(), page / 8) };
        if words.iter().any(|&w| w != 0) {
            // SAFETY: per the function's contract.
            unsafe { std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), page) };
        }
    }
}

/// A new sealed memfd of `len` bytes and its inode.
fn memfd(len: usize) -> Result<(OwnedFd, u64), i32> {
    let err = || crate::errno::Errno::last().0;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: the name is a valid NUL-terminated string.
    let fd = unsafe { libc::memfd_create(c"rdmashim-mr".as_ptr(), flags) };
    if fd < 0 {
        return Err(err());
    }
    // SAFETY: fd was just returned by memfd_create and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fd is a valid memfd; ftruncate and F_ADD_SEALS only change the file.
    let ok = unsafe {
        libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) == 0
    };
    if !ok {
        return Err(err());
    }
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is valid and st is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(err());
    }
    Ok((fd, st.st_ino))
}

/// A new shared read-write mapping of `len` bytes of `fd` from `off`, where the kernel picks.
fn map(len: usize, fd: RawFd, off: usize) -> Result<*mut libc::c_void, i32> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let null = std::ptr::null_mut();
    // SAFETY: without MAP_FIXED a new mapping never replaces an existing one.
    let p = unsafe { libc::mmap(null, len, prot, libc::MAP_SHARED, fd, off as libc::off_t) };
    if p == libc::MAP_FAILED {
        Err(crate::errno::Errno::last().0)
    } else {
        Ok(p)
    }
}

/// Puts private memory with the same contents (and protection) back under `[base, base +
/// len)`, if it is still our memfd's mapping there (the application may have unmapped it, and
/// something else may live there now: that is left alone).
fn privatize(base: usize, len: usize, inode: u64) {
    let Some(prot) = maps::shared_file_prot(base, base + len, inode) else { return };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
    let tmp = unsafe { libc::mmap(std::ptr::null_mut(), len, rw, flags, -1, 0) };
    if tmp == libc::MAP_FAILED {
        return; // no memory: the pages stay on the memfd, which no peer can reach validly
    }
    // SAFETY: [base, base + len) is mapped readable or copied from after making it so below;
    // tmp is a fresh mapping of len bytes. A region mapped without PROT_READ is made readable
    // for the copy only.
    unsafe {
        if prot & libc::PROT_READ == 0 {
            libc::mprotect(base as *mut libc::c_void, len, libc::PROT_READ);
        }
        copy_nonzero(base as *const u8, tmp.cast::<u8>(), len);
        libc::mprotect(tmp, len, prot);
        if move_onto(tmp, len, base).is_err() {
            libc::munmap(tmp, len); // not moved: still ours
        }
    }
}

/// Moves the mapping `[from, from + len)` onto `[to, to + len)`, replacing what is there
/// (`mremap` with `MREMAP_FIXED`), by the system call itself rather than libc's `mremap`: a
/// memory hook that interposes `mremap` may not pass the new address on. UCX's does not (its
/// libucm, loaded by every UCX program, has a four-parameter `mremap` up to 1.13 at least), so
/// the kernel took whatever the register held as the address (NULL: in Open MPI's ranks, run
/// as root, every region went to page 0) and `from`, which we then unmapped as if the move had
/// failed, could by then hold another thread's mapping (a link's ring, found unmapped under a
/// live QP). The system call also keeps these moves, after which the memory reads as before,
/// from reaching such hooks as an unmap of the application's memory. On success the kernel
/// returns `to` exactly; on failure nothing moved.
///
/// # Safety
/// `[from, from + len)` is a mapping of ours, given up on success; whatever lies in `[to, to +
/// len)` may be replaced.
unsafe fn move_onto(from: *mut libc::c_void, len: usize, to: usize) -> Result<(), i32> {
    // Every argument a full register: syscall(2) passes them on as such.
    let flags = (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as libc::c_ulong;
    let (len, to_arg) = (len as libc::c_ulong, to as libc::c_ulong);
    // SAFETY: per the function's contract; the raw system call takes exactly these five
    // arguments and dereferences none of them.
    let r = unsafe { libc::syscall(libc::SYS_mremap, from, len, len, flags, to_arg) };
    if r as usize == to {
        Ok(())
    } else {
        Err(crate::errno::Errno::last().0)
    }
}

/// In a forked child: every region the parent shares goes back to private memory, as
/// `fork()` gives a child private copies of anonymous memory (the child's writes must not
/// reach the parent, nor the parent's peers' writes the child).
fn privatize_all() {
    let live = std::mem::take(&mut *lock_live());
    for s in live.iter().filter_map(Weak::upgrade) {
        privatize(s.base, s.len, s.inode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE};
    use crate::runtime::shm::Shm;

    /// `pages` pages of private anonymous memory filled with a pattern.
    fn anon(pages: usize) -> *mut u8 {
        let len = pages * page_size();
        let (prot, flags) =
            (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
        // SAFETY: a fresh anonymous mapping where the kernel picks (leaked by the test).
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) }.cast::<u8>();
        assert_ne!(p.cast(), libc::MAP_FAILED);
        for i in 0..len {
            // SAFETY: i < len, inside the mapping.
            unsafe { p.add(i).write(i as u8) };
        }
        p
    }

    /// The peer's view: its own mapping of the memfd, data pages and control page.
    fn peer_map(s: &SharedMem) -> Shm {
        // SAFETY: dup of a live descriptor; the result is owned by the OwnedFd.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(s.fd())) };
        Shm::map_as(fd, s.len + page_size(), true).unwrap()
    }

    #[test]
    fn only_whole_pages_are_shared() {
        let page = page_size();
        let p = anon(3) as usize;
        let s = SharedMem::create(
            p + 1,
            2 * page,
            (p + 1) as u64,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        )
        .unwrap();
        assert_eq!((s.base, s.len), (p + page, page));
        assert!(matches!(
            SharedMem::create(p + 1, page, (p + 1) as u64, 0),
            Err(NotShared::NoWholePage)
        ));
        // The pages are on the memfd now: not again (the map says so, and so does LIVE).
        assert!(SharedMem::create(p, 3 * page, p as u64, 0).is_err());
    }

    #[test]
    fn peers_address_the_pages_in_iova_space() {
        let page = page_size();
        let p = anon(3) as usize;
        let rw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
        assert!(matches!(SharedMem::create(p, page, 8, rw), Err(NotShared::UnalignedIova)));
        let top = u64::MAX - page as u64 + 1;
        assert!(matches!(SharedMem::create(p, page, top, rw), Err(NotShared::UnalignedIova)));
        // Region p+1 from iova 1: its whole page p+page is at iova page.
        let s = SharedMem::create(p + 1, 2 * page, 1, rw).unwrap();
        assert_eq!((s.base, s.remote_base), (p + page, page as u64));
        s.revoke();
    }

    #[test]
    fn a_peer_reaches_the_memory_until_it_is_revoked() {
        let page = page_size();
        let p = anon(2);
        let len = 2 * page;
        let s =
            SharedMem::create(p as usize, len, p as u64, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
                .unwrap();
        // SAFETY: p has len bytes, still mapped (now onto the memfd).
        let mine = unsafe { std::slice::from_raw_parts(p, len) };
        assert!(mine.iter().enumerate().all(|(i, &b)| b == i as u8), "contents moved intact");
        let peer = peer_map(&s);
        // SAFETY: the peer mapping has len + page bytes; the control word is 8-aligned.
        let ctl = unsafe { &*peer.ptr().add(len).cast::<AtomicU64>() };
        assert_eq!(ctl.load(Ordering::Acquire), VALID);
        // SAFETY: offsets inside the peer's mapping.
        unsafe { peer.ptr().write_volatile(0xaa) };
        assert_eq!(mine[0], 0xaa, "a peer's write lands in our memory");

        s.revoke();
        assert_eq!(ctl.load(Ordering::Acquire), 0, "the peer sees the revocation");
        // SAFETY: offset 1 is inside the peer's mapping (len bytes, len > 1).
        unsafe { peer.ptr().add(1).write_volatile(0xbb) };
        assert_eq!(mine[1], 1, "after revoke a peer's write does not reach our memory");
        assert_eq!(mine[0], 0xaa, "what landed before stays");
        assert!(maps::private_anon(p as usize, p as usize + len), "private memory again");
    }

    #[test]
    fn revoking_leaves_a_range_alone_that_is_no_longer_ours() {
        let page = page_size();
        let p = anon(1);
        let s =
            SharedMem::create(p as usize, page, p as u64, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
                .unwrap();
        let (prot, flags) =
            (libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED);
        // SAFETY: replaces the test's own page (the application unmapping and remapping it).
        let q = unsafe { libc::mmap(p.cast(), page, prot, flags, -1, 0) };
        assert_eq!(q, p.cast());
        s.revoke();
        // Still the application's read-only zero page, not a copy of the memfd.
        // SAFETY: the page is mapped readable.
        assert_eq!(unsafe { p.read_volatile() }, 0);
        assert!(!maps::private_anon(p as usize, p as usize + page), "still read-only");
    }
}
