//! Memory regions and the key table through which the provider touches memory.
//!
//! Keys are random 32-bit values (lkey == rkey), so a peer cannot guess one. Every access by the
//! provider goes through [`lookup`] with the key, PD, range and access it needs; a failure is an
//! error completion, never a fault.

use super::objects;
use super::pd::Pd;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{MemoryKeys, Region, SharedRegion};
use crate::sys::*;
use once_cell::sync::Lazy;
use rustc_hash::FxHashMap;
use std::sync::{Arc, RwLock};

pub struct Mr {
    pub raw: CBox<ibv_mr>,
    pub pd: Arc<Pd>,
    pub addr: usize,
    pub len: usize,
    pub access: u32,
    pub key: u32,
    /// The provider's hold for peers' direct access, revoked at deregistration.
    pub share: Option<Arc<dyn SharedRegion>>,
}

/// Looked up for every SGE and rkey: Fx hashing (the keys are ours and random), not SipHash.
static KEYS: Lazy<RwLock<FxHashMap<u32, Arc<Mr>>>> =
    Lazy::new(|| RwLock::new(FxHashMap::default()));

pub use crate::provider::{
    AccessError, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
/// IBV_ACCESS_ON_DEMAND: pages are not pinned, so nothing is prepared for peers.
const ACCESS_ON_DEMAND: u32 = ibv_access_flags::IBV_ACCESS_ON_DEMAND.0;
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

impl Mr {
    pub fn register(
        pd: Arc<Pd>,
        addr: *mut libc::c_void,
        len: usize,
        access: i32,
    ) -> Result<*mut ibv_mr> {
        let access = access as u32;
        let access = access & !ACCESS_OPTIONAL;
        if access & !ACCESS_KNOWN != 0 {
            return Err(Errno::EINVAL);
        }
        // Remote write or atomic access needs local write, as the spec and the kernel require.
        if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
            && access & ACCESS_LOCAL_WRITE == 0
        {
            return Err(Errno::EINVAL);
        }
        if addr.is_null() && len != 0 {
            return Err(Errno::EINVAL);
        }
        if (addr as usize).checked_add(len).is_none() {
            return Err(Errno::EINVAL);
        }
        if len > 0 && !is_mapped(addr as usize, len) {
            return Err(Errno::EFAULT); // as pinning fails in the kernel
        }
        let remote = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        let share = if access & remote != 0 && access & ACCESS_ON_DEMAND == 0 && len > 0 {
            pd.ctx.provider.share_memory(addr as usize, len, access)
        } else {
            None
        };
        let mut raw: CBox<ibv_mr> = CBox::zeroed();
        let mut keys = KEYS.write().unwrap_or_else(|e| e.into_inner());
        let key = loop {
            let k = random_key();
            if k != 0 && !keys.contains_key(&k) {
                break k;
            }
        };
        let r = raw.init();
        r.context = pd.ctx.ptr();
        r.pd = pd.raw.as_ptr();
        r.addr = addr;
        r.length = len;
        r.handle = key;
        r.lkey = key;
        r.rkey = key;
        let p = raw.as_ptr();
        let mr = Arc::new(Mr { raw, pd, addr: addr as usize, len, access, key, share });
        keys.insert(key, mr.clone());
        objects().mrs.insert(p as usize, mr);
        Ok(p)
    }

    pub fn deregister(p: *mut ibv_mr) -> Result<()> {
        let mr = objects().mrs.remove(p).ok_or(Errno::EINVAL)?;
        KEYS.write().unwrap_or_else(|e| e.into_inner()).remove(&mr.key);
        // Before returning: from now on no peer reaches the memory (ibv_dereg_mr's contract).
        if let Some(s) = &mr.share {
            s.revoke();
        }
        Ok(())
    }
}

/// Whether `[addr, addr+len)` is mapped in this process: `msync(MS_ASYNC)` fails with ENOMEM on
/// unmapped pages and otherwise does nothing.
fn is_mapped(addr: usize, len: usize) -> bool {
    // SAFETY: sysconf is always safe to call.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = addr & !(page - 1);
    let end = (addr + len).div_ceil(page) * page;
    // SAFETY: msync with MS_ASYNC only inspects the mappings of the range.
    unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_ASYNC) == 0 }
}

/// Checks that `[addr, addr+len)` lies in the region `key` of `pd` with rights `need`, and returns
/// the region (kept alive while the caller copies).
pub fn lookup(
    key: u32,
    pd: &Pd,
    addr: u64,
    len: usize,
    need: u32,
) -> std::result::Result<Arc<Mr>, AccessError> {
    let mr = KEYS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned()
        .ok_or(AccessError::Protection)?;
    if !std::ptr::eq(Arc::as_ptr(&mr.pd), pd) {
        return Err(AccessError::Protection);
    }
    let start = addr as usize;
    let end = start.checked_add(len).ok_or(AccessError::Protection)?;
    if start < mr.addr || end > mr.addr + mr.len {
        return Err(AccessError::Protection);
    }
    if mr.access & need != need {
        return Err(AccessError::Access);
    }
    Ok(mr)
}

/// The provider checks local and remote keys against the table through the QP's PD.
impl MemoryKeys for Pd {
    fn lookup(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
    ) -> std::result::Result<Region, AccessError> {
        lookup(key, self, addr, len, need).map(|mr| mr as Region)
    }

    fn shared(&self, key: u32) -> Option<Arc<dyn SharedRegion>> {
        let keys = KEYS.read().unwrap_or_else(|e| e.into_inner());
        let mr = keys.get(&key).filter(|mr| std::ptr::eq(Arc::as_ptr(&mr.pd), self))?;
        mr.share.clone()
    }
}
