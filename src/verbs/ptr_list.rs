//! The NULL-terminated pointer arrays the API hands out for the caller to free
//! (`ibv_get_device_list`/`ibv_free_device_list`, `rdma_get_devices`/`rdma_free_devices`).
//!
//! They are allocated with `malloc`, as rdma-core does, and remembered: freeing one we did not
//! hand out, or one already freed, does nothing instead of corrupting the heap (the functions
//! return `void`, so there is no error to report).

use crate::errno::{Errno, Result};
use crate::runtime::fork;
use once_cell::sync::Lazy;
use std::collections::HashSet;
use std::sync::Mutex;

/// Used under `fork::shared()`: a forked child may free a list its parent got.
static LIVE: Lazy<Mutex<HashSet<usize>>> = Lazy::new(|| Mutex::new(HashSet::new()));

/// Runs `f` on the live set under the fork lock (the set's guard is released first).
fn with_live<R>(f: impl FnOnce(&mut HashSet<usize>) -> R) -> R {
    fork::install();
    let _f = fork::shared();
    let mut g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let r = f(&mut g);
    drop(g);
    r
}

/// A list holding `item` (if any) and the terminating NULL.
pub fn alloc<T>(item: Option<*mut T>) -> Result<*mut *mut T> {
    // SAFETY: malloc of two pointers; checked for NULL below.
    let list = unsafe { libc::malloc(2 * std::mem::size_of::<*mut T>()) } as *mut *mut T;
    if list.is_null() {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: list holds two pointer slots.
    unsafe {
        *list = item.unwrap_or(std::ptr::null_mut());
        *list.add(1) = std::ptr::null_mut();
    }
    with_live(|l| l.insert(list as usize));
    Ok(list)
}

/// Frees a list from [`alloc`]; anything else (NULL, foreign, already freed) is ignored.
pub fn free<T>(list: *mut *mut T) {
    if with_live(|l| l.remove(&(list as usize))) {
        // SAFETY: the address came from malloc in alloc() and leaves the live set once, here.
        unsafe { libc::free(list.cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_and_foreign_frees_are_ignored() {
        let mut x = 7u32;
        let l = alloc(Some(&mut x as *mut u32)).unwrap();
        // SAFETY: l holds two slots.
        assert_eq!(unsafe { (*l, *l.add(1)) }, (&mut x as *mut u32, std::ptr::null_mut()));
        free(l);
        free(l); // already freed: nothing happens
        let mut foreign = [std::ptr::null_mut::<u32>(); 2];
        free(foreign.as_mut_ptr()); // not ours: nothing happens
        free(std::ptr::null_mut::<*mut u32>());
    }
}
