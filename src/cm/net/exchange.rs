//! The reliability of one CM association, pure (no I/O, no clock): MADs travel in UD datagrams,
//! so a request that expects an answer (REQ, REP, DREQ, SIDR_REQ) is sent again each CM
//! response timeout until the peer answers or `max_cm_retries` resends have gone unanswered;
//! and a message that arrives twice (the peer resent it because our answer was lost) is not
//! delivered again but gets our answer to it again (only an answer: resending anything else
//! could make two peers echo each other forever).
//!
//! A request we have not answered yet (the application has not called `rdma_accept`) that
//! comes again is answered with an MRA ("I need more time", as the kernel's rdma_cm sends for
//! every request it hands to user space), and a requester that gets an MRA waits the service
//! timeout it names before resending, so an application may take minutes to accept.

use crate::cm::wire::{attr, MAD_LEN};
use std::net::SocketAddr;
use std::time::Duration;

/// The CM response timeout we announce and use (IBA encoding: 4.096 µs × 2^value): ~1.07 s.
pub const RESPONSE_TIMEOUT: u8 = 18;
/// Resends of an unanswered request before the association gives up (so a vanished peer is
/// noticed within (1 + MAX_CM_RETRIES) response timeouts, ~9.7 s; the kernel's rdma_cm uses 15,
/// ~17 s with its timeout). Enough that a lossy link (10% each way) practically never fails.
pub const MAX_CM_RETRIES: u8 = 8;
/// The service timeout our MRAs announce (~68.7 s, the kernel rdma_cm's CMA_CM_MRA_SETTING).
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// The duration an IBA timeout exponent stands for.
pub fn timeout_of(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// One MAD sent, as it went out (the RoCEv2 packet is rebuilt from it on resend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    pub mad: [u8; MAD_LEN],
    pub to: SocketAddr,
}

#[derive(Clone, Copy, Debug)]
struct Awaiting {
    sent: Sent,
    left: u8,
    /// How long each resend waits: the response timeout, plus the service timeout of the
    /// peer's MRA once one came.
    wait: Duration,
}

/// What to do with a message received from the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// New: hand it to the id.
    Deliver,
    /// A duplicate: send our last message again (the peer did not get it).
    Resend(Box<Sent>),
    /// A duplicate with nothing to answer.
    Drop,
    /// A request again that we have not answered yet: answer it with an MRA.
    NotYet,
}

/// What to do when a retry timer fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnTimer {
    /// The request was answered, or re-armed since: nothing.
    Stale,
    /// Send it again and re-arm the timer.
    Resend(Box<Sent>),
    /// The budget is spent: the peer is gone.
    GiveUp,
}

/// The exchange state of one association.
#[derive(Debug, Default)]
pub struct Exchange {
    awaiting: Option<Awaiting>,
    /// Bumped whenever `awaiting` changes, so older timers know they are stale.
    epoch: u64,
    /// Attribute ids received so far: each CM message comes once per association.
    seen: Vec<u16>,
    /// Our last message, if it answers a message of the peer: (that message's attribute, it).
    last_answer: Option<(u16, Sent)>,
}

impl Exchange {
    /// Records a message sent, and the attribute of the peer's message it answers (if any).
    /// If it expects an answer, returns the epoch its retry timer must carry (arm one response
    /// timeout from now).
    pub fn sent(
        &mut self,
        s: Sent,
        answers: Option<u16>,
        expects_answer: bool,
        retries: u8,
    ) -> Option<u64> {
        // A message that answers nothing (DREQ after our RTU) keeps the last answer: a REP
        // resent because our RTU was lost still gets the RTU again.
        if let Some(a) = answers {
            self.last_answer = Some((a, s));
        }
        self.epoch += 1;
        if expects_answer {
            let wait = timeout_of(RESPONSE_TIMEOUT);
            self.awaiting = Some(Awaiting { sent: s, left: retries, wait });
            Some(self.epoch)
        } else {
            self.awaiting = None;
            None
        }
    }

    /// A message with attribute `attr` arrived from the peer.
    pub fn received(&mut self, attr: u16) -> Verdict {
        if self.seen.contains(&attr) {
            return match self.last_answer {
                Some((a, s)) if a == attr => Verdict::Resend(Box::new(s)),
                _ if attr == attr::REQ => Verdict::NotYet,
                _ => Verdict::Drop,
            };
        }
        self.seen.push(attr);
        if self.awaiting.take().is_some() {
            self.epoch += 1;
        }
        Verdict::Deliver
    }

    /// The retry timer armed with `epoch` fired.
    pub fn timer(&mut self, epoch: u64) -> OnTimer {
        if epoch != self.epoch {
            return OnTimer::Stale;
        }
        match &mut self.awaiting {
            None => OnTimer::Stale,
            Some(a) if a.left == 0 => {
                self.awaiting = None;
                self.epoch += 1;
                OnTimer::GiveUp
            }
            Some(a) => {
                a.left -= 1;
                OnTimer::Resend(Box::new(a.sent))
            }
        }
    }

    /// The peer sent an MRA for our request, naming its service timeout (IBA exponent): the
    /// next resend waits that much longer, and so do the ones after it. The returned epoch is
    /// for the timer to re-arm (after [`Exchange::wait`]); `None` if nothing waits.
    pub fn mra(&mut self, service_timeout: u8) -> Option<u64> {
        let a = self.awaiting.as_mut()?;
        a.wait = timeout_of(RESPONSE_TIMEOUT) + timeout_of(service_timeout);
        self.epoch += 1;
        Some(self.epoch)
    }

    /// How long the retry timer of the waiting request runs.
    pub fn wait(&self) -> Duration {
        self.awaiting.map_or(timeout_of(RESPONSE_TIMEOUT), |a| a.wait)
    }

    /// `true` while a request waits for its answer.
    pub fn awaiting(&self) -> bool {
        self.awaiting.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(b: u8) -> Sent {
        Sent { mad: [b; MAD_LEN], to: "10.0.0.2:4791".parse().unwrap() }
    }

    #[test]
    fn unanswered_request_is_resent_then_given_up() {
        let mut x = Exchange::default();
        let e = x.sent(sent(1), None, true, 2).unwrap();
        assert_eq!(x.timer(e), OnTimer::Resend(Box::new(sent(1))));
        assert_eq!(x.timer(e), OnTimer::Resend(Box::new(sent(1))));
        assert_eq!(x.timer(e), OnTimer::GiveUp);
        assert_eq!(x.timer(e), OnTimer::Stale);
        assert!(!x.awaiting());
    }

    #[test]
    fn a_request_again_before_our_answer_gets_an_mra_then_the_answer() {
        let mut x = Exchange::default();
        assert_eq!(x.received(attr::REQ), Verdict::Deliver);
        // The application has not accepted yet: "not yet" (an MRA), never delivered again.
        assert_eq!(x.received(attr::REQ), Verdict::NotYet);
        x.sent(sent(7), Some(attr::REQ), true, 3);
        assert_eq!(x.received(attr::REQ), Verdict::Resend(Box::new(sent(7))));
        // Other duplicates with nothing to answer are still dropped.
        let mut y = Exchange::default();
        assert_eq!(y.received(attr::DREQ), Verdict::Deliver);
        assert_eq!(y.received(attr::DREQ), Verdict::Drop);
    }

    #[test]
    fn an_mra_stretches_every_later_wait_and_keeps_the_budget() {
        let mut x = Exchange::default();
        let e = x.sent(sent(1), None, true, 1).unwrap();
        assert_eq!(x.wait(), timeout_of(RESPONSE_TIMEOUT));
        let e2 = x.mra(MRA_SERVICE_TIMEOUT).unwrap();
        // The timer armed before the MRA is stale; the new one waits the service timeout more.
        assert_eq!(x.timer(e), OnTimer::Stale);
        let long = timeout_of(RESPONSE_TIMEOUT) + timeout_of(MRA_SERVICE_TIMEOUT);
        assert_eq!(x.wait(), long);
        assert!(long > Duration::from_secs(60));
        assert_eq!(x.timer(e2), OnTimer::Resend(Box::new(sent(1))));
        assert_eq!(x.wait(), long);
        assert_eq!(x.timer(e2), OnTimer::GiveUp);
        // Nothing waits: an MRA changes nothing.
        assert_eq!(x.mra(MRA_SERVICE_TIMEOUT), None);
    }

    #[test]
    fn an_answer_stops_the_retries() {
        let mut x = Exchange::default();
        let e = x.sent(sent(1), None, true, 3).unwrap();
        assert_eq!(x.received(attr::REP), Verdict::Deliver);
        assert_eq!(x.timer(e), OnTimer::Stale);
    }

    #[test]
    fn a_message_without_answer_arms_nothing() {
        let mut x = Exchange::default();
        let e = x.sent(sent(1), None, true, 3).unwrap();
        assert_eq!(x.sent(sent(2), None, false, 3), None);
        assert_eq!(x.timer(e), OnTimer::Stale);
    }

    #[test]
    fn a_duplicate_gets_the_last_message_again_and_is_not_delivered() {
        // Passive side: REQ delivered, REP sent (awaiting RTU)...
        let mut x = Exchange::default();
        assert_eq!(x.received(attr::REQ), Verdict::Deliver);
        let e = x.sent(sent(7), Some(attr::REQ), true, 3).unwrap();
        // ...a resent REQ while the REP still awaits its RTU: the REP again, nothing delivered.
        assert_eq!(x.received(attr::REQ), Verdict::Resend(Box::new(sent(7))));
        assert_eq!(x.received(attr::RTU), Verdict::Deliver);
        assert_eq!(x.timer(e), OnTimer::Stale);
        // Active side: REP delivered, RTU sent; the REP again (our RTU was lost).
        let mut a = Exchange::default();
        a.sent(sent(1), None, true, 3);
        assert_eq!(a.received(attr::REP), Verdict::Deliver);
        a.sent(sent(2), Some(attr::REP), false, 3);
        assert_eq!(a.received(attr::REP), Verdict::Resend(Box::new(sent(2))));
        // Then we disconnect at once; the REP comes again: the RTU again, not the DREQ.
        a.sent(sent(3), None, true, 3);
        assert_eq!(a.received(attr::REP), Verdict::Resend(Box::new(sent(2))));
    }

    #[test]
    fn only_answers_are_resent() {
        // We sent DREQ and got DREP; the peer disconnects too and sends DREP again: our DREQ
        // is not an answer to DREP, so nothing goes back (no echo between the two).
        let mut x = Exchange::default();
        x.sent(sent(1), None, true, 3);
        assert_eq!(x.received(attr::DREP), Verdict::Deliver);
        assert_eq!(x.received(attr::DREP), Verdict::Drop);
        // A DREQ answered by DREP: a repeated DREQ gets the DREP again.
        let mut y = Exchange::default();
        assert_eq!(y.received(attr::DREQ), Verdict::Deliver);
        y.sent(sent(3), Some(attr::DREQ), false, 3);
        assert_eq!(y.received(attr::DREQ), Verdict::Resend(Box::new(sent(3))));
        assert_eq!(y.received(attr::RTU), Verdict::Deliver);
        assert_eq!(y.received(attr::RTU), Verdict::Drop);
    }

    #[test]
    fn timeout_encoding() {
        assert_eq!(timeout_of(0), Duration::from_nanos(4096));
        let t = timeout_of(RESPONSE_TIMEOUT);
        assert!(t > Duration::from_secs(1) && t < Duration::from_millis(1100));
    }
}
