//! A registered region's gate: the provider touches a region's memory on a peer's behalf (or for
//! a message that lands after its check, in our own buffers) only inside it, and whatever ends
//! the region's reach (deregistration, re-registration, a window's invalidation) closes it,
//! waiting for the accesses under way.
//!
//! A key check alone is not enough: a peer's access that passed the check just before the
//! region was deregistered, or a message whose first segment was checked, would otherwise land
//! after `ibv_dereg_mr` returned, in memory the program may have freed or reused. With the
//! gate, once `close` returns no byte of a peer's WRITE lands and no READ or atomic reads the
//! memory; an access that comes later is refused (a remote access error, as hardware gives
//! for an invalidated key).
//!
//! `enter` and `close` each write one flag and then read the other's (both sequentially
//! consistent), so at least one sees the other: either the access sees the gate closed, or
//! `close` sees it inside and waits for it to leave.

use crate::runtime::fork;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub struct Gate {
    closed: AtomicBool,
    /// Accesses under way.
    inside: AtomicUsize,
    /// The process generation the gate was made in: a forked child has none of its parent's
    /// threads, so none of the accesses its copy of the count shows can still be under way.
    generation: u64,
}

/// An access under way; dropping it leaves the gate.
#[must_use]
pub struct Inside<'a>(&'a Gate);

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            closed: AtomicBool::new(false),
            inside: AtomicUsize::new(0),
            generation: fork::generation(),
        }
    }

    /// Starts an access to the region's memory, or `None` once the gate is closed.
    pub fn enter(&self) -> Option<Inside<'_>> {
        self.inside.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.inside.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Inside(self))
    }

    /// Ends every access: none starts after this returns, and those under way have finished.
    /// Accesses are one copy each (a segment, a packet, 8 bytes), so the wait is short.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if self.generation != fork::generation() {
            return;
        }
        let mut spins = 0u32;
        while self.inside.load(Ordering::SeqCst) != 0 {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The gate was closed: the region was deregistered since its check.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

/// Enters the gate of a checked access, if it has one (an empty range names no region).
pub fn enter_if(gate: Option<&Gate>) -> Result<Option<Inside<'_>>, Closed> {
    gate.map(|g| g.enter().ok_or(Closed)).transpose()
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // Release: the access's bytes are in place before `close` sees it gone.
        self.0.inside.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::Gate;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    #[test]
    fn open_until_closed_then_refused() {
        let g = Gate::new();
        drop(g.enter().expect("a new gate is open"));
        let a = g.enter().expect("open");
        let b = g.enter().expect("several accesses at once");
        drop((a, b));
        assert!(matches!(super::enter_if(Some(&g)), Ok(Some(_))));
        assert!(matches!(super::enter_if(None), Ok(None)), "no region: nothing to enter");
        g.close();
        assert!(g.enter().is_none(), "closed: refused");
        assert!(matches!(super::enter_if(Some(&g)), Err(super::Closed)));
        g.close(); // closing twice returns
    }

    #[test]
    fn close_waits_for_the_access_under_way() {
        let g = Arc::new(Gate::new());
        let inside = g.enter().expect("open");
        let returned = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let closer = {
            let (g, returned) = (g.clone(), returned.clone());
            std::thread::spawn(move || {
                tx.send(()).unwrap();
                g.close();
                returned.store(true, Ordering::SeqCst);
            })
        };
        rx.recv().unwrap();
        // Once the closer has shut the gate (new accesses refused), it must still be waiting.
        while g.enter().map(drop).is_some() {
            std::thread::yield_now();
        }
        for _ in 0..1000 {
            std::thread::yield_now();
            assert!(!returned.load(Ordering::SeqCst), "close returned while an access was inside");
        }
        drop(inside);
        closer.join().unwrap();
        assert!(returned.load(Ordering::SeqCst));
    }
}
