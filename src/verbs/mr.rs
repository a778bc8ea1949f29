//! Memory regions and the key table through which the provider touches memory.
//!
//! Keys are random 32-bit values (lkey == rkey), so a peer cannot guess one. Every access by the
//! provider goes through [`lookup`] with the key, PD, range and access it needs; a failure is an
//! error completion, never a fault.
//!
//! A region is addressed through its keys from its iova (`ibv_reg_mr_iova`; 0 for
//! `IBV_ACCESS_ZERO_BASED`; its address for `ibv_reg_mr`): byte `iova + off` is byte
//! `addr + off`. Remote (rkey) addresses are translated at the target by [`lookup`]; local
//! (lkey) addresses when the SGEs are posted ([`translate_sge`]), so the provider sees this
//! process's addresses in every SGE. `ibv_rereg_mr` replaces a region's registration ([`Reg`])
//! as a whole, keeping its keys.
//!
//! A null MR (`ibv_alloc_null_mr`) has an lkey only: when posted, its SGEs are redirected to
//! process-wide zero pages (what is read from it) or to a sink nobody reads (what is written to
//! it), each under a hidden key of the MR's PD with local rights only.

use super::dm::DmMem;
use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{Checked, KeySpace, MemoryKeys, Region, Sge, SharedRegion};
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, read_lock, write_lock};
use crate::sys::*;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// One registration of an MR: what its keys reach.
pub struct Reg {
    pub pd: Arc<Pd>,
    /// The region in this process: `[addr, addr + len)`.
    pub addr: usize,
    pub len: usize,
    /// Where the keys address the region: byte `iova + off` is byte `addr + off`.
    pub iova: u64,
    pub access: u32,
    /// The provider's hold for peers' direct access, revoked when the registration ends.
    pub share: Option<Arc<dyn SharedRegion>>,
    /// A null MR's hidden keys (its own range is empty, so its key reaches nothing itself).
    null: Option<NullKeys>,
    /// The device memory a DM MR (`ibv_reg_dm_mr`) lies in, kept mapped while the region is
    /// reachable.
    dm: Option<Arc<DmMem>>,
    /// A memory window's entry (`mw.rs`): an rkey only, never an lkey; unbound it has an empty
    /// range and no rights.
    pub(super) window: Option<std::sync::Weak<super::mw::Mw>>,
    /// The provider's accesses through these keys that outlive their check (a peer's, or a
    /// message's later segments into our own buffers) happen inside it; closed, waiting for
    /// them, when the registration ends ([`Reg::retire`]).
    gate: Region,
    /// The region's pages as another process maps them after `ibv_import_mr` there
    /// (`remote.rs`); `Retired` once the registration ended, so none is made after.
    exported: Mutex<Export>,
    /// Set for an MR of another process imported here (`remote.rs`).
    import: Option<remote::ImportedMem>,
}

mod remote;
mod rereg;
pub use remote::{Described, ImportedMem};

#[derive(Default)]
enum Export {
    #[default]
    None,
    To(Arc<dyn SharedRegion>),
    Retired,
}

/// The keys a null MR's SGEs are redirected to.
#[derive(Clone, Copy)]
struct NullKeys {
    zero: u32,
    sink: u32,
}

/// Where null MRs' SGEs point: `zero`, read-only zero pages, and `sink`, writable memory that
/// every write into a null MR lands in and nobody reads (each SGE is redirected to the start,
/// so it holds at most one SGE's worth of pages). Both `NULL_LEN` bytes, reserved once and never
/// unmapped.
struct NullSpace {
    zero: usize,
    sink: usize,
}

/// An SGE is at most `u32::MAX` bytes.
const NULL_LEN: usize = 1 << 32;

fn null_space() -> Option<&'static NullSpace> {
    static SPACE: std::sync::OnceLock<Option<NullSpace>> = std::sync::OnceLock::new();
    SPACE
        .get_or_init(|| {
            let map = |prot| {
                let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
                // SAFETY: a fresh anonymous mapping where the kernel picks; nothing is replaced.
                let p = unsafe { libc::mmap(std::ptr::null_mut(), NULL_LEN, prot, flags, -1, 0) };
                (p != libc::MAP_FAILED).then_some(p as usize)
            };
            let zero = map(libc::PROT_READ)?;
            let sink = map(libc::PROT_READ | libc::PROT_WRITE)?;
            Some(NullSpace { zero, sink })
        })
        .as_ref()
}

pub struct Mr {
    pub raw: CBox<ibv_mr>,
    pub key: u32,
    /// The current registration (replaced by `ibv_rereg_mr`).
    reg: RwLock<Arc<Reg>>,
    /// Memory windows bound to the MR (changed under the key table's write lock): while any
    /// is, `ibv_dereg_mr` and `ibv_rereg_mr` fail with `EBUSY`.
    pub(super) windows: AtomicUsize,
}

/// Looked up for every SGE and rkey: Fx hashing (the keys are ours and random), not SipHash.
/// Per process generation: a forked child's lookups never wait on a lock a parent thread held.
pub(super) static KEYS: PerProcess<RwLock<FxHashMap<u32, Arc<Reg>>>> =
    PerProcess::new(|| RwLock::new(FxHashMap::default()));

/// How many registrations have an iova other than their address: while none, posted SGEs need
/// no translation (one relaxed load on the data path).
static TRANSLATED: AtomicUsize = AtomicUsize::new(0);

use super::pages::{self, ACCESS_ON_DEMAND};
pub use crate::provider::{
    AccessError, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
/// IBV_ACCESS_ZERO_BASED: the keys address the region from 0.
const ACCESS_ZERO_BASED: u32 = ibv_access_flags::IBV_ACCESS_ZERO_BASED.0;
/// Every access flag libibverbs 44 defines (up to IBV_ACCESS_RELAXED_ORDERING).
const ACCESS_KNOWN: u32 = (1 << 21) - 1;
/// IBV_ACCESS_OPTIONAL_RANGE: optional flags a provider may ignore, as the kernel does.
const ACCESS_OPTIONAL: u32 = 0x3ff0_0000;

fn random_key() -> u32 {
    let mut r: u32 = 0;
    // SAFETY: getrandom into a valid 4-byte buffer.
    unsafe { libc::getrandom((&mut r as *mut u32).cast(), 4, 0) };
    r
}

/// The access flags a registration keeps, or `EINVAL` for flags the spec refuses.
fn checked_access(access: i32) -> Result<u32> {
    let access = access as u32 & !ACCESS_OPTIONAL;
    if access & !ACCESS_KNOWN != 0 {
        return Err(Errno::EINVAL);
    }
    // Remote write or atomic access needs local write, as the spec and the kernel require.
    if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
        && access & ACCESS_LOCAL_WRITE == 0
    {
        return Err(Errno::EINVAL);
    }
    Ok(access)
}

impl Reg {
    /// A registration of `[addr, addr+len)` addressed from `iova` (0 with ZERO_BASED), with the
    /// provider's share prepared.
    fn new(
        pd: Arc<Pd>,
        addr: *mut libc::c_void,
        len: usize,
        iova: u64,
        access: i32,
    ) -> Result<Reg> {
        let access = checked_access(access)?;
        let iova = if access & ACCESS_ZERO_BASED != 0 { 0 } else { iova };
        let implicit = pages::is_implicit(addr as usize, len, access);
        if addr.is_null() && len != 0 && !implicit {
            return Err(Errno::EINVAL);
        }
        if (addr as usize).checked_add(len).is_none() || iova.checked_add(len as u64).is_none() {
            return Err(Errno::EINVAL);
        }
        if len > 0 && !implicit {
            // As pinning fails in the kernel. An ODP region pins nothing: its pages are checked
            // at each access instead.
            let (at, write) = (addr as usize, pages::writes(access));
            let reachable = if access & ACCESS_ON_DEMAND != 0 {
                pages::accessible(at, len, write)
            } else {
                pages::pinnable(at, len, write)
            };
            if !reachable {
                return Err(Errno::EFAULT);
            }
        }
        let remote = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        let share = if access & remote != 0 && access & ACCESS_ON_DEMAND == 0 && len > 0 {
            pd.ctx.provider.share_memory(addr as usize, len, iova, access)
        } else {
            None
        };
        Ok(Reg { share, ..Reg::plain(pd, (addr as usize, len, iova, access)) })
    }

    /// `[addr, addr+len)` of this process reached from `iova` with `access`, nothing else
    /// (no share, not a null MR, a DM's, a window's or an import).
    fn plain(pd: Arc<Pd>, (addr, len, iova, access): (usize, usize, u64, u32)) -> Reg {
        Reg {
            pd,
            addr,
            len,
            iova,
            access,
            share: None,
            null: None,
            dm: None,
            window: None,
            gate: Region::default(),
            exported: Mutex::default(),
            import: None,
        }
    }

    /// Whether the registration lies in the device memory `dm`.
    pub fn holds(&self, dm: &Arc<DmMem>) -> bool {
        self.dm.as_ref().is_some_and(|d| Arc::ptr_eq(d, dm))
    }

    /// A window's entry: `[addr, addr+len)` of this process reached from `iova` with `access`
    /// (an unbound window: nothing, no rights).
    pub(super) fn window(
        pd: Arc<Pd>,
        (addr, len, iova, access): (usize, usize, u64, u32),
        mw: std::sync::Weak<super::mw::Mw>,
    ) -> Reg {
        Reg { window: Some(mw), ..Reg::plain(pd, (addr, len, iova, access)) }
    }

    /// The local address of `[at, at+len)` of this registration's iova space, if inside.
    pub(super) fn local_of(&self, at: u64, len: usize) -> Option<u64> {
        self.local(at, len, KeySpace::Remote)
    }

    /// A registration posted SGEs are rewritten for: another iova, or a null MR.
    fn translated(&self) -> bool {
        self.iova != self.addr as u64 || self.null.is_some()
    }

    /// The local address of `[at, at+len)` in `space`, if it lies in the region.
    fn local(&self, at: u64, len: usize, space: KeySpace) -> Option<u64> {
        let base = match space {
            KeySpace::Local => self.addr as u64,
            KeySpace::Remote => self.iova,
        };
        translate(base, self.addr, self.len, at, len)
    }

    /// Ends the provider's direct path for peers, and another process's mapping of the pages,
    /// before the caller returns.
    pub(super) fn revoke(&self) {
        if let Some(s) = &self.share {
            s.revoke();
        }
        let was = std::mem::replace(&mut *self.export_lock(), Export::Retired);
        if let Export::To(s) = was {
            s.revoke();
        }
    }

    fn export_lock(&self) -> std::sync::MutexGuard<'_, Export> {
        lock(&self.exported)
    }

    /// Ends the registration for peers, once its keys are out of the table: an access that was
    /// checked before and is under way finishes first, and none lands after this returns, on
    /// the copy path (the gate) or the direct one (the share).
    pub(super) fn retire(&self) {
        self.gate.close();
        self.revoke();
    }
}

/// The address of `[at, at+len)` of a region of `region_len` bytes at `addr` that its key
/// addresses from `base`, if the range lies inside (every input may come from a peer: no
/// arithmetic may overflow).
fn translate(base: u64, addr: usize, region_len: usize, at: u64, len: usize) -> Option<u64> {
    let off = at.checked_sub(base)?;
    let end = off.checked_add(u64::try_from(len).ok()?)?;
    if end > u64::try_from(region_len).ok()? {
        return None;
    }
    u64::try_from(addr).ok()?.checked_add(off)
}

/// A key not in use (the caller holds the table's write lock), whose index (the upper 24 bits)
/// no key uses either: a memory window owns every key of its index (`ibv_inc_rkey` changes
/// only the low 8 bits), so no two objects ever share one.
pub(super) fn fresh_key(keys: &FxHashMap<u32, Arc<Reg>>) -> u32 {
    loop {
        let k = random_key();
        if k >> 8 != 0 && (0..=0xff).all(|tag| !keys.contains_key(&(k & !0xff | tag))) {
            break k;
        }
    }
}

fn count(reg: &Reg, up: bool) {
    if reg.translated() {
        if up {
            TRANSLATED.fetch_add(1, Ordering::Relaxed);
        } else {
            TRANSLATED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Mr {
    pub fn register(
        pd: Arc<Pd>,
        addr: *mut libc::c_void,
        len: usize,
        iova: u64,
        access: i32,
    ) -> Result<*mut ibv_mr> {
        let reg = Arc::new(Reg::new(pd, addr, len, iova, access)?);
        let mut keys = write_lock(KEYS.get());
        let key = fresh_key(&keys);
        Ok(Self::publish(&mut keys, key, reg, addr, len, key))
    }

    /// `ibv_reg_dm_mr`: registers `[addr, addr+len)` of the device memory `dm` as a zero-based
    /// region (`access` has `IBV_ACCESS_ZERO_BASED`); the C struct's `addr` is NULL, as
    /// libibverbs sets it (the DM's mapping is not the application's).
    pub fn register_dm(
        pd: Arc<Pd>,
        addr: *mut libc::c_void,
        len: usize,
        access: i32,
        dm: Arc<DmMem>,
    ) -> Result<*mut ibv_mr> {
        let reg = Reg { dm: Some(dm), ..Reg::new(pd, addr, len, 0, access)? };
        let mut keys = write_lock(KEYS.get());
        let key = fresh_key(&keys);
        Ok(Self::publish(&mut keys, key, Arc::new(reg), std::ptr::null_mut(), len, key))
    }

    /// Makes `reg` the MR `key` (the C struct says `addr`, `length` and `rkey`): in the key
    /// table and among the context's objects.
    fn publish(
        keys: &mut FxHashMap<u32, Arc<Reg>>,
        key: u32,
        reg: Arc<Reg>,
        addr: *mut libc::c_void,
        length: usize,
        rkey: u32,
    ) -> *mut ibv_mr {
        let mut raw: CBox<ibv_mr> = CBox::zeroed();
        let r = raw.init();
        r.context = reg.pd.ctx.ptr();
        r.pd = reg.pd.raw.as_ptr();
        r.addr = addr;
        r.length = length;
        r.handle = key;
        r.lkey = key;
        r.rkey = rkey;
        let p = raw.as_ptr();
        count(&reg, true);
        keys.insert(key, reg.clone());
        let mr = Arc::new(Mr { raw, key, reg: RwLock::new(reg), windows: AtomicUsize::new(0) });
        objects().mrs.insert(p as usize, mr);
        p
    }

    pub fn deregister(p: *mut ibv_mr) -> Result<()> {
        let mr = objects().mrs.get(p)?;
        if let Some(im) = &mr.reg().import {
            return remote::deregister(p, &mr, im);
        }
        Self::end(p, &mr, false)
    }

    /// Ends the registration of `mr` (C struct `p`), and takes the struct out of the registry
    /// unless `keep` (another process's handle ended it: this one is the application's still,
    /// good for `ibv_dereg_mr` only).
    fn end(p: *mut ibv_mr, mr: &Mr, keep: bool) -> Result<()> {
        // Under the registration's lock: a racing ibv_rereg_mr cannot put the key back.
        let reg = write_lock(&mr.reg);
        {
            let mut keys = write_lock(KEYS.get());
            // Binds count their windows under this lock: none can start meanwhile.
            if mr.windows.load(Ordering::Acquire) > 0 {
                return Err(Errno::EBUSY); // a window is bound to it (as the kernel says)
            }
            let listed = match keep {
                true => objects().mrs.contains(p),
                false => objects().mrs.remove(p).is_some(),
            };
            if !listed {
                return Err(Errno::EINVAL); // deregistered meanwhile
            }
            if keys.remove(&mr.key).is_none() {
                // An imported MR's registration, deregistered through another handle.
                return if keep { Err(Errno::EINVAL) } else { Ok(()) };
            }
            if let Some(n) = reg.null {
                keys.remove(&n.zero);
                keys.remove(&n.sink);
            }
        }
        count(&reg, false);
        // Before returning: from now on no peer reaches the memory (ibv_dereg_mr's contract).
        reg.retire();
        // Other processes that imported it drop it too; asked without our lock, which
        // their requests to us may need meanwhile.
        let ended = reg.clone();
        drop(reg);
        super::import_remote::mr_gone(&ended, mr.key);
        Ok(())
    }

    /// `ibv_alloc_null_mr`: an MR of `pd` whose lkey discards what is written and reads as
    /// zeroes (addr NULL, the maximum length, no rkey).
    pub fn alloc_null(pd: Arc<Pd>) -> Result<*mut ibv_mr> {
        let space = null_space().ok_or(Errno::ENOMEM)?;
        let hidden =
            |addr: usize, access| Reg::plain(pd.clone(), (addr, NULL_LEN, addr as u64, access));
        let (zero, sink) = (hidden(space.zero, 0), hidden(space.sink, ACCESS_LOCAL_WRITE));
        let mut keys = write_lock(KEYS.get());
        let nk = NullKeys { zero: fresh_key(&keys), sink: 0 };
        keys.insert(nk.zero, Arc::new(zero));
        let nk = NullKeys { sink: fresh_key(&keys), ..nk };
        keys.insert(nk.sink, Arc::new(sink));
        let key = fresh_key(&keys);
        let reg = Arc::new(Reg { len: 0, access: 0, null: Some(nk), ..hidden(0, 0) });
        Ok(Self::publish(&mut keys, key, reg, std::ptr::null_mut(), usize::MAX, 0))
    }

    /// The current registration.
    /// `ibv_import_mr`: another MR struct for this registration, on `pd` (a PD of its domain,
    /// imported): the same keys, handle and length, `addr` NULL (not applicable, the page says).
    /// Letting it go (`ibv_unimport_mr`) leaves the registration alone.
    pub fn import_on(&self, pd: &Pd) -> *mut ibv_mr {
        let mut raw: CBox<ibv_mr> = CBox::zeroed();
        let r = raw.init();
        *r = self.raw.read();
        r.context = pd.ctx.ptr();
        r.pd = pd.raw.as_ptr();
        r.addr = std::ptr::null_mut();
        let p = raw.as_ptr();
        let reg = RwLock::new(self.reg());
        let mr = Arc::new(Mr { raw, key: self.key, reg, windows: AtomicUsize::new(0) });
        objects().mrs.insert(p as usize, mr);
        p
    }

    pub fn reg(&self) -> Arc<Reg> {
        read_lock(&self.reg).clone()
    }

    pub fn pd(&self) -> Arc<Pd> {
        self.reg().pd.clone()
    }
}

/// Checks that `[addr, addr+len)` (in `space`) lies in the region `key` of `pd` with rights
/// `need`, and returns the region (kept alive while the caller copies) with the local address.
pub fn lookup(
    key: u32,
    pd: &Pd,
    addr: u64,
    len: usize,
    need: u32,
    space: KeySpace,
) -> std::result::Result<(Arc<Reg>, u64), AccessError> {
    let reg = read_lock(KEYS.get()).get(&key).cloned().ok_or(AccessError::Protection)?;
    let local = check(&reg, pd, addr, len, need, space)?;
    Ok((reg, local))
}

/// [`lookup`]'s rules for region `reg`: the local address of `[addr, addr+len)`.
fn check(
    reg: &Reg,
    pd: &Pd,
    addr: u64,
    len: usize,
    need: u32,
    space: KeySpace,
) -> std::result::Result<u64, AccessError> {
    if !std::ptr::eq(Arc::as_ptr(&reg.pd), pd) {
        return Err(AccessError::Protection);
    }
    // A window's key is an rkey only.
    if reg.window.is_some() && space == KeySpace::Local {
        return Err(AccessError::Protection);
    }
    let local = reg.local(addr, len, space).ok_or(AccessError::Protection)?;
    if reg.access & need != need {
        return Err(AccessError::Access);
    }
    // On-demand paging pins nothing: each access faults its pages in, as a device would.
    if reg.access & pages::ACCESS_ON_DEMAND != 0
        && len > 0
        && !pages::fault_in(local as usize, len, pages::writes(need))
    {
        return Err(AccessError::Protection);
    }
    Ok(local)
}

/// A posted SGE with its address in this process's space: an lkey of a region registered with
/// another iova takes addresses from that iova. An address outside such a region gets key 0
/// (never issued), so the provider's check refuses it as it would have refused the range. A
/// null MR's SGE goes to the zero pages, or to the sink if the operation `writes` it.
pub fn translate_sge(s: Sge, writes: bool) -> Sge {
    if TRANSLATED.load(Ordering::Relaxed) == 0 || s.length == 0 {
        return s;
    }
    let reg = read_lock(KEYS.get()).get(&s.lkey).cloned();
    let Some(r) = reg.filter(|r| r.translated()) else { return s };
    if let (Some(n), Some(space)) = (r.null, null_space()) {
        return match writes {
            true => Sge { addr: space.sink as u64, lkey: n.sink, ..s },
            false => Sge { addr: space.zero as u64, lkey: n.zero, ..s },
        };
    }
    match r.local(s.addr, s.length as usize, KeySpace::Remote) {
        Some(addr) => Sge { addr, ..s },
        None => Sge { lkey: 0, ..s },
    }
}

/// The provider checks local and remote keys against the table through the QP's PD.
impl MemoryKeys for Pd {
    fn lookup(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
        space: KeySpace,
    ) -> std::result::Result<Checked, AccessError> {
        lookup(key, self, addr, len, need, space)
            .map(|(reg, addr)| Checked { region: reg.gate.clone(), addr })
    }

    /// Under the table's read lock, with no hold taken on the region (two atomic operations
    /// fewer per check) and no gate entered: a registration leaves the table under its write
    /// lock before its gate closes, so while `f` runs the region stays registered (and `f` is
    /// short: one segment or chunk).
    fn access(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
        space: KeySpace,
        f: &mut dyn FnMut(u64),
    ) -> std::result::Result<(), AccessError> {
        let keys = read_lock(KEYS.get());
        let reg = keys.get(&key).ok_or(AccessError::Protection)?;
        f(check(reg, self, addr, len, need, space)?);
        Ok(())
    }

    fn shared(&self, key: u32) -> Option<Arc<dyn SharedRegion>> {
        let keys = read_lock(KEYS.get());
        let reg = keys.get(&key).filter(|r| std::ptr::eq(Arc::as_ptr(&r.pd), self))?;
        reg.share.clone()
    }

    fn invalidate(&self, rkey: u32) -> std::result::Result<(), AccessError> {
        super::mw::invalidate(self, rkey)
    }
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn identity_when_iova_is_the_address() {
        assert_eq!(translate(0x1000, 0x1000, 64, 0x1000, 64), Some(0x1000));
        assert_eq!(translate(0x1000, 0x1000, 64, 0x1010, 8), Some(0x1010));
    }

    #[test]
    fn iova_and_zero_based() {
        // ibv_reg_mr_iova: iova 4 GiB, region at 0x5000.
        assert_eq!(translate(1 << 32, 0x5000, 64, (1 << 32) + 16, 4), Some(0x5010));
        // The virtual address is not an iova-space address.
        assert_eq!(translate(1 << 32, 0x5000, 64, 0x5010, 4), None);
        // ZERO_BASED: offsets.
        assert_eq!(translate(0, 0x5000, 64, 8, 4), Some(0x5008));
        assert_eq!(translate(0, 0x5000, 64, 0, 64), Some(0x5000));
        assert_eq!(translate(0, 0x5000, 64, 0, 0), Some(0x5000));
    }

    #[test]
    fn iova_bounds() {
        assert_eq!(translate(0x100, 0x5000, 64, 0xff, 1), None, "below the iova");
        assert_eq!(translate(0x100, 0x5000, 64, 0x100 + 60, 5), None, "past the end");
        assert_eq!(translate(0x100, 0x5000, 64, 0x100 + 64, 0), Some(0x5040), "empty at the end");
        assert_eq!(translate(0x100, 0x5000, 64, 0x100 + 65, 0), None, "empty past the end");
    }

    #[test]
    fn no_overflow() {
        let max = u64::MAX;
        assert_eq!(translate(max - 8, 0x5000, 64, max, 64), None);
        assert_eq!(translate(0, 0x5000, 64, max, usize::MAX), None);
        assert_eq!(translate(0, 0x5000, 64, 8, usize::MAX), None);
        assert_eq!(translate(0, usize::MAX - 4, 64, 8, 4), None, "local address overflows");
        assert_eq!(translate(max - 63, 0x5000, 64, max - 63, 64), Some(0x5000));
        assert_eq!(translate(max - 63, 0x5000, 64, max, 1), Some(0x503f));
    }
}
