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

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    let mut hooks = CHILD_HOOKS.lock().unwrap_or_else(|e| e.into_inner());
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
    FORK_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn before() {
    let g = FORK_LOCK.write().unwrap_or_else(|e| e.into_inner());
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
