//! Handles: the C structs we hand out and the registries that make them checkable.
//!
//! Every object given to C is an rdma-core public struct (`CBox<T>`) at a stable heap address,
//! owned by a Rust object held in an `Arc`. The registry maps that address to the object, so an
//! exported function receiving a pointer finds its object or fails with `EINVAL`: a NULL, foreign
//! or already destroyed pointer is never dereferenced by us.

use crate::errno::{Errno, Result};
use crate::sys::*;
use rustc_hash::FxHashMap;
use std::sync::{Arc, RwLock};

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
    ibv_mr,
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
// SAFETY: as for Send: `&CBox` gives no reference into the struct, only copies and raw pointers.
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
// SAFETY: as for Send; shared access only reads plain data.
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
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry { map: RwLock::new(FxHashMap::default()) }
    }
}

/// Objects inherited across fork() belong to the parent: in a child they count as foreign.
fn current() -> u64 {
    crate::runtime::fork::generation()
}

use crate::runtime::fork::shared;

impl<T> Registry<T> {
    pub fn insert(&self, addr: usize, obj: Arc<T>) {
        crate::runtime::fork::install();
        let _f = shared();
        let old =
            self.map.write().unwrap_or_else(|e| e.into_inner()).insert(addr, (current(), obj));
        drop(_f);
        drop(old); // outside the locks: a destructor may use other registries
    }

    /// The live object behind `p`, or `EINVAL` for NULL, foreign or destroyed pointers.
    pub fn get<P>(&self, p: *const P) -> Result<Arc<T>> {
        if p.is_null() {
            return Err(Errno::EINVAL);
        }
        let _f = shared();
        // A `let`, so the map's guard is released before `_f` (a tail expression's would not be).
        let r = match self.map.read().unwrap_or_else(|e| e.into_inner()).get(&(p as usize)) {
            Some((g, o)) if *g == current() => Ok(o.clone()),
            _ => Err(Errno::EINVAL),
        };
        r
    }

    pub fn remove<P>(&self, p: *const P) -> Option<Arc<T>> {
        let _f = shared();
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        match m.get(&(p as usize)) {
            Some((g, _)) if *g == current() => m.remove(&(p as usize)).map(|(_, o)| o),
            _ => None,
        }
    }

    pub fn contains<P>(&self, p: *const P) -> bool {
        self.get(p).is_ok()
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        let _f = shared();
        let m = self.map.read().unwrap_or_else(|e| e.into_inner());
        m.values().filter(|(g, _)| *g == current()).map(|(_, o)| o.clone()).collect()
    }
}
