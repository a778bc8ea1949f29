//! fork(): a child starts from scratch. As with rdma-core, a child must not use its parent's
//! RDMA objects (here they share rings, doorbells and event descriptors with the parent, so a
//! child touching them would corrupt the parent's connections), but it may open the device
//! again and create its own. The child inherits our state but not our progress thread; the
//! `pthread_atfork` child handler bumps a generation counter and runs the few hooks registered
//! with [`at_child`] (which neither allocate nor lock; the direct path's regions go back to
//! private memory there), and everything per process (engine, the CM's device context) is created again on first use in
//! the new generation. Objects stamped with an older generation refuse to work.
//!
//! The process-wide tables a child uses again (the object registries, the QPN table) are used
//! under `shared()`; the prepare handler takes the same lock exclusively, so no other thread is
//! inside one of them at the moment of fork and the child finds them unlocked.

use crate::runtime::{lock, read_lock, write_lock};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Locks that must start free in a child (a parent thread may have held them at fork time).
static CHILD_RESETS: [&AtomicBool; 1] = [&super::engine::START_LOCK];

static FORK_LOCK: RwLock<()> = RwLock::new(());

/// Work a child does right after fork beyond the generation bump (see [`at_child`]). Touched
/// only under `shared()`, so the forking thread's exclusive hold means no one holds it at fork.
static CHILD_HOOKS: std::sync::Mutex<Vec<fn()>> = std::sync::Mutex::new(Vec::new());

/// Runs `f` in every forked child, in the child handler (before any other code of the child's):
/// for state the child must not share with its parent, such as memory mapped shared that the
/// child would otherwise write through to the parent. Registering twice runs it once.
pub fn at_child(f: fn()) {
    let _g = shared();
    let mut hooks = lock(&CHILD_HOOKS);
    if !hooks.contains(&f) {
        hooks.push(f);
    }
}

thread_local! {
    /// The forking thread's exclusive hold on `FORK_LOCK`, from prepare to parent/child.
    static HELD: RefCell<Option<RwLockWriteGuard<'static, ()>>> = const { RefCell::new(None) };
}

/// Held while using a table that a forked child uses again; never held across a call out.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    read_lock(&FORK_LOCK)
}

extern "C" fn before() {
    let g = write_lock(&FORK_LOCK);
    HELD.with(|h| *h.borrow_mut() = Some(g));
}

extern "C" fn in_parent() {
    HELD.with(|h| h.borrow_mut().take());
}

/// Runs in the child right after fork: atomics, the hooks of [`at_child`], and the release of
/// the lock this very thread took in `before` (no other thread exists to be woken).
extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
    for l in CHILD_RESETS {
        l.store(false, Ordering::SeqCst);
    }
    // No other thread exists: the hooks list is free (see CHILD_HOOKS). Nothing here allocates
    // (the allocator's locks may have been held by a parent thread), and a hook that panicked
    // must not unwind into fork(3).
    if let Ok(hooks) = CHILD_HOOKS.lock() {
        for f in hooks.iter() {
            let _ = std::panic::catch_unwind(f);
        }
    }
    HELD.with(|h| h.borrow_mut().take());
}

/// A process-wide value that each process generation builds anew (with `init`, on first use):
/// a forked child never touches its parent's copy, so a lock in it that a parent thread held at
/// the moment of fork (a lookup on the progress thread, say) cannot hang the child. For state
/// the child has no use for (its parent's objects refuse to work there); tables the child still
/// needs are used under [`shared`] instead. One atomic load and a compare on the fast path.
pub struct PerProcess<T: 'static> {
    slot: AtomicPtr<Generation<T>>,
    init: fn() -> T,
    _value: PhantomData<T>,
}

struct Generation<T> {
    generation: u64,
    value: T,
    /// The generation before (a parent's), kept reachable so a leak checker in the child does
    /// not report it.
    _prev: *mut Generation<T>,
}

impl<T: 'static> PerProcess<T> {
    pub const fn new(init: fn() -> T) -> PerProcess<T> {
        PerProcess { slot: AtomicPtr::new(std::ptr::null_mut()), init, _value: PhantomData }
    }

    /// This generation's value.
    pub fn get(&'static self) -> &'static T {
        let now = generation();
        let p = self.slot.load(Ordering::Acquire);
        // SAFETY: a non-null slot is a leaked box, never freed (see `build`).
        match unsafe { p.as_ref() } {
            Some(g) if g.generation == now => &g.value,
            _ => self.build(p, now),
        }
    }

    #[cold]
    fn build(&'static self, mut seen: *mut Generation<T>, now: u64) -> &'static T {
        // The generation must move on at the next fork, or a child would find this one.
        install();
        let value = (self.init)();
        let new = Box::into_raw(Box::new(Generation { generation: now, value, _prev: seen }));
        loop {
            match self.slot.compare_exchange(seen, new, Ordering::AcqRel, Ordering::Acquire) {
                // The previous generation's box is leaked on purpose: threads that do not exist
                // in this process may hold its locks, and parent objects may point into it.
                // SAFETY: `new` is ours and now published; it is never freed.
                Ok(_) => return unsafe { &(*new).value },
                Err(actual) => {
                    // SAFETY: a non-null slot is a leaked box, never freed.
                    if let Some(g) = unsafe { actual.as_ref() }.filter(|g| g.generation == now) {
                        // Another thread of this generation built it first; ours was never
                        // published.
                        // SAFETY: `new` came from Box::into_raw above and nobody else saw it.
                        drop(unsafe { Box::from_raw(new) });
                        return &g.value;
                    }
                    seen = actual;
                    // SAFETY: `new` is still ours alone (not published).
                    unsafe { (*new)._prev = seen };
                }
            }
        }
    }
}

/// This process's generation: 0 in the original process, one more in each forked child.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Installs the fork handler (once per process; children inherit it).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers handlers with the C ABI; the child handler stores to atomics, runs
        // the non-allocating hooks of at_child and releases the lock its own thread took in
        // `before`.
        unsafe { libc::pthread_atfork(Some(before), Some(in_parent), Some(in_child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static TABLE: PerProcess<Mutex<u32>> = PerProcess::new(|| Mutex::new(0));

    /// A child forked while the parent's table is locked (as by a thread of the parent's at
    /// that moment) gets a fresh, unlocked table; the parent keeps its own.
    #[test]
    fn a_forked_child_gets_its_own_value() {
        let parent = TABLE.get();
        let held = lock(parent);
        // SAFETY: the child only builds and locks its table, then leaves with _exit (no
        // destructors, no test harness code).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let fresh = TABLE.get().try_lock().is_ok_and(|v| *v == 0);
            let other = !std::ptr::eq(TABLE.get(), parent);
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(if fresh && other { 0 } else { 1 }) };
        }
        assert!(pid > 0, "fork failed");
        drop(held);
        let mut status = 0;
        // SAFETY: waits for our own child; status is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child: {status:#x}");
        assert!(std::ptr::eq(TABLE.get(), parent), "the parent's table changed");
    }
}
