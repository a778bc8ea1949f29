//! The per-process progress engine: one thread asleep in `epoll_wait` that runs the work the
//! application is not polling for (incoming messages, acknowledgements, CM sockets).
//!
//! The doorbell rule: a peer wakes us only when our shared `waiting` word says a thread of ours
//! sleeps, so a busy application pays no system call per message. While the application keeps
//! polling CQs (the poll epoch moved in the last [`APP_POLLING_GRACE`]) and no CQ is armed for
//! an event, the thread naps 1 ms at a time without advertising sleep; otherwise it advertises
//! sleep and blocks until woken.
//!
//! **One wake-up per event.** A thread blocked in `ibv_get_cq_event` (and so
//! `rdma_get_*_comp`) is itself the thread a peer's ring wakes ([`Direct`]): it advertises
//! `SLEEP_DIRECT` and sleeps in `FUTEX_WAIT` on the shared `seq` word; a ring that finds the bit
//! takes it, bumps `seq` and `FUTEX_WAKE`s it, and the woken thread runs the rings and finds its
//! event, with no trip through the progress thread. Otherwise the ring takes `SLEEP_EPOLL` and
//! sends the datagram that wakes the progress thread. A futex wake-up between processes costs
//! a few microseconds; the datagram and `epoll_wait` path several times that.

use super::bell::SLEEP_EPOLL;
pub use super::bell::{Bell, BellWord};
pub use super::direct::Direct;
use super::direct::Linger;
use super::spin::Spell;
use crate::errno::{check, Result};
use crate::runtime::lock;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Something the engine drives; `progress` returns whether it did any work.
pub trait Pollable: Send + Sync {
    fn progress(&self) -> bool;

    /// The progress thread's routine pass: may leave out an object that an application
    /// thread has progressed since the last such pass (it is being looked after; a thread
    /// competing for it only costs both of them). The pass before the thread sleeps, and every
    /// direct waiter's, calls [`progress`](Pollable::progress).
    fn progress_unattended(&self) -> bool {
        self.progress()
    }
}

/// A callback for readiness events on a watched descriptor.
pub type Handler = Arc<dyn Fn(u32) + Send + Sync>;

/// A callback for a parkable watch (see [`Engine::watch_parkable`]): called with the event
/// mask, or 0 to ask whether a parked descriptor is to be taken up again; `true` when it
/// handled the descriptor (the watch is re-armed), `false` to park it.
pub type ParkHandler = Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// How long the progress thread sleeps at most while an application busy-polls or a socket is
/// parked (ms): the time it takes to notice an application that stopped polling without
/// saying so (arming a CQ or running out of work says so, see `unpark_soon`).
const APP_POLLING_CHECK: Duration = Duration::from_millis(1);
/// How long after the application's last CQ poll it still counts as polling (the thread naps
/// rather than advertise sleep): a polling thread preempted for a few milliseconds on a loaded
/// machine must not make its peers ring a doorbell per message until it runs again. Meanwhile
/// the naps still take what nobody polled for, one pass per millisecond.
const APP_POLLING_GRACE: Duration = Duration::from_millis(10);
/// A parkable watch: readable or hung up, reported once until re-armed.
const PARKABLE_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32;

/// Bumped by every CQ poll ([`note_poll`]): tells the engine the application is actively
/// polling.
pub static POLL_EPOCH: AtomicU64 = AtomicU64::new(0);

/// A CQ poll, for the engine. Only the change matters (the engine compares two readings), so
/// a load and a store do, with no atomic read-modify-write on every poll: two threads that race
/// may count one poll between them, which still changes the value.
pub fn note_poll() {
    POLL_EPOCH.store(POLL_EPOCH.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}
/// Number of CQs armed for a completion event (the application waits on a channel).
pub static ARMED_CQS: AtomicUsize = AtomicUsize::new(0);

const BELL_TOKEN: u64 = u64::MAX;

/// A callback the progress thread runs once its time has come.
pub type Timer = Box<dyn FnOnce() + Send>;

pub struct Engine {
    /// The earliest time some QP needs its timers looked at (RNR and transport retries).
    /// Kept to the millisecond (rounded up): a stream re-arms its retransmission timer with
    /// every ACK, and waking for each stale one costs the thread's CPU.
    deadline: Mutex<Option<std::time::Instant>>,
    /// The times of [`Engine::wake_by`] still to come, to the nanosecond, earliest first. All
    /// of them, not only the earliest: one asked for while an earlier one is due would be lost
    /// when that one is served (the QP that asked does not ask twice for one time).
    soon: Mutex<BinaryHeap<Reverse<Instant>>>,
    timers: Mutex<Vec<(Instant, Timer)>>,
    epfd: OwnedFd,
    pub(super) bell: Bell,
    handlers: Mutex<HashMap<RawFd, Handler>>,
    parkable: Mutex<HashMap<RawFd, ParkHandler>>,
    /// Parkable descriptors whose watch is disarmed until their handler takes them up.
    parked: Mutex<Vec<RawFd>>,
    pollables: Mutex<Vec<Weak<dyn Pollable>>>,
    /// A thread holds the direct-wait slot ([`Engine::direct`]).
    pub(super) direct_busy: AtomicBool,
    /// The direct role kept after a direct wait (see `direct`).
    pub(super) linger: Linger,
    /// The progress thread naps without advertising sleep (an application polls).
    napping: AtomicBool,
    /// The progress thread sleeps with no timeout: a deadline set meanwhile needs a kick
    /// (see [`Engine::wake_by`]).
    sleeps_unbounded: AtomicBool,
    /// Bumped by every blocking wait for a completion event: an application that waits for
    /// events is not busy-polling, even if it polls its CQ between events, so the thread does
    /// not nap (a nap would only be ended by a kick when the CQ is armed again).
    pub(super) event_waits: AtomicU64,
}

/// The engine of one process generation (see `fork`): a forked child gets its own.
struct Slot {
    generation: u64,
    engine: Arc<Engine>,
}

static ENGINE: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
/// Held while an engine starts; a fork child clears it (the parent's holder is not there).
pub(super) static START_LOCK: AtomicBool = AtomicBool::new(false);

thread_local! {
    static ON_PROGRESS_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// `true` on the progress thread, which must never wait for a peer, and on a [`Direct`]
/// waiter while it does the progress thread's work.
pub fn on_progress_thread() -> bool {
    ON_PROGRESS_THREAD.with(|c| c.get())
}

/// This process's engine if it has started (none: there are no rings to wait on).
pub fn running() -> Option<&'static Arc<Engine>> {
    current()
}

fn current() -> Option<&'static Arc<Engine>> {
    let p = ENGINE.load(Ordering::Acquire);
    // SAFETY: slots are leaked boxes, never freed, so a non-null pointer stays valid.
    let slot = unsafe { p.as_ref() }?;
    (slot.generation == super::fork::generation()).then_some(&slot.engine)
}

/// This process's engine, started on first use (and again in a forked child). A failure to
/// start (descriptors or memory exhausted) is returned, not remembered: a later call retries.
pub fn engine() -> Result<&'static Arc<Engine>> {
    if let Some(e) = current() {
        return Ok(e);
    }
    while START_LOCK.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::thread::yield_now();
    }
    let r = match current() {
        Some(e) => Ok(e),
        None => {
            super::fork::install();
            let generation = super::fork::generation();
            Engine::start().map(|engine| {
                // The previous generation's slot is leaked on purpose: its locks may be held
                // by threads that do not exist in this process.
                let slot: &'static Slot = Box::leak(Box::new(Slot { generation, engine }));
                ENGINE.store((slot as *const Slot).cast_mut(), Ordering::Release);
                &slot.engine
            })
        }
    };
    START_LOCK.store(false, Ordering::Release);
    r
}

impl Engine {
    fn start() -> Result<Arc<Engine>> {
        // SAFETY: plain epoll_create1(2) call.
        let epfd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: epfd was just created and is owned here.
        let epfd = unsafe { OwnedFd::from_raw_fd(epfd) };
        let bell = Bell::create()?;
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: BELL_TOKEN };
        // SAFETY: valid epoll fd, descriptor and event.
        check(unsafe {
            libc::epoll_ctl(epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, bell.rx_fd(), &mut ev)
        })?;
        let e = Arc::new(Engine {
            deadline: Mutex::new(None),
            soon: Mutex::new(BinaryHeap::new()),
            timers: Mutex::new(Vec::new()),
            epfd,
            bell,
            handlers: Mutex::new(HashMap::new()),
            parkable: Mutex::new(HashMap::new()),
            parked: Mutex::new(Vec::new()),
            pollables: Mutex::new(Vec::new()),
            direct_busy: AtomicBool::new(false),
            linger: Linger::default(),
            napping: AtomicBool::new(false),
            sleeps_unbounded: AtomicBool::new(false),
            event_waits: AtomicU64::new(0),
        });
        // Read here, in the call that starts the engine, not lazily on the progress thread:
        // the CPU count reads cgroup files, and descriptors a background thread opens at an
        // unpredictable moment show up in a program's own descriptor counts.
        let _ = super::spin::progress();
        let e2 = e.clone();
        std::thread::Builder::new()
            .name("rdmashim-progress".into())
            .spawn(move || e2.run())
            .map_err(crate::Errno::from)?;
        Ok(e)
    }

    pub fn bell(&self) -> &Bell {
        &self.bell
    }

    /// Wakes the progress thread unconditionally (after new work was registered).
    pub fn kick(&self) {
        self.bell.force_ring();
    }

    /// Calls `h` with the epoll event mask whenever `fd` is readable or hung up.
    pub fn watch(&self, fd: RawFd, h: Handler) -> Result<()> {
        lock(&self.handlers).insert(fd, h);
        let mut ev =
            libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, u64: fd as u64 };
        // SAFETY: valid epoll fd, descriptor and event.
        let r = check(unsafe {
            libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev)
        });
        if r.is_err() {
            lock(&self.handlers).remove(&fd);
        }
        r.map(|_| ())
    }

    /// Like [`Engine::watch`], but the handler may park the descriptor instead of handling it
    /// (one-shot readiness): the progress thread then stops waking for it and asks the handler
    /// again at least every millisecond. For a socket that a polling application reads itself,
    /// so that each datagram does not also wake the progress thread.
    pub fn watch_parkable(&self, fd: RawFd, h: ParkHandler) -> Result<()> {
        lock(&self.parkable).insert(fd, h);
        let mut ev = libc::epoll_event { events: PARKABLE_EVENTS, u64: fd as u64 };
        // SAFETY: valid epoll fd, descriptor and event.
        let r = check(unsafe {
            libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev)
        });
        if r.is_err() {
            lock(&self.parkable).remove(&fd);
        }
        r.map(|_| ())
    }

    /// An application thread reads `fd` itself from now on (it busy-polls): the progress
    /// thread stops waking for it, as if it had parked the descriptor on finding the application
    /// there first, without the wake-up that finding costs. One `epoll_ctl` when it was not
    /// parked yet.
    pub fn park(&self, fd: RawFd) {
        let mut l = lock(&self.parked);
        if !l.contains(&fd) && lock(&self.parkable).contains_key(&fd) {
            l.push(fd);
            // One-shot and no readiness asked: disarmed until re-armed (an error reported
            // meanwhile reaches the handler, which parks it again).
            let mut ev = libc::epoll_event { events: libc::EPOLLONESHOT as u32, u64: fd as u64 };
            // SAFETY: valid epoll fd and event; a descriptor no longer watched only gives an
            // error.
            unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
            drop(l);
            // A parked descriptor needs the progress thread to look at it every millisecond
            // (the application may stop polling without saying so). Pairs with the check after
            // advertising sleep in `run`: one of the two sees the other.
            fence(Ordering::SeqCst);
            if self.bell.word().waiting.load(Ordering::SeqCst) & SLEEP_EPOLL != 0 {
                self.kick();
            }
        }
    }

    /// The application no longer reads `fd`: its watch is armed again now, so what arrives (or
    /// already waits) wakes the progress thread, with no kick to make it look.
    pub fn unpark(&self, fd: RawFd) {
        let mut l = lock(&self.parked);
        if let Some(i) = l.iter().position(|&p| p == fd) {
            l.swap_remove(i);
            self.rearm(fd);
        }
    }

    /// A thread will sleep on a channel (a CQ was armed): the sockets parked for a polling
    /// application must be read by the progress thread again now, not at the next look.
    pub fn unpark_soon(&self) {
        if !lock(&self.parked).is_empty() {
            self.kick();
        }
    }

    /// A CQ was armed: a thread may now wait for its event in `poll()` on the channel fd,
    /// which only the progress thread can raise, so a nap (taken while the application polled,
    /// advertising no sleep) ends now rather than up to a millisecond later, as does parking.
    pub fn cq_armed(&self) {
        if self.napping.load(Ordering::SeqCst) {
            self.kick();
        } else {
            self.unpark_soon();
        }
    }

    /// The direct-wait slot, if no other thread holds it.
    pub fn direct(&'static self) -> Option<Direct> {
        self.direct_busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Direct::new(self))
    }

    /// Runs every pollable on this thread in the progress thread's role (it must not wait for
    /// a peer), as the progress thread does when its doorbell rings.
    pub(super) fn poll_as_progress(&self) -> bool {
        let was = ON_PROGRESS_THREAD.with(|c| c.replace(true));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.poll_all()));
        ON_PROGRESS_THREAD.with(|c| c.set(was));
        r.unwrap_or(true)
    }

    /// Arms a parkable descriptor's one-shot watch again.
    fn rearm(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: PARKABLE_EVENTS, u64: fd as u64 };
        // SAFETY: valid epoll fd and event; a descriptor no longer watched only gives an error.
        unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
    }

    /// Asks the handlers of the parked descriptors whether to take them up; whether any stays
    /// parked.
    ///
    /// The list's rule, which `park` and `unpark` keep too: a descriptor leaves the list only
    /// together with its re-arming, under the list's lock. Had a descriptor taken up here been
    /// removed later by what it was (the application may unpark and park it again meanwhile,
    /// disarming it), it could stay disarmed with nobody looking at it.
    fn check_parked(&self) -> bool {
        // The handlers are asked with the lock released (a copy is walked): an application
        // parking or unparking meanwhile must not wait for them.
        let parked = lock(&self.parked).clone();
        for fd in parked {
            let h = lock(&self.parkable).get(&fd).cloned();
            let take = h.is_none_or(|h| {
                !matches!(
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(0))),
                    Ok(false)
                )
            });
            if take {
                let mut l = lock(&self.parked);
                if let Some(i) = l.iter().position(|&p| p == fd) {
                    l.swap_remove(i);
                    self.rearm(fd); // unwatched meanwhile: harmless
                }
            }
        }
        !lock(&self.parked).is_empty()
    }

    /// Stops watching `fd`; call before closing it.
    pub fn unwatch(&self, fd: RawFd) {
        // SAFETY: removing a descriptor from our epoll set; errors (not watched) are harmless.
        unsafe {
            libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut())
        };
        lock(&self.handlers).remove(&fd);
        lock(&self.parkable).remove(&fd);
        lock(&self.parked).retain(|&p| p != fd);
    }

    /// Makes the progress thread run by `at` even if nothing else wakes it.
    pub fn wake_at(&self, at: std::time::Instant) {
        let mut d = lock(&self.deadline);
        if d.is_none_or(|cur| at < cur) {
            *d = Some(at);
            drop(d);
            self.kick();
        }
    }

    /// Makes the progress thread run at `at`, or up to a nap (1 ms) later: a kick only if it
    /// sleeps with no timeout. For work another thread will most likely do before `at` (ACKs
    /// kept back for the application's answer), where a kick would cost a system call and a
    /// thread wake-up each time for nothing.
    pub fn wake_by(&self, at: Instant) {
        {
            let mut soon = lock(&self.soon);
            let earliest = soon.peek().is_none_or(|Reverse(cur)| at < *cur);
            soon.push(Reverse(at));
            if !earliest {
                return; // the thread wakes for the earlier one, and then sees this
            }
        }
        // Pairs with the fence in `run` after it sets `sleeps_unbounded`: either it sees this
        // deadline or this sees the flag.
        fence(Ordering::SeqCst);
        if self.sleeps_unbounded.load(Ordering::SeqCst) {
            self.kick();
        }
    }

    /// Runs `f` on the progress thread once `after` has passed.
    pub fn after(&self, after: Duration, f: Timer) {
        let at = Instant::now() + after;
        lock(&self.timers).push((at, f));
        self.wake_at(at);
    }

    fn fire_timers(&self) {
        let now = Instant::now();
        let (due, next) = {
            let mut t = lock(&self.timers);
            if t.is_empty() {
                return;
            }
            let (due, rest): (Vec<_>, Vec<_>) = t.drain(..).partition(|(at, _)| *at <= now);
            *t = rest;
            (due, t.iter().map(|(at, _)| *at).min())
        };
        for (_, f) in due {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        }
        if let Some(at) = next {
            self.wake_at(at);
        }
    }

    /// Time until the earliest deadline, if one is set (see `deadline` and `soon`); a deadline
    /// reached is taken off (the pass that follows serves it).
    fn timer_timeout(&self) -> Option<Duration> {
        let now = std::time::Instant::now();
        let coarse = {
            let mut d = lock(&self.deadline);
            match *d {
                Some(at) if at <= now => {
                    *d = None;
                    Some(Duration::ZERO)
                }
                Some(at) => Some(Duration::from_millis(ceil_ms(at - now))),
                None => None,
            }
        };
        let precise = {
            let mut soon = lock(&self.soon);
            let mut reached = false;
            while soon.peek().is_some_and(|Reverse(at)| *at <= now) {
                soon.pop();
                reached = true;
            }
            if reached {
                Some(Duration::ZERO)
            } else {
                soon.peek().map(|Reverse(at)| *at - now)
            }
        };
        coarse.into_iter().chain(precise).min()
    }

    pub fn add_pollable(&self, p: Weak<dyn Pollable>) {
        lock(&self.pollables).push(p);
        self.kick();
    }

    fn poll_all(&self) -> bool {
        self.pass(false)
    }

    /// One pass over the pollables; `routine`: the progress thread's pass while awake (see
    /// [`Pollable::progress_unattended`]).
    fn pass(&self, routine: bool) -> bool {
        thread_local! {
            /// The list a pass works through, kept for its capacity (a spinning waiter passes
            /// often); a nested pass takes a new one.
            static LIST: Cell<Vec<Arc<dyn Pollable>>> = const { Cell::new(Vec::new()) };
        }
        let mut list = LIST.with(|l| l.take());
        {
            let mut l = lock(&self.pollables);
            l.retain(|w| w.strong_count() > 0);
            list.extend(l.iter().filter_map(|w| w.upgrade()));
        }
        let mut work = false;
        for p in &list {
            work |= if routine { p.progress_unattended() } else { p.progress() };
        }
        list.clear();
        LIST.with(|l| l.set(list));
        work
    }

    fn run(&self) {
        ON_PROGRESS_THREAD.with(|c| c.set(true));
        let mut last_epoch = POLL_EPOCH.load(Ordering::Relaxed);
        let mut polled_at: Option<Instant> = None;
        let mut last_waits = u64::MAX;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut spell: Option<Spell> = None;
        loop {
            let work = self.pass(true);
            let parked = self.check_parked();
            let epoch = POLL_EPOCH.load(Ordering::Relaxed);
            let waits = self.event_waits.load(Ordering::Relaxed);
            if epoch != last_epoch {
                polled_at = Some(Instant::now());
            }
            let app_polling = polled_at.is_some_and(|t| t.elapsed() < APP_POLLING_GRACE)
                && waits == last_waits
                && ARMED_CQS.load(Ordering::Relaxed) == 0;
            // An application in an event loop: a direct waiter may linger (see `direct`), and
            // this thread bounds the linger, so it never sleeps without a timeout meanwhile.
            let event_loop = waits != last_waits;
            last_epoch = epoch;
            last_waits = waits;
            let waiting = &self.bell.word().waiting;
            // Only this thread reads what comes when no application polls, waits for an event
            // or has a CQ armed (a target that spins on memory, or does other work).
            let unattended = !app_polling && !event_loop && ARMED_CQS.load(Ordering::Relaxed) == 0;
            let spins = Spell::next(&mut spell, work, unattended, super::spin::progress());
            let timeout = if work || spins {
                Some(Duration::ZERO)
            } else if app_polling {
                self.napping.store(true, Ordering::SeqCst);
                // Pairs with `cq_armed`: an arm after this is seen by the check, one before it
                // sees the flag and kicks.
                if ARMED_CQS.load(Ordering::SeqCst) == 0 {
                    Some(APP_POLLING_CHECK)
                } else {
                    Some(Duration::ZERO)
                }
            } else {
                // Only our bit: a direct waiter's may be set beside it.
                waiting.fetch_or(SLEEP_EPOLL, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if self.poll_all() {
                    waiting.fetch_and(!SLEEP_EPOLL, Ordering::SeqCst);
                    Some(Duration::ZERO)
                } else if !lock(&self.parked).is_empty()
                    || event_loop
                    || !self.linger.may_sleep_forever()
                {
                    // Parked meanwhile by an application (`park`), or a linger to bound.
                    Some(APP_POLLING_CHECK)
                } else {
                    None
                }
            };
            let timeout = if parked { Some(APP_POLLING_CHECK) } else { None }
                .into_iter()
                .chain(timeout)
                .min();
            if timeout.is_none() {
                self.sleeps_unbounded.store(true, Ordering::SeqCst);
            }
            // Pairs with `wake_by`: a deadline set before the flag was is seen here.
            fence(Ordering::SeqCst);
            let timeout = self.timer_timeout().into_iter().chain(timeout).min();
            let n = wait(self.epfd.as_raw_fd(), &mut events, timeout);
            self.sleeps_unbounded.store(false, Ordering::SeqCst);
            self.napping.store(false, Ordering::SeqCst);
            waiting.fetch_and(!SLEEP_EPOLL, Ordering::SeqCst);
            self.linger.woke();
            super::direct::end_stale_linger(self);
            self.fire_timers();
            for ev in events.iter().take(n.max(0) as usize) {
                let token = ev.u64;
                if token == BELL_TOKEN {
                    self.bell.drain();
                    continue;
                }
                let h = lock(&self.handlers).get(&(token as RawFd)).cloned();
                if let Some(h) = h {
                    let mask = ev.events;
                    // A bug in one handler must not stop progress for the whole process.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(mask)));
                    continue;
                }
                let fd = token as RawFd;
                let p = lock(&self.parkable).get(&fd).cloned();
                if let Some(p) = p {
                    let mask = ev.events;
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p(mask))) {
                        Ok(false) => {
                            let mut l = lock(&self.parked);
                            if !l.contains(&fd) {
                                l.push(fd);
                            }
                        }
                        _ => self.rearm(fd),
                    }
                }
            }
        }
    }
}

/// `epoll_wait` for `timeout` (`None`: until an event) to the nanosecond where the kernel has
/// `epoll_pwait2` (5.11), else rounded up to the millisecond; the number of events, or -1.
fn wait(epfd: RawFd, events: &mut [libc::epoll_event], timeout: Option<Duration>) -> i32 {
    static PRECISE: AtomicBool = AtomicBool::new(true);
    let max = events.len().min(i32::MAX as usize) as i32;
    if PRECISE.load(Ordering::Relaxed) {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `events` is a writable buffer of `max` entries and `tsp` is null or points
        // to a timespec that outlives the call; a null sigmask leaves the mask alone.
        let n =
            unsafe { libc::epoll_pwait2(epfd, events.as_mut_ptr(), max, tsp, std::ptr::null()) };
        if n >= 0 || crate::Errno::last_raw() != libc::ENOSYS {
            return n;
        }
        PRECISE.store(false, Ordering::Relaxed);
    }
    let ms = timeout.map_or(-1, |t| ceil_ms(t).min(i32::MAX as u64) as i32);
    // SAFETY: `events` is a writable buffer of `max` entries.
    unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max, ms) }
}

/// `t` in whole milliseconds, rounded up.
fn ceil_ms(t: Duration) -> u64 {
    t.as_micros().div_ceil(1000).min(u64::MAX as u128) as u64
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
