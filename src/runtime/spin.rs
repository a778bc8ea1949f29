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
//!
//! The progress thread has a window of its own ([`progress`], `RDMASHIM_PROGRESS_SPIN_US`):
//! after a pass that found work, it looks again for that long before it sleeps, with the same
//! adaptation, so a stream of datagrams or ring segments that the application does not poll
//! for is read without a wake-up per batch.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// This process's window for event waiters (`RDMASHIM_SPIN_US`, read once).
pub fn process() -> &'static Spin {
    static SPIN: OnceLock<Spin> = OnceLock::new();
    SPIN.get_or_init(|| from_env("RDMASHIM_SPIN_US", DEFAULT_US))
}

/// The progress thread's window when `RDMASHIM_PROGRESS_SPIN_US` is not set: longer than the
/// waiters', since a stream's next batch of datagrams comes tens of microseconds after the last.
pub const PROGRESS_DEFAULT_US: u32 = 100;

/// This process's window for its progress thread after it found work and before it sleeps
/// (`RDMASHIM_PROGRESS_SPIN_US`, read once). A sender then need not wake it for each batch,
/// and it does not pay a trip through the scheduler per batch either.
pub fn progress() -> &'static Spin {
    static SPIN: OnceLock<Spin> = OnceLock::new();
    SPIN.get_or_init(|| from_env("RDMASHIM_PROGRESS_SPIN_US", PROGRESS_DEFAULT_US))
}

/// A window of `var` microseconds (`default` unset or unreadable); none with one CPU, where
/// the peer could not run meanwhile.
fn from_env(var: &str, default: u32) -> Spin {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let us = std::env::var(var).ok().and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(default);
    let us = if cpus > 1 { us } else { 0 };
    Spin::new(Duration::from_micros(us.into()))
}

/// A spell of the progress thread without work, while no application polls or waits for
/// events: it looks again for the spin window ([`progress`]) before it sleeps.
pub struct Spell {
    since: Instant,
    window: Duration,
    /// The window has passed (and was reported as such): the thread sleeps now.
    over: bool,
}

impl Spell {
    /// Whether the thread looks again at once rather than sleep, after a pass that found
    /// `work` (or not), with nobody but this thread to read what comes (`unattended`): an
    /// application that polls or waits for events would have to share the CPUs with a
    /// spinning progress thread. Keeps the spell in `spell` and reports to the window how it
    /// ended.
    pub fn next(spell: &mut Option<Spell>, work: bool, unattended: bool, spin: &Spin) -> bool {
        if work || !unattended {
            // Work found while still looking: the window was worth it.
            if let Some(s) = spell.take() {
                if work && !s.over {
                    spin.record(true);
                }
            }
            return false;
        }
        let s = spell.get_or_insert_with(|| Spell {
            since: Instant::now(),
            window: spin.window(),
            over: false,
        });
        if s.over {
            return false;
        }
        if s.since.elapsed() < s.window {
            return true;
        }
        s.over = true;
        spin.record(false);
        false
    }
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
    fn the_progress_thread_spins_after_work_until_its_window_passes() {
        let s = Spin::new(Duration::from_secs(2));
        let mut spell = None;
        assert!(!Spell::next(&mut spell, true, true, &s), "work: it passes again anyway");
        assert!(Spell::next(&mut spell, false, true, &s), "idle right after work: it spins");
        assert!(Spell::next(&mut spell, false, true, &s));
        // The window passes (moved back rather than slept through).
        let started = &mut spell.as_mut().expect("a spell runs").since;
        *started = started.checked_sub(Duration::from_secs(3)).expect("a clock past 3 s");
        assert!(!Spell::next(&mut spell, false, true, &s), "the window passed: it sleeps");
        assert_eq!(s.window(), Duration::from_secs(1), "a spell that ends in sleep halves it");
        assert!(!Spell::next(&mut spell, false, true, &s), "woken with nothing: no new spell");
        assert!(!Spell::next(&mut spell, true, true, &s));
        assert_eq!(s.window(), Duration::from_secs(1), "work after a sleep restores nothing");
    }

    #[test]
    fn work_found_while_spinning_restores_the_window() {
        let s = Spin::new(Duration::from_secs(2));
        s.record(false);
        let mut spell = None;
        assert!(Spell::next(&mut spell, false, true, &s));
        assert!(!Spell::next(&mut spell, true, true, &s));
        assert_eq!(s.window(), Duration::from_secs(2));
    }

    #[test]
    fn an_application_that_polls_or_waits_keeps_the_progress_thread_from_spinning() {
        let s = Spin::new(Duration::from_secs(2));
        let mut spell = None;
        assert!(Spell::next(&mut spell, false, true, &s));
        assert!(!Spell::next(&mut spell, false, false, &s), "attended: it sleeps at once");
        assert!(spell.is_none());
        assert_eq!(s.window(), Duration::from_secs(2), "and that says nothing of the window");
    }

    #[test]
    fn a_zero_window_never_spins() {
        let s = Spin::new(Duration::ZERO);
        s.record(true);
        assert!((0..PROBE_EVERY * 2).all(|_| s.window() == Duration::ZERO));
    }
}
