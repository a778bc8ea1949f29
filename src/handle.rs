//! Handles: the C structs we hand out and the registries that make them checkable.
//!
//! Every object given to C is an rdma-core public struct (`CBox<T>`) at a stable heap address,
//! owned by a Rust object held in an `Arc`. The registry maps that address to the object, so an
//! exported function receiving a pointer finds its object or fails with `EINVAL`: a NULL, foreign
//! or already destroyed pointer is never dereferenced by us.

use crate::errno::{Errno, Result};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// A zero-initialised C struct at a fixed heap address, freed with its owner.
pub struct CBox<T> {
    ptr: *mut T,
}

// SAFETY: the struct is plain C data; every mutation goes through the owner's lock or happens
// before the pointer is published, so sharing the box between threads is sound.
unsafe impl<T> Send for CBox<T> {}
// SAFETY: see above.
unsafe impl<T> Sync for CBox<T> {}

impl<T> CBox<T> {
    /// Allocates a zeroed `T`. Only for rdma-core's C structs, for which all-zero is valid.
    pub fn zeroed() -> CBox<T> {
        // SAFETY: T is a C struct of integers, pointers and Option<fn>, all valid when zero.
        let b: Box<T> = Box::new(unsafe { std::mem::zeroed() });
        CBox { ptr: Box::into_raw(b) }
    }

    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Reads a copy of a field set.
    pub fn get(&self) -> &T {
        // SAFETY: the box is live as long as self; C may write fields it owns (e.g. `context`)
        // concurrently, which we only read as plain values.
        unsafe { &*self.ptr }
    }

    /// Mutates the struct.
    ///
    /// # Safety
    /// The caller holds the owner's lock (or the struct is not yet published), so no other
    /// Rust code writes at the same time.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: per the function's contract.
        unsafe { &mut *self.ptr }
    }
}

impl<T> Drop for CBox<T> {
    fn drop(&mut self) {
        // SAFETY: ptr came from Box::into_raw in zeroed() and is freed once, here.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// A C struct whose pointers are only data to its holder (passed back to C, never dereferenced
/// by us without a registry lookup), so it may move between threads.
pub struct CData<T>(pub T);

// SAFETY: see the type's comment.
unsafe impl<T> Send for CData<T> {}
// SAFETY: see the type's comment.
unsafe impl<T> Sync for CData<T> {}

/// Copies a plain C struct that bindgen did not mark `Copy`.
pub fn pod_copy<T>(v: &T) -> T {
    // SAFETY: only used for rdma-core's C structs: plain data without ownership or drop glue.
    unsafe { std::ptr::read(v) }
}

/// Live objects of one kind, keyed by the address of the C struct handed out.
pub struct Registry<T> {
    /// Address -> (process generation that created it, object); see `fork`.
    map: RwLock<HashMap<usize, (u64, Arc<T>)>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry { map: RwLock::new(HashMap::new()) }
    }
}

/// Objects inherited across fork() belong to the parent: in a child they count as foreign.
fn current() -> u64 {
    crate::provider::soft::fork::generation()
}

use crate::provider::soft::fork::shared;

impl<T> Registry<T> {
    pub fn insert(&self, addr: usize, obj: Arc<T>) {
        crate::provider::soft::fork::install();
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
