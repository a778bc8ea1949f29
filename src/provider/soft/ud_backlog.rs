//! UD sends that found a destination on this host full, held in send-queue order until the
//! progress thread's retries get them through or their grace runs out.
//!
//! A unix datagram queue holds only `net.unix.max_dgram_qlen` messages (10 by default) until
//! the receiver's progress thread drains it. Sleeping inside `ibv_post_send` until it does
//! stalled the caller up to 200 ms per datagram; instead the request stays outstanding here (it
//! keeps its send queue entry, so a sender that outruns its receivers meets `ENOMEM` from a full
//! send queue, as on hardware) and completes when its datagram is handed over, or dropped, as
//! InfiniBand drops, once `GRACE` has passed. Drops are counted in [`DROPPED_FULL`].
//!
//! Completions stay in send-queue order: while anything is held, every later request queues
//! behind it, even one that could go at once. When room appears, the held datagrams for one
//! destination go together, several messages in one unix datagram (`datagram::messages`).

use super::datagram::{COALESCE_BYTES, COALESCE_MESSAGES};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a datagram waits for room at a full destination before it is dropped.
pub const GRACE: Duration = Duration::from_millis(200);
/// The first retry's delay; each retry that finds no room doubles it, up to `MAX_WAIT`.
const FIRST_WAIT: Duration = Duration::from_micros(20);
const MAX_WAIT: Duration = Duration::from_millis(5);

/// Datagrams this process dropped because a destination's queue stayed full for `GRACE`.
pub static DROPPED_FULL: AtomicU64 = AtomicU64::new(0);

/// One held send request.
pub struct Held {
    pub wr_id: u64,
    pub seq: u64,
    /// It completes with a work completion (signaled, or the QP signals all).
    pub signaled: bool,
    pub byte_len: u32,
    /// Local destinations (QPNs) its datagram has not reached yet; empty once it may complete.
    pub dsts: Vec<u32>,
    /// The datagram: header and payload.
    pub bytes: Vec<u8>,
    pub deadline: Instant,
}

/// A QP's held requests and its retry pacing.
#[derive(Default)]
pub struct Backlog {
    q: VecDeque<Held>,
    wait: Duration,
    /// A retry is scheduled.
    pub armed: bool,
}

impl Backlog {
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Holds `h` behind everything already held.
    pub fn hold(&mut self, h: Held) {
        if self.q.is_empty() {
            self.wait = FIRST_WAIT;
        }
        self.q.push_back(h);
    }

    /// One retry at `now`: offers the held datagrams, front first, to the destinations they
    /// still lack (`offer(d, parts)` says how many of the messages `parts` destination `d`
    /// took, the first ones; 0 means still full). A run of held datagrams for the same one
    /// destination is offered together, up to [`COALESCE_BYTES`] (a socket's full queue is
    /// counted in datagrams, not bytes, so they go as one; a ring takes what fits). Requests
    /// that are through, or past their deadline (their remaining destinations counted as
    /// dropped), go to `done` in order; the first that must wait stops the pass. Returns the
    /// delay before the next retry, or `None` when nothing is held.
    pub fn retry(
        &mut self,
        now: Instant,
        mut offer: impl FnMut(u32, &[&[u8]]) -> usize,
        mut done: impl FnMut(Held),
    ) -> Option<Duration> {
        let mut progressed = false;
        while let Some(front) = self.q.front() {
            if let [d] = front.dsts[..] {
                let run = self.run_for(d);
                let parts: Vec<&[u8]> = self.q.iter().take(run).map(|h| &h.bytes[..]).collect();
                let took = offer(d, &parts).min(run);
                if took > 0 {
                    self.q.iter_mut().take(took).for_each(|h| h.dsts.clear());
                    progressed = true;
                }
            } else if let Some(h) = self.q.front_mut() {
                // Several destinations (a multicast group's members here): each its own.
                let before = h.dsts.len();
                let Held { dsts, bytes, .. } = h;
                dsts.retain(|&d| offer(d, &[&bytes[..]]) == 0);
                progressed |= dsts.len() < before;
            }
            let Some(h) = self.q.front() else { break };
            if !h.dsts.is_empty() && now < h.deadline {
                break;
            }
            DROPPED_FULL.fetch_add(h.dsts.len() as u64, Ordering::Relaxed);
            progressed = true;
            if let Some(h) = self.q.pop_front() {
                done(h);
            }
        }
        if self.q.is_empty() {
            return None;
        }
        // Room appeared: look again soon; none: back off.
        self.wait = if progressed { FIRST_WAIT } else { (self.wait * 2).min(MAX_WAIT) };
        Some(self.wait)
    }

    /// How many held datagrams from the front go to `d` alone and fit one datagram together
    /// (at least the front's).
    fn run_for(&self, d: u32) -> usize {
        let mut bytes = 0;
        let mut n = 0;
        for h in &self.q {
            let fits = n == 0 || (bytes + h.bytes.len() <= COALESCE_BYTES && n < COALESCE_MESSAGES);
            if h.dsts[..] != [d] || !fits {
                break;
            }
            bytes += h.bytes.len();
            n += 1;
        }
        n.max(1)
    }

    /// Takes every held request (the QP moved to ERR or RESET).
    pub fn take_all(&mut self) -> VecDeque<Held> {
        self.armed = false;
        std::mem::take(&mut self.q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(wr_id: u64, dsts: &[u32], deadline: Instant) -> Held {
        Held {
            wr_id,
            seq: wr_id,
            signaled: true,
            byte_len: 4,
            dsts: dsts.to_vec(),
            bytes: vec![wr_id as u8; 4],
            deadline,
        }
    }

    /// Datagrams offered: each destination with the first byte of each message in it.
    type Offered = Vec<(u32, Vec<u8>)>;

    /// A retry where every destination has room: the next delay, the datagrams offered (each
    /// destination with the first byte of each message in it), and the requests completed.
    fn retry_with_room(b: &mut Backlog, now: Instant) -> (Option<Duration>, Offered, Vec<u64>) {
        let (mut sent, mut out) = (Vec::new(), Vec::new());
        let w = b.retry(
            now,
            |d, parts| {
                sent.push((d, parts.iter().map(|p| p[0]).collect()));
                parts.len()
            },
            |h| out.push(h.wr_id),
        );
        (w, sent, out)
    }

    #[test]
    fn completes_in_order_and_stops_at_the_first_that_must_wait() {
        let now = Instant::now();
        let later = now + GRACE;
        let mut b = Backlog::default();
        b.hold(held(1, &[7], later));
        b.hold(held(2, &[], later)); // went out at post time, completes after 1
        b.hold(held(3, &[8], later));
        let mut out = Vec::new();
        // QP 7 is full: nothing completes, and the next retry backs off.
        let w1 = b.retry(now, |d, p| if d != 7 { p.len() } else { 0 }, |h| out.push(h.wr_id));
        assert!(out.is_empty());
        let w2 = b.retry(now, |d, p| if d != 7 { p.len() } else { 0 }, |h| out.push(h.wr_id));
        assert!(w2 > w1);
        // Room at 7: all three go, in order, and nothing is held.
        let (w, seen, done) = retry_with_room(&mut b, now);
        out.extend(done);
        assert_eq!(w, None);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(seen, [(7, vec![1]), (8, vec![3])]);
        assert!(b.is_empty());
    }

    /// Held datagrams for one destination go as one datagram, in order, as many as fit.
    #[test]
    fn a_run_for_one_destination_goes_together() {
        let now = Instant::now();
        let mut b = Backlog::default();
        let big = COALESCE_BYTES / 2;
        for (wr_id, d) in [(1, 7), (2, 7), (3, 7), (4, 8), (5, 7)] {
            b.hold(held(wr_id, &[d], now + GRACE));
        }
        // Two that cannot share a datagram: 6 goes alone after the first five.
        let mut h = held(6, &[7], now + GRACE);
        h.bytes = vec![6; big + 1];
        b.hold(h);
        let mut h = held(7, &[7], now + GRACE);
        h.bytes = vec![7; big + 1];
        b.hold(h);
        let (w, sent, out) = retry_with_room(&mut b, now);
        assert_eq!(w, None);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(sent, [(7, vec![1, 2, 3]), (8, vec![4]), (7, vec![5, 6]), (7, vec![7])]);
    }

    /// A ring with room for part of a run takes its first messages: those complete, in order,
    /// and the rest stay held.
    #[test]
    fn a_run_taken_in_part_completes_its_first_messages() {
        let now = Instant::now();
        let mut b = Backlog::default();
        for wr_id in 1..=5 {
            b.hold(held(wr_id, &[7], now + GRACE));
        }
        let (mut out, mut room) = (Vec::new(), 2);
        let take = |_, p: &[&[u8]]| {
            let n = p.len().min(room);
            room -= n;
            n
        };
        assert!(b.retry(now, take, |h| out.push(h.wr_id)).is_some());
        assert_eq!(out, [1, 2]);
        assert_eq!(b.take_all().len(), 3);
    }

    /// A full destination refuses the whole run: nothing of it completes.
    #[test]
    fn a_refused_run_stays_held_whole() {
        let now = Instant::now();
        let mut b = Backlog::default();
        b.hold(held(1, &[7], now + GRACE));
        b.hold(held(2, &[7], now + GRACE));
        let mut out = Vec::new();
        assert!(b.retry(now, |_, _| 0, |h| out.push(h.wr_id)).is_some());
        assert!(out.is_empty());
        assert_eq!(b.take_all().len(), 2);
    }

    #[test]
    fn a_multicast_datagram_is_offered_only_to_members_that_lack_it() {
        let now = Instant::now();
        let mut b = Backlog::default();
        b.hold(held(1, &[1, 2, 3], now + GRACE));
        let mut offers = Vec::new();
        b.retry(
            now,
            |d, _| {
                offers.push(d);
                usize::from(d != 2)
            },
            |_| {},
        );
        b.retry(
            now,
            |d, _| {
                offers.push(d);
                1
            },
            |_| {},
        );
        assert_eq!(offers, [1, 2, 3, 2]);
        assert!(b.is_empty());
    }

    #[test]
    fn past_its_deadline_a_datagram_is_dropped_counted_and_completed() {
        let now = Instant::now();
        let mut b = Backlog::default();
        b.hold(held(1, &[5, 6], now));
        b.hold(held(2, &[5], now + GRACE));
        let before = DROPPED_FULL.load(Ordering::Relaxed);
        let mut out = Vec::new();
        let w = b.retry(now, |d, _| usize::from(d == 6), |h| out.push((h.wr_id, h.dsts.clone())));
        // Request 1 (deadline passed) completes with destination 5 dropped; 2 still waits.
        assert_eq!(out, [(1, vec![5])]);
        assert!(w.is_some());
        assert!(DROPPED_FULL.load(Ordering::Relaxed) > before);
        assert_eq!(b.take_all().len(), 1);
        assert!(b.is_empty());
    }
}
