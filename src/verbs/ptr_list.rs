//! The NULL-terminated pointer arrays the API hands out for the caller to free
//! (`ibv_get_device_list`/`ibv_free_device_list`, `rdma_get_devices`/`rdma_free_devices`).
//!
//! They are allocated with `malloc`, as rdma-core does, and remembered: freeing one we did not
//! hand out, or one already freed, does nothing instead of corrupting the heap (the functions
//! return `void`, so there is no error to report). A list may carry a companion, handed back
//! when it is freed (the native library's own device list that a merged list was made from).

use crate::errno::{Errno, Result};
use crate::runtime::{fork, lock};
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::Mutex;

/// The lists handed out, with their companions (0: none). Used under `fork::shared()`: a forked
/// child may free a list its parent got.
static LIVE: Lazy<Mutex<HashMap<usize, usize>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// Runs `f` on the live set under the fork lock (the set's guard is released first).
fn with_live<R>(f: impl FnOnce(&mut HashMap<usize, usize>) -> R) -> R {
    fork::install();
    let _f = fork::shared();
    let mut g = lock(&LIVE);
    let r = f(&mut g);
    drop(g);
    r
}

/// A list holding `item` (if any) and the terminating NULL.
pub fn alloc<T>(item: Option<*mut T>) -> Result<*mut *mut T> {
    alloc_all(item.as_slice(), 0)
}

/// A list holding `items` and the terminating NULL, which carries `companion` (0: none).
pub fn alloc_all<T>(items: &[*mut T], companion: usize) -> Result<*mut *mut T> {
    let slots = items.len() + 1;
    // SAFETY: malloc of `slots` pointers (at least one); checked for NULL below.
    let list = unsafe { libc::malloc(slots * std::mem::size_of::<*mut T>()) } as *mut *mut T;
    if list.is_null() {
        return Err(Errno::ENOMEM);
    }
    for (i, p) in items.iter().chain([&std::ptr::null_mut()]).enumerate() {
        // SAFETY: i < slots, the list's length.
        unsafe { *list.add(i) = *p };
    }
    with_live(|l| l.insert(list as usize, companion));
    Ok(list)
}

/// Frees a list from [`alloc_all`] and returns its companion; anything else (NULL, foreign,
/// already freed) is ignored (0).
pub fn free<T>(list: *mut *mut T) -> usize {
    match with_live(|l| l.remove(&(list as usize))) {
        Some(companion) => {
            // SAFETY: the address came from malloc in alloc_all() and leaves the live set
            // once, here.
            unsafe { libc::free(list.cast()) };
            companion
        }
        None => 0,
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
        assert_eq!(free(l), 0);
        assert_eq!(free(l), 0); // already freed: nothing happens
        let (mut a, mut b) = (1u32, 2u32);
        let l = alloc_all(&[&mut a as *mut u32, &mut b as *mut u32], 77).unwrap();
        // SAFETY: l holds three slots.
        assert_eq!(unsafe { *l.add(2) }, std::ptr::null_mut());
        assert_eq!(free(l), 77, "the companion comes back once");
        assert_eq!(free(l), 0);
        let mut foreign = [std::ptr::null_mut::<u32>(); 2];
        free(foreign.as_mut_ptr()); // not ours: nothing happens
        free(std::ptr::null_mut::<*mut u32>());
    }
}
