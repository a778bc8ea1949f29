//! How long a thread waiting for a completion event polls the rings before it sleeps.
//!
//! A sleep costs two scheduler trips: the peer's `FUTEX_WAKE` and our wake-up, several
//! microseconds each on a loaded machine, where a busy-polled round trip is under three. So a
//! [`Direct`](super::engine::Direct) waiter first polls for a short window (the peer's rings only
//! mark the doorbell meanwhile, with no system call), as adaptive mutexes and the kernel's socket
//! busy-polling do. The window adapts, so a process whose events come rarely stops burning CPU:
//! an event found while spinning restores the full window, each wait that ends in a sleep halves
//! it, and at zero every [`PROBE_EVERY`]th wait tries the full window again.
//!
//! `RDMASHIM_SPIN_US` sets the full window (default [`DEFAULT_US`]; 0 turns spinning off). On a
//! machine with one CPU there is no spinning: the peer could not run meanwhile.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The full window, in microseconds, when `RDMASHIM_SPIN_US` is not set.
pub const DEFAULT_US: u32 = 20;
/// With the window at zero, one wait in this many spins the full window again.
pub const PROBE_EVERY: u32 = 16;

/// The adaptive window of one process.
pub struct Spin {
    full_ns: u32,
    window_ns: AtomicU32,
    /// Waits since the window reached zero.
    idle_waits: AtomicU32,
}

impl Spin {
    pub const fn new(full: Duration) -> Spin {
        let ns = full.as_nanos();
        let full_ns = if ns > u32::MAX as u128 { u32::MAX } else { ns as u32 };
        Spin { full_ns, window_ns: AtomicU32::new(full_ns), idle_waits: AtomicU32::new(0) }
    }

    /// The window for the next wait (zero: sleep at once).
    pub fn window(&self) -> Duration {
        let w = self.window_ns.load(Ordering::Relaxed);
        if w > 0 || self.full_ns == 0 {
            return Duration::from_nanos(w.into());
        }
        let n = self.idle_waits.fetch_add(1, Ordering::Relaxed) + 1;
        if n % PROBE_EVERY == 0 {
            Duration::from_nanos(self.full_ns.into())
        } else {
            Duration::ZERO
        }
    }

    /// How a wait ended: `true` if its event came while spinning.
    pub fn record(&self, found_spinning: bool) {
        if found_spinning {
            self.window_ns.store(self.full_ns, Ordering::Relaxed);
            self.idle_waits.store(0, Ordering::Relaxed);
        } else {
            let w = self.window_ns.load(Ordering::Relaxed) / 2;
            // Below a microsecond a window is only the cost of looking once.
            self.window_ns.store(if w < 1_000 { 0 } else { w }, Ordering::Relaxed);
        }
    }
}

/// This process's window (`RDMASHIM_SPIN_US`, read once).
pub fn process() -> &'static Spin {
    static SPIN: OnceLock<Spin> = OnceLock::new();
    SPIN.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let us = std::env::var("RDMASHIM_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(DEFAULT_US);
        let us = if cpus > 1 { us } else { 0 };
        Spin::new(Duration::from_micros(us.into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_found_event_restores_and_sleeps_halve_the_window() {
        let s = Spin::new(Duration::from_micros(16));
        assert_eq!(s.window(), Duration::from_micros(16));
        s.record(false);
        assert_eq!(s.window(), Duration::from_micros(8));
        s.record(true);
        assert_eq!(s.window(), Duration::from_micros(16));
    }

    #[test]
    fn an_idle_window_reaches_zero_and_probes() {
        let s = Spin::new(Duration::from_micros(16));
        for _ in 0..5 {
            s.record(false); // 8, 4, 2, 1, then below 1 µs: 0
        }
        let spins = (0..PROBE_EVERY * 3).filter(|_| s.window() > Duration::ZERO).count();
        assert_eq!(spins, 3, "one probe in {PROBE_EVERY} waits");
    }

    #[test]
    fn a_zero_window_never_spins() {
        let s = Spin::new(Duration::ZERO);
        s.record(true);
        assert!((0..PROBE_EVERY * 2).all(|_| s.window() == Duration::ZERO));
    }
}
