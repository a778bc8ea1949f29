//! Handles: the C structs we hand out and the registries that make them checkable.
//!
//! Every object given to C is an rdma-core public struct (`CBox<T>`) at a stable heap address,
//! owned by a Rust object held in an `Arc`. The registry maps that address to the object, so an
//! exported function receiving a pointer finds its object or fails with `EINVAL`: a NULL, foreign
//! or already destroyed pointer is never dereferenced by us.

use crate::errno::{Errno, Result};
use crate::runtime::{read_lock, write_lock};
use crate::sys::*;
use rustc_hash::FxHashMap;
use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

/// rdma-core's public C structs that we allocate and hand out (and a few we keep copies of).
///
/// # Safety
/// Implement only for `repr(C)` structs made of integers, raw pointers, `Option<fn>`, atomics,
/// and arrays, unions and structs of those: all-zero is a valid value, there is no drop glue
/// and no ownership, and their pointers are data to us (dereferenced only after a registry
/// lookup). Sharing such a struct between threads is then a matter of how its fields are read
/// and written, which `CBox` restricts to raw-pointer accesses.
pub unsafe trait CStruct {}

macro_rules! c_structs {
    ($($t:ty),* $(,)?) => {
        // SAFETY: each is a bindgen copy of an rdma-core public struct of the kind described
        // on `CStruct` (integers, pointers, function pointers, unions and arrays of those).
        $(unsafe impl CStruct for $t {})*
    };
}

c_structs!(
    ibv_device,
    verbs_context,
    ibv_pd,
    ibv_td,
    ibv_xrcd,
    ibv_mr,
    ibv_dm,
    ibv_mw,
    ibv_ah,
    ibv_srq,
    ibv_qp_ex,
    ibv_comp_channel,
    ibv_qp_init_attr,
    ibv_qp_cap,
    ibv_qp_attr,
    ibv_srq_attr,
    rdma_cm_id,
    rdma_cm_event,
    rdma_event_channel,
    rdma_addrinfo,
);

/// A zero-initialised C struct at a fixed heap address, freed with its owner.
///
/// C reads and writes the struct behind our back, so Rust never holds a reference to it once
/// the address is handed out: reads copy it (`read`) and writes are raw-pointer writes of
/// single fields (`as_ptr`) by the owner under its lock. Before it is handed out, `init` gives
/// ordinary exclusive access.
pub struct CBox<T: CStruct> {
    ptr: *mut T,
}

// SAFETY: T is plain C data (`CStruct`); the box is only accessed through raw-pointer copies and
// single-field writes that the owner serialises with its lock, so it may move between threads.
unsafe impl<T: CStruct> Send for CBox<T> {}
// SAFETY: `&CBox` gives no reference into the struct, only copies and raw pointers, so sharing
// it between threads adds nothing to what Send allows.
unsafe impl<T: CStruct> Sync for CBox<T> {}

impl<T: CStruct> CBox<T> {
    /// Allocates a zeroed `T`.
    pub fn zeroed() -> CBox<T> {
        // SAFETY: all-zero is a valid T (`CStruct`).
        let b: Box<T> = Box::new(unsafe { std::mem::zeroed() });
        CBox { ptr: Box::into_raw(b) }
    }

    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// A copy of the struct as it is now, read through the raw pointer (no reference to memory
    /// C may write at the same time is created).
    pub fn read(&self) -> T {
        // SAFETY: the allocation is live as long as self; T has no drop glue and every bit
        // pattern C may leave in it is a valid T (`CStruct`).
        unsafe { std::ptr::read(self.ptr) }
    }

    /// Exclusive access while the struct is being set up, before its address is handed out
    /// (to C or to a registry): `&mut self` proves no one else holds the box.
    pub fn init(&mut self) -> &mut T {
        // SAFETY: the allocation is live as long as self, and `&mut self` excludes every other
        // Rust access; the caller has not yet published the address to C (see above).
        unsafe { &mut *self.ptr }
    }
}

impl<T: CStruct> Drop for CBox<T> {
    fn drop(&mut self) {
        // SAFETY: ptr came from Box::into_raw in zeroed() and is freed once, here.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// A C struct whose pointers are only data to its holder (passed back to C, never dereferenced
/// by us without a registry lookup), so it may move between threads.
pub struct CData<T: CStruct>(pub T);

// SAFETY: T is plain C data (`CStruct`) whose pointers are not dereferenced through this value.
unsafe impl<T: CStruct> Send for CData<T> {}
// SAFETY: shared access only reads plain data whose pointers are not dereferenced here.
unsafe impl<T: CStruct> Sync for CData<T> {}

/// Copies a plain C struct that bindgen did not mark `Copy`.
pub fn pod_copy<T: CStruct>(v: &T) -> T {
    // SAFETY: T is plain data without ownership or drop glue (`CStruct`).
    unsafe { std::ptr::read(v) }
}

/// Live objects of one kind, keyed by the address of the C struct handed out.
pub struct Registry<T> {
    /// Address -> (process generation that created it, object); see `fork`. Looked up on every
    /// post and poll: Fx hashing (our own addresses as keys), not SipHash.
    map: RwLock<FxHashMap<usize, (u64, Arc<T>)>>,
    /// Bumped by every insert and remove: a thread's remembered lookup (`RECENT`) of this
    /// registry holds only while it is unchanged.
    epoch: AtomicU64,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry { map: RwLock::new(FxHashMap::default()), epoch: AtomicU64::new(0) }
    }
}

/// A lookup a thread remembers: registry, address, the registry's epoch and the process
/// generation then, and the object, weakly (a destroyed object is not kept alive by it).
struct Recent {
    registry: usize,
    addr: usize,
    epoch: u64,
    generation: u64,
    obj: Weak<dyn Any + Send + Sync>,
}

/// Lookups remembered per thread. A program posts to and polls the same few QPs and CQs, so
/// a hit costs an atomic load and a reference count instead of two locks and a hash.
const RECENT_LEN: usize = 4;

thread_local! {
    static RECENT: RefCell<([Option<Recent>; RECENT_LEN], usize)> =
        const { RefCell::new(([None, None, None, None], 0)) };
}

/// Objects inherited across fork() belong to the parent: in a child they count as foreign.
fn current() -> u64 {
    crate::runtime::fork::generation()
}

use crate::runtime::fork::shared;

impl<T: Send + Sync + 'static> Registry<T> {
    pub fn insert(&self, addr: usize, obj: Arc<T>) {
        crate::runtime::fork::install();
        let _f = shared();
        let old = write_lock(&self.map).insert(addr, (current(), obj));
        self.epoch.fetch_add(1, Ordering::AcqRel);
        drop(_f);
        drop(old); // outside the locks: a destructor may use other registries
    }

    /// The live object behind `p`, or `EINVAL` for NULL, foreign or destroyed pointers.
    pub fn get<P>(&self, p: *const P) -> Result<Arc<T>> {
        if p.is_null() {
            return Err(Errno::EINVAL);
        }
        let (addr, me) = (p as usize, self as *const Self as usize);
        // The epoch is read before the map: a remove after this read bumps it, so what this
        // lookup remembers is never taken for current after that remove.
        let epoch = self.epoch.load(Ordering::Acquire);
        let generation = current();
        if let Some(o) = recent(me, addr, epoch, generation) {
            return Ok(o);
        }
        let _f = shared();
        // A `let`, so the map's guard is released before `_f` (a tail expression's would not be).
        let r = match read_lock(&self.map).get(&addr) {
            Some((g, o)) if *g == generation => Ok(o.clone()),
            _ => Err(Errno::EINVAL),
        };
        if let Ok(o) = &r {
            remember(me, addr, epoch, generation, o);
        }
        r
    }

    pub fn remove<P>(&self, p: *const P) -> Option<Arc<T>> {
        let _f = shared();
        let mut m = write_lock(&self.map);
        let r = match m.get(&(p as usize)) {
            Some((g, _)) if *g == current() => m.remove(&(p as usize)).map(|(_, o)| o),
            _ => None,
        };
        self.epoch.fetch_add(1, Ordering::AcqRel);
        r
    }

    pub fn contains<P>(&self, p: *const P) -> bool {
        self.get(p).is_ok()
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        let _f = shared();
        let m = read_lock(&self.map);
        m.values().filter(|(g, _)| *g == current()).map(|(_, o)| o.clone()).collect()
    }
}

/// The object a thread looked up last in registry `registry` at `addr`, if the registry has
/// not changed since (`epoch`), the process is the same (`generation`) and the object lives.
fn recent<T: Send + Sync + 'static>(
    registry: usize,
    addr: usize,
    epoch: u64,
    generation: u64,
) -> Option<Arc<T>> {
    RECENT
        .try_with(|r| {
            let r = r.try_borrow().ok()?;
            let e = r.0.iter().flatten().find(|e| e.registry == registry && e.addr == addr)?;
            if e.epoch != epoch || e.generation != generation {
                return None;
            }
            e.obj.upgrade()?.downcast::<T>().ok()
        })
        .ok()
        .flatten()
}

fn remember<T: Send + Sync + 'static>(
    registry: usize,
    addr: usize,
    epoch: u64,
    generation: u64,
    obj: &Arc<T>,
) {
    let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(obj) as Weak<dyn Any + Send + Sync>;
    let _ = RECENT.try_with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else { return };
        let (slots, next) = &mut *r;
        let entry = Recent { registry, addr, epoch, generation, obj: weak };
        let at = slots
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.registry == registry && e.addr == addr))
            .unwrap_or_else(|| {
                *next = (*next + 1) % RECENT_LEN;
                *next
            });
        slots[at] = Some(entry);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Obj(u32);

    #[test]
    fn a_remembered_lookup_never_outlives_a_remove_or_a_reinsert() {
        let reg: Registry<Obj> = Registry::default();
        let addr = 0x1000usize;
        let p = addr as *const u8;
        reg.insert(addr, Arc::new(Obj(1)));
        assert_eq!(reg.get(p).unwrap().0, 1);
        assert_eq!(reg.get(p).unwrap().0, 1, "the remembered lookup");
        // Removed on another thread while this one still holds the object: this thread's
        // remembered lookup is stale at once.
        let held = reg.get(p).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| assert!(reg.remove(addr as *const u8).is_some()));
        });
        assert_eq!(reg.get(p).err(), Some(Errno::EINVAL));
        drop(held);
        // The same address reused by a new object: the new one, not the old.
        reg.insert(addr, Arc::new(Obj(2)));
        assert_eq!(reg.get(p).unwrap().0, 2);
        // Remembering holds the object weakly: removing it drops it.
        let w = Arc::downgrade(&reg.get(p).unwrap());
        assert!(reg.remove(p).is_some());
        assert!(w.upgrade().is_none(), "no thread-local copy keeps a removed object alive");
        assert_eq!(reg.get(p).err(), Some(Errno::EINVAL));
        assert_eq!(reg.get(std::ptr::null::<u8>()).err(), Some(Errno::EINVAL));
    }

    #[test]
    fn lookups_in_two_registries_at_one_address_stay_apart() {
        let a: Registry<Obj> = Registry::default();
        let b: Registry<Obj> = Registry::default();
        let p = 0x2000usize as *const u8;
        a.insert(0x2000, Arc::new(Obj(10)));
        assert_eq!(a.get(p).unwrap().0, 10);
        assert_eq!(b.get(p).err(), Some(Errno::EINVAL));
        b.insert(0x2000, Arc::new(Obj(20)));
        assert_eq!((a.get(p).unwrap().0, b.get(p).unwrap().0), (10, 20));
        // More lookups than remembered slots: all still right.
        for i in 0..3 * RECENT_LEN {
            a.insert(0x3000 + i, Arc::new(Obj(i as u32)));
        }
        for i in 0..3 * RECENT_LEN {
            assert_eq!(a.get((0x3000 + i) as *const u8).unwrap().0, i as u32);
        }
        assert_eq!(a.get(p).unwrap().0, 10);
    }
}
