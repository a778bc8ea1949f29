//! The direct role: the thread waiting for a completion event is the thread a peer's doorbell
//! wakes (see `engine`, "One wake-up per event"), and keeps the role a little while after.
//!
//! * A [`Direct`] waiter first spins (`spin`), advertising `SLEEP_DIRECT` alone: a ring then
//!   only sets `DIRECT_RUNG`, without a system call, and the spinning thread runs the rings.
//!   Going to sleep (`prepare`) adds `DIRECT_ASLEEP`, so a ring wakes it with `FUTEX_WAKE`.
//! * **Linger.** When the wait returns, the application usually handles its event and waits
//!   again within microseconds. So `SLEEP_DIRECT` stays advertised ([`Linger`]): rings that come
//!   meanwhile only set `DIRECT_RUNG`, and the next wait (or a CQ poll) runs them, where they
//!   used to wake the progress thread, which then contended with the application for the QPs.
//!   The progress thread bounds a linger: it never sleeps without a timeout while an event loop
//!   runs or a linger lasts, and ends a linger older than `LINGER_MAX`, running what rang. A
//!   waiter that finds the progress thread asleep without a timeout does not linger (the
//!   `forever` flag and the linger flag are each set before the other is read, so one of the two
//!   sides sees the other).

use super::bell::{DIRECT_ASLEEP, DIRECT_RUNG, SLEEP_DIRECT};
use super::engine::Engine;
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a linger may last before the progress thread takes the rings back: the time an
/// application that stopped waiting without saying so may leave a ring unanswered (the same
/// bound as the progress thread's nap beside a polling application).
const LINGER_MAX: Duration = Duration::from_millis(1);

/// The right to be the thread a peer's doorbell wakes (one per process at a time, so a ring
/// wakes one thread): taken by a thread about to wait for a completion event.
pub struct Direct {
    e: &'static Engine,
    /// `SLEEP_DIRECT` was advertised (by `spin` or `prepare`).
    advertised: Cell<bool>,
    /// A linger lasted when this waiter took the role: its bits are this waiter's to hand back,
    /// even if it never waits (its event was there already, or its channel is non-blocking).
    took_linger: bool,
}

/// The direct role kept after a wait, with no thread in it.
#[derive(Default)]
pub(super) struct Linger {
    active: AtomicBool,
    /// When it began (ns since `EPOCH`).
    since_ns: AtomicU64,
    /// The progress thread is about to sleep, or sleeps, without a timeout.
    forever: AtomicBool,
}

fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl Linger {
    /// The progress thread is about to sleep without a timeout: it may, unless a linger lasts
    /// (then it must come back to bound it).
    pub(super) fn may_sleep_forever(&self) -> bool {
        self.forever.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.active.load(Ordering::SeqCst) {
            self.forever.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The progress thread is awake again.
    pub(super) fn woke(&self) {
        self.forever.store(false, Ordering::SeqCst);
    }
}

impl Direct {
    pub(super) fn new(e: &'static Engine) -> Direct {
        // A linger ends here: this waiter holds the role now, with the bits as they are.
        let took_linger = e.linger.active.swap(false, Ordering::SeqCst);
        Direct { e, advertised: Cell::new(false), took_linger }
    }
}

impl super::fdqueue::SharedSleep for Direct {
    fn spin(&self) -> bool {
        if !self.advertised.get() {
            // Not asleep: a ring only marks DIRECT_RUNG (no wake-up), and this run sees it.
            self.e.bell.word().waiting.fetch_or(SLEEP_DIRECT, Ordering::SeqCst);
            self.advertised.set(true);
            fence(Ordering::SeqCst);
        }
        self.e.poll_as_progress();
        true
    }

    fn word(&self) -> &'static AtomicU32 {
        &self.e.bell.word().seq
    }

    fn prepare(&self) -> u32 {
        self.e.event_waits.fetch_add(1, Ordering::Relaxed);
        let w = self.e.bell.word();
        let seen = w.seq.load(Ordering::SeqCst);
        // The rings that came so far are seen by the run below: forget them.
        let _ = w.waiting.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            Some((v | SLEEP_DIRECT | DIRECT_ASLEEP) & !DIRECT_RUNG)
        });
        self.advertised.set(true);
        // Pairs with the fence in `ring`: a peer that published before the advertisement is
        // seen by the run below, one that publishes after it finds the bits (and bumps `seq`
        // if it wakes us, so the wait that follows returns at once).
        fence(Ordering::SeqCst);
        self.e.poll_as_progress();
        seen
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let e = self.e;
        if self.advertised.get() {
            e.event_waits.fetch_add(1, Ordering::Relaxed);
        }
        // A waiter that advertised, or took a linger over, leaves SLEEP_DIRECT behind: it
        // lingers again, bounded as any linger. (Left without a linger, the bit would make
        // rings only mark DIRECT_RUNG, with nobody to run them or to wake the progress thread.)
        if self.advertised.get() || self.took_linger {
            // Keep SLEEP_DIRECT: later rings only mark DIRECT_RUNG.
            let was =
                e.bell.word().waiting.fetch_and(!(DIRECT_ASLEEP | DIRECT_RUNG), Ordering::SeqCst);
            e.linger.since_ns.store(now_ns(), Ordering::SeqCst);
            e.linger.active.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if e.linger.forever.load(Ordering::SeqCst) {
                // Nobody would bound the linger: give the rings back now (running what rang
                // since the `fetch_and` above).
                end_linger(e);
            }
            if was & DIRECT_RUNG != 0 {
                // A ring came after our last run: what it announced is ours to run, whether or
                // not the linger goes on. (The bit was taken above: nobody else will see it.)
                e.poll_as_progress();
            }
        }
        e.direct_busy.store(false, Ordering::Release);
    }
}

/// Ends a linger, if one lasts, and runs what rang during it. Later rings wake the progress
/// thread again.
fn end_linger(e: &Engine) {
    if !e.linger.active.swap(false, Ordering::SeqCst) {
        return; // ended already, or a waiter took the role
    }
    let bits = SLEEP_DIRECT | DIRECT_ASLEEP | DIRECT_RUNG;
    let was = e.bell.word().waiting.fetch_and(!bits, Ordering::SeqCst);
    if was & DIRECT_RUNG != 0 {
        e.poll_as_progress();
    }
}

/// The progress thread's check (each time it wakes): a linger older than `LINGER_MAX` ends.
pub(super) fn end_stale_linger(e: &Engine) {
    let l = &e.linger;
    if l.active.load(Ordering::SeqCst) {
        let age = now_ns().saturating_sub(l.since_ns.load(Ordering::SeqCst));
        if age >= LINGER_MAX.as_nanos() as u64 {
            end_linger(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::engine::engine;
    use crate::runtime::fdqueue::FdQueue;

    /// The direct role, once no other test holds it.
    fn role(e: &'static Engine) -> Direct {
        loop {
            match e.direct() {
                Some(d) => break d,
                None => std::thread::yield_now(),
            }
        }
    }

    /// A waiter whose event is there already never advertises; if it took a linger over, it
    /// must hand it back. Otherwise SLEEP_DIRECT stays set with no linger to bound it: rings
    /// then only mark DIRECT_RUNG, and the progress thread may sleep without a timeout.
    #[test]
    fn a_waiter_that_never_waits_hands_the_linger_back() {
        let e: &'static Engine = engine().expect("engine");
        let waiting = &e.bell().word().waiting;
        // A linger as a waiter leaves it: SLEEP_DIRECT advertised, nobody in the role.
        let first = role(e);
        waiting.fetch_or(SLEEP_DIRECT, Ordering::SeqCst);
        e.linger.since_ns.store(now_ns(), Ordering::SeqCst);
        e.linger.active.store(true, Ordering::SeqCst);
        drop(first); // took no linger, advertised nothing: leaves the state as set
        let q = FdQueue::new().expect("queue");
        q.push(5u32);
        let d = role(e);
        assert_eq!(q.pop_wait_via(Some(&d)), Ok(5), "the event was there: no wait");
        assert!(!d.advertised.get());
        drop(d);
        // Whoever holds the role next took a linger over, or the bit is gone (the progress
        // thread ended the linger meanwhile); never the bit alone.
        let next = role(e);
        let alone = waiting.load(Ordering::SeqCst) & SLEEP_DIRECT != 0 && !next.took_linger;
        drop(next);
        assert!(!alone, "SLEEP_DIRECT left advertised without a linger");
    }
}
