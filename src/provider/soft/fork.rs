//! fork(): a child starts from scratch. As with rdma-core, a child must not use its parent's
//! RDMA objects (here they share rings, doorbells and event descriptors with the parent, so a
//! child touching them would corrupt the parent's connections), but it may open the device
//! again and create its own. The child inherits our state but not our progress thread; the
//! `pthread_atfork` child handler only bumps a generation counter (async-signal-safe), and
//! everything per process (engine, the CM's device context) is created again on first use in
//! the new generation. Objects stamped with an older generation refuse to work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Locks that must start free in a child (a parent thread may have held them at fork time).
static CHILD_RESETS: [&AtomicBool; 1] = [&super::engine::START_LOCK];

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
    for l in CHILD_RESETS {
        l.store(false, Ordering::SeqCst);
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
        // SAFETY: registers a handler that only stores to atomics (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}
