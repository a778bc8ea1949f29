//! CQ moderation (`ibv_modify_cq`, `cq_mod_caps`): an armed CQ raises its completion event once
//! `cq_count` completions that would raise it have arrived, or `cq_period` microseconds after the
//! first of them, whichever comes first, as hardware moderates its event queue. A count of 0 or
//! 1 with a period of 0 (the default) raises the event on the first completion. The period runs
//! on the progress thread's timers, whose resolution is a millisecond (epoll): an event held for
//! a period is raised between the period and the next millisecond after it.

use super::cq::Cq;
use crate::errno::{Errno, Result};
use crate::sys::*;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// `cq_mod_caps.max_cq_count`: the field is 16 bits, as in mlx5.
pub const MAX_CQ_COUNT: u16 = u16::MAX;
/// `cq_mod_caps.max_cq_period` in microseconds (mlx5's limit, 12 bits).
pub const MAX_CQ_PERIOD: u16 = 0xfff;

/// The moderation of one CQ and the completions it holds back from the current arm.
#[derive(Default)]
pub struct Moderation {
    count: u16,
    period: u16,
    /// Completions that would have raised the event since the CQ was armed.
    pending: u32,
    /// A period timer runs for this arm.
    timing: bool,
    /// Bumped whenever the event is raised: a timer of an earlier arm does nothing.
    generation: u64,
}

/// What a completion that would raise the armed CQ's event does.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Raise the event now.
    Raise,
    /// Hold it back (the count is not reached; a timer runs, or none is wanted).
    Hold,
    /// Hold it back and start the period's timer for this generation.
    Time(Duration, u64),
}

impl Moderation {
    /// `ibv_modify_cq`'s checks: `EINVAL` for an empty or unknown `attr_mask` (libibverbs and
    /// the kernel) or a period beyond `cq_mod_caps`.
    pub fn modify(&mut self, a: &ibv_modify_cq_attr) -> Result<()> {
        let moderate = ibv_cq_attr_mask::IBV_CQ_ATTR_MODERATE.0;
        if a.attr_mask == 0 || a.attr_mask & !moderate != 0 {
            return Err(Errno::EINVAL);
        }
        let m = &a.moderate;
        // Every 16-bit count is within MAX_CQ_COUNT.
        if m.cq_period > MAX_CQ_PERIOD {
            return Err(Errno::EINVAL);
        }
        self.count = m.cq_count;
        self.period = m.cq_period;
        Ok(())
    }

    /// A completion that would raise the armed CQ's event has arrived.
    pub fn on_event(&mut self) -> Decision {
        if self.count <= 1 && self.period == 0 {
            return Decision::Raise;
        }
        self.pending = self.pending.saturating_add(1);
        if self.count != 0 && self.pending >= self.count as u32 {
            return Decision::Raise;
        }
        if self.period == 0 || self.timing {
            return Decision::Hold;
        }
        self.timing = true;
        Decision::Time(Duration::from_micros(self.period as u64), self.generation)
    }

    /// Whether a period timer of `generation` raises the event now.
    pub fn expired(&self, generation: u64) -> bool {
        generation == self.generation && self.pending > 0
    }

    /// The event was raised (or the CQ disarmed): the next arm starts afresh.
    pub fn raised(&mut self) {
        self.pending = 0;
        self.timing = false;
        self.generation = self.generation.wrapping_add(1);
    }
}

/// Starts the period timer of `generation` on the progress thread. Without one (it could not
/// be started) the event is raised at once rather than held forever.
pub fn start_timer(cq: &Arc<Cq>, after: Duration, generation: u64) {
    let w: Weak<Cq> = Arc::downgrade(cq);
    match crate::runtime::engine::engine() {
        Ok(e) => e.after(
            after,
            Box::new(move || {
                if let Some(cq) = w.upgrade() {
                    cq.moderation_expired(generation);
                }
            }),
        ),
        Err(_) => cq.moderation_expired(generation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mask: u32, count: u16, period: u16) -> ibv_modify_cq_attr {
        ibv_modify_cq_attr {
            attr_mask: mask,
            moderate: ibv_moderate_cq { cq_count: count, cq_period: period },
        }
    }

    #[test]
    fn modify_checks() {
        let mut m = Moderation::default();
        let moderate = ibv_cq_attr_mask::IBV_CQ_ATTR_MODERATE.0;
        assert_eq!(m.modify(&attr(0, 4, 10)), Err(Errno::EINVAL));
        assert_eq!(
            m.modify(&attr(ibv_cq_attr_mask::IBV_CQ_ATTR_RESERVED.0, 4, 10)),
            Err(Errno::EINVAL)
        );
        assert_eq!(m.modify(&attr(moderate | 4, 4, 10)), Err(Errno::EINVAL));
        assert_eq!(m.modify(&attr(moderate, 4, MAX_CQ_PERIOD + 1)), Err(Errno::EINVAL));
        assert_eq!(m.modify(&attr(moderate, MAX_CQ_COUNT, MAX_CQ_PERIOD)), Ok(()));
    }

    #[test]
    fn default_raises_at_once() {
        let mut m = Moderation::default();
        assert_eq!(m.on_event(), Decision::Raise);
        let mut m = Moderation::default();
        m.modify(&attr(1, 1, 100)).unwrap();
        assert_eq!(m.on_event(), Decision::Raise);
    }

    #[test]
    fn count_and_period() {
        let mut m = Moderation::default();
        m.modify(&attr(1, 3, 10)).unwrap();
        let g = m.generation;
        assert_eq!(m.on_event(), Decision::Time(Duration::from_micros(10), g));
        assert_eq!(m.on_event(), Decision::Hold);
        assert!(m.expired(g));
        assert_eq!(m.on_event(), Decision::Raise);
        m.raised();
        assert!(!m.expired(g), "a timer of an earlier arm does nothing");
        // Count only: held until the count, no timer.
        m.modify(&attr(1, 2, 0)).unwrap();
        assert_eq!(m.on_event(), Decision::Hold);
        assert_eq!(m.on_event(), Decision::Raise);
        m.raised();
        // Period only.
        m.modify(&attr(1, 0, 5)).unwrap();
        assert!(matches!(m.on_event(), Decision::Time(..)));
        assert_eq!(m.on_event(), Decision::Hold);
    }
}
