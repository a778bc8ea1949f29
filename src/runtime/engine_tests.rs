//! Tests of the progress engine: the direct waiter and doorbells, parked watches.

use super::*;
use crate::runtime::bell::{DIRECT_ASLEEP, DIRECT_RUNG, SLEEP_DIRECT};
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// A connected pair of non-blocking unix datagram sockets.
fn socket_pair() -> (OwnedFd, OwnedFd) {
    let mut sv = [0; 2];
    let kind = libc::SOCK_DGRAM | libc::SOCK_NONBLOCK;
    // SAFETY: socketpair(2) writes two descriptors into sv.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, sv.as_mut_ptr()) };
    assert_eq!(r, 0);
    // SAFETY: both were just created and are owned here.
    unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) }
}

fn send_byte(a: &OwnedFd) -> isize {
    // SAFETY: one byte from a valid buffer to our own socket.
    unsafe { libc::send(a.as_raw_fd(), b"x".as_ptr().cast(), 1, libc::MSG_DONTWAIT) }
}

/// Reads what waits on our socket; returns the number of datagrams read.
fn drain_socket(raw: RawFd) -> usize {
    let mut buf = [0u8; 8];
    let mut n = 0;
    // SAFETY: reading into a valid buffer from our own socket.
    while unsafe { libc::recv(raw, buf.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT) } > 0 {
        n += 1;
    }
    n
}

/// Whether `what` holds within 5 s.
fn wait_until(what: &dyn Fn() -> bool) -> bool {
    let t = Instant::now();
    while !what() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    what()
}

/// While a direct waiter is in its wait, rings go to it alone: the first wakes it, later
/// ones are only noted for it; once it left they wake the progress thread, once; a busy
/// owner gets nothing.
#[test]
fn a_ring_wakes_the_direct_waiter_before_the_progress_thread() {
    let b = Bell::create().expect("bell");
    let w = b.word();
    let pending = || {
        let mut buf = [0u8; 4];
        let rx = b.rx_fd();
        // SAFETY: receiving into a valid buffer of its length, without waiting.
        unsafe { libc::recv(rx, buf.as_mut_ptr().cast(), 4, libc::MSG_DONTWAIT) > 0 }
    };
    let direct = SLEEP_DIRECT | SLEEP_EPOLL;
    w.waiting.store(direct | DIRECT_ASLEEP, Ordering::SeqCst);
    let seq = w.seq.load(Ordering::SeqCst);
    b.ring();
    assert_eq!(w.waiting.load(Ordering::SeqCst), direct | DIRECT_RUNG);
    assert_eq!(w.seq.load(Ordering::SeqCst), seq.wrapping_add(1), "the futex word moved");
    assert!(!pending(), "no datagram for the direct waiter");
    b.ring();
    assert_eq!(w.waiting.load(Ordering::SeqCst), direct | DIRECT_RUNG, "noted once");
    assert_eq!(w.seq.load(Ordering::SeqCst), seq.wrapping_add(1), "awake: not woken again");
    assert!(!pending(), "the direct waiter runs it: no datagram");
    w.waiting.store(SLEEP_EPOLL, Ordering::SeqCst); // the waiter left
    b.ring();
    assert_eq!(w.waiting.load(Ordering::SeqCst), 0);
    assert!(pending(), "a datagram for the progress thread");
    b.ring();
    assert_eq!(w.seq.load(Ordering::SeqCst), seq.wrapping_add(1));
    assert!(!pending(), "nobody asleep: no wake-up");
}

struct Flag {
    ready: AtomicBool,
    q: Arc<crate::runtime::fdqueue::FdQueue<u32>>,
}

impl Pollable for Flag {
    fn progress(&self) -> bool {
        let ready = self.ready.swap(false, Ordering::SeqCst);
        if ready {
            self.q.push(7);
        }
        ready
    }
}

/// Takes the direct slot and waits on `q` through it, while another thread, once the waiter
/// advertises itself, runs `ready` and rings our doorbell (as a peer does after publishing).
/// Returns the slot, still held, and what the wait got.
fn wait_as_direct(
    e: &'static Engine,
    q: &crate::runtime::fdqueue::FdQueue<u32>,
    ready: impl FnOnce() + Send + 'static,
) -> (Direct, crate::errno::Result<u32>) {
    let d = loop {
        match e.direct() {
            Some(d) => break d,
            None => std::thread::yield_now(), // another test holds it
        }
    };
    let t = std::thread::spawn(move || {
        let w = e.bell().word();
        while w.waiting.load(Ordering::SeqCst) & SLEEP_DIRECT == 0 {
            std::thread::yield_now();
        }
        ready();
        e.bell().ring();
    });
    let got = q.pop_wait_via(Some(&d));
    t.join().expect("ringer");
    (d, got)
}

/// A waiter holding the direct slot, woken by a ring of our doorbell (as a peer rings it
/// after publishing), runs the pollables and takes what they produced; the advertisement
/// outlives it only by a bounded linger. Whichever thread runs the pollable, no wake-up is lost.
#[test]
fn a_direct_waiter_is_woken_by_a_ring() {
    let e = engine().expect("engine");
    let q = Arc::new(crate::runtime::fdqueue::FdQueue::new().expect("queue"));
    let f = Arc::new(Flag { ready: AtomicBool::new(false), q: q.clone() });
    let weak: Weak<dyn Pollable> = Arc::downgrade(&f) as Weak<dyn Pollable>;
    e.add_pollable(weak);
    let f2 = f.clone();
    let (d, got) = wait_as_direct(e, &q, move || f2.ready.store(true, Ordering::SeqCst));
    drop(d);
    assert_eq!(got, Ok(7));
    // The role lingers (SLEEP_DIRECT alone, see `direct`) and the progress thread ends the
    // linger within about LINGER_MAX.
    let waiting = &e.bell().word().waiting;
    assert_eq!(waiting.load(Ordering::SeqCst) & (DIRECT_ASLEEP | DIRECT_RUNG), 0);
    let bits = SLEEP_DIRECT | DIRECT_ASLEEP | DIRECT_RUNG;
    assert!(wait_until(&|| waiting.load(Ordering::SeqCst) & bits == 0), "the linger ends");
    assert!(e.direct().is_some(), "the slot is free again");
}

/// Made ready by another pollable's run (as a responder consuming a request makes its
/// requester's acknowledgement ready, and rings the shared doorbell for it).
struct Acked {
    ready: AtomicBool,
    ran: AtomicBool,
}

impl Pollable for Acked {
    fn progress(&self) -> bool {
        let ready = self.ready.swap(false, Ordering::SeqCst);
        if ready {
            self.ran.store(true, Ordering::SeqCst);
        }
        ready
    }
}

/// The request side: once made ready, it hands the waiter its item, and readies `acked`
/// and rings the doorbell (setting only `DIRECT_RUNG`, the direct waiter being in its wait).
struct Consumer {
    ready: AtomicBool,
    q: Arc<crate::runtime::fdqueue::FdQueue<u32>>,
    acked: Arc<Acked>,
}

impl Pollable for Consumer {
    fn progress(&self) -> bool {
        let ready = self.ready.swap(false, Ordering::SeqCst);
        if ready {
            self.q.push(9);
            self.acked.ready.store(true, Ordering::SeqCst);
            engine().expect("engine").bell().ring();
        }
        ready
    }
}

/// A ring that comes during the direct waiter's last run is run when the waiter leaves, also
/// when the progress thread sleeps without a timeout (the waiter then ends the linger at once).
/// The ring's bit was cleared by the waiter leaving, so nobody else would ever run it.
#[test]
fn a_ring_during_the_last_run_is_run_when_the_waiter_leaves() {
    let e = engine().expect("engine");
    let q = Arc::new(crate::runtime::fdqueue::FdQueue::new().expect("queue"));
    let acked = Arc::new(Acked { ready: AtomicBool::new(false), ran: AtomicBool::new(false) });
    let consumer =
        Arc::new(Consumer { ready: AtomicBool::new(false), q: q.clone(), acked: acked.clone() });
    // The acknowledged side first: a pass that readies it has run it already.
    e.add_pollable(Arc::downgrade(&acked) as Weak<dyn Pollable>);
    e.add_pollable(Arc::downgrade(&consumer) as Weak<dyn Pollable>);
    // Let the progress thread take the kicks of `add_pollable` and go back to sleep: then only
    // the direct waiter runs the pollables (else the progress thread may hide a lost ring).
    std::thread::sleep(Duration::from_millis(20));
    let c2 = consumer.clone();
    let (d, got) = wait_as_direct(e, &q, move || c2.ready.store(true, Ordering::SeqCst));
    assert_eq!(got, Ok(9));
    // The progress thread is about to sleep, or sleeps, without a timeout.
    e.linger.may_sleep_forever();
    drop(d);
    assert!(acked.ran.load(Ordering::SeqCst), "what rang during the last run was run");
}

/// A parked descriptor is not reported again while parked, is asked about (mask 0) while
/// parked, and is reported again once its handler takes it up and it is readable.
#[test]
fn a_parked_watch_is_asked_again_and_rearmed() {
    let e = engine().expect("engine");
    let (a, b) = socket_pair();
    let events = Arc::new(AtomicUsize::new(0));
    let checks = Arc::new(AtomicUsize::new(0));
    let park = Arc::new(AtomicBool::new(true));
    let (ev2, ch2, park2, raw) = (events.clone(), checks.clone(), park.clone(), b.as_raw_fd());
    e.watch_parkable(
        raw,
        Arc::new(move |mask| {
            if mask == 0 {
                ch2.fetch_add(1, Ordering::SeqCst);
            } else {
                ev2.fetch_add(1, Ordering::SeqCst);
            }
            if park2.load(Ordering::SeqCst) {
                return false;
            }
            drain_socket(raw);
            true
        }),
    )
    .expect("watch");
    let send = || send_byte(&a);
    send();
    assert!(wait_until(&|| events.load(Ordering::SeqCst) == 1), "reported once");
    assert!(wait_until(&|| checks.load(Ordering::SeqCst) >= 3), "asked again while parked");
    send(); // still parked: no new report
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(events.load(Ordering::SeqCst), 1, "a parked watch reports nothing");
    park.store(false, Ordering::SeqCst);
    assert!(
        wait_until(&|| {
            // Parked, it is asked at least every APP_POLLING_CHECK.
            let c = checks.load(Ordering::SeqCst);
            std::thread::sleep((3 * APP_POLLING_CHECK).max(Duration::from_millis(5)));
            checks.load(Ordering::SeqCst) == c
        }),
        "taken up: no more checks"
    );
    send();
    assert!(wait_until(&|| events.load(Ordering::SeqCst) == 2), "re-armed: reported again");
    e.unwatch(raw);
}

/// An application parks a watch itself (no report while parked, though it is still asked
/// about it) and unparks it (reported at once for what waited), any number of times; the
/// progress thread taking a descriptor up never leaves it disarmed and unlisted.
#[test]
fn an_application_parks_and_unparks_a_watch() {
    let e = engine().expect("engine");
    let (a, b) = socket_pair();
    let events = Arc::new(AtomicUsize::new(0));
    let polling = Arc::new(AtomicBool::new(false));
    let (ev2, poll2, raw) = (events.clone(), polling.clone(), b.as_raw_fd());
    e.watch_parkable(
        raw,
        Arc::new(move |_mask| {
            if poll2.load(Ordering::SeqCst) {
                return false; // the application reads it
            }
            // What the handler read counts, whether a readiness report (mask) or the progress
            // thread's look at parked descriptors (mask 0) brought it here: a look that began
            // before an unpark may take the datagram sent after it, and then its readiness is
            // gone before the progress thread's next epoll_wait.
            if drain_socket(raw) > 0 {
                ev2.fetch_add(1, Ordering::SeqCst);
            }
            true
        }),
    )
    .expect("watch");
    let send = || send_byte(&a);
    for round in 0..50 {
        let before = events.load(Ordering::SeqCst);
        polling.store(true, Ordering::SeqCst);
        e.park(raw);
        send();
        std::thread::sleep(Duration::from_micros(300));
        let seen = events.load(Ordering::SeqCst);
        assert_eq!(seen, before, "round {round}: parked, nothing reported");
        polling.store(false, Ordering::SeqCst);
        e.unpark(raw);
        // Taken up: by the unpark's re-arming, or by the progress thread's look at the
        // parked ones; either way the handler reads it (each datagram is counted once).
        let got = |n| events.load(Ordering::SeqCst) == before + n;
        assert!(wait_until(&|| got(1)), "round {round}: read once unparked");
        send();
        assert!(wait_until(&|| got(2)), "round {round}: armed");
    }
    e.unwatch(raw);
}

/// Finds its time come on the first pass at or after `at`.
struct Due {
    at: Instant,
    ran: AtomicBool,
}

impl Pollable for Due {
    fn progress(&self) -> bool {
        if Instant::now() >= self.at {
            self.ran.store(true, Ordering::SeqCst);
        }
        false
    }
}

/// `wake_by` reaches a progress thread that sleeps without a timeout (it kicks it, and the
/// thread then sleeps until the deadline): ACKs kept back for an application that never
/// answers still go. Without the kick nothing here would wake the thread again.
#[test]
fn wake_by_reaches_a_thread_asleep_without_a_timeout() {
    let e = engine().expect("engine");
    let due = Arc::new(Due { at: Instant::now() + Duration::from_millis(40), ran: false.into() });
    e.add_pollable(Arc::downgrade(&due) as Weak<dyn Pollable>);
    // Let it take the kick of `add_pollable` and go back to sleep.
    std::thread::sleep(Duration::from_millis(20));
    e.wake_by(due.at);
    assert!(wait_until(&|| due.ran.load(Ordering::SeqCst)), "the pass at the deadline ran");
}

/// The engine's wait ends by its timeout, to the microsecond where the kernel can.
#[test]
fn a_wait_ends_at_its_timeout() {
    // SAFETY: plain epoll_create1(2) call; the descriptor is owned below.
    let ep = unsafe { OwnedFd::from_raw_fd(libc::epoll_create1(libc::EPOLL_CLOEXEC)) };
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    let t = Instant::now();
    assert_eq!(wait(ep.as_raw_fd(), &mut events, Some(Duration::from_micros(300))), 0);
    assert!(t.elapsed() >= Duration::from_micros(300), "not before its timeout");
    assert_eq!(wait(ep.as_raw_fd(), &mut events, Some(Duration::ZERO)), 0);
}

/// A `wake_by` asked for while an earlier one is due is still served: the pass at the earlier
/// time does not swallow the later one (the caller does not ask twice for one time).
#[test]
fn a_later_wake_by_survives_an_earlier_one() {
    let e = engine().expect("engine");
    let now = Instant::now();
    let first = Arc::new(Due { at: now + Duration::from_millis(20), ran: false.into() });
    let second = Arc::new(Due { at: now + Duration::from_millis(60), ran: false.into() });
    e.add_pollable(Arc::downgrade(&first) as Weak<dyn Pollable>);
    e.add_pollable(Arc::downgrade(&second) as Weak<dyn Pollable>);
    std::thread::sleep(Duration::from_millis(10));
    e.wake_by(first.at);
    e.wake_by(second.at);
    assert!(wait_until(&|| first.ran.load(Ordering::SeqCst)), "the first pass ran");
    assert!(wait_until(&|| second.ran.load(Ordering::SeqCst)), "the second pass ran");
}
