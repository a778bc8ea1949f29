//! CM event channels and events.
//!
//! The channel fd is an eventfd in semaphore mode: one count per queued event. It is readable
//! while events are pending, and a caller that sets `O_NONBLOCK` on it gets `EAGAIN`, as with
//! the kernel's rdma_cm device. An event handed out is a heap `rdma_cm_event` with its own
//! private-data buffer, valid until `rdma_ack_cm_event`.

use super::id::CmId;
use crate::errno::{Errno, Result};
use crate::handle::{CBox, Registry};
use crate::runtime::fdqueue::FdQueue;
use crate::sys::*;
use once_cell::sync::Lazy;
use std::sync::Arc;

/// rdma-core's RDMA_MAX_PRIVATE_DATA: the buffer size of every event's private data.
pub const EVENT_PRIVATE: usize = 256;

/// Work done when the application fetches an event.
pub type OnFetch = Box<dyn FnOnce(&mut rdma_cm_event) + Send + Sync>;

pub struct Event {
    pub ev: CBox<rdma_cm_event>,
    pub private: Box<[u8; EVENT_PRIVATE]>,
    /// The id the event is counted against until it is acknowledged.
    pub owner: Arc<CmId>,
    /// The new id of a CONNECT_REQUEST, kept alive with the event.
    pub new_id: Option<Arc<CmId>>,
    /// Runs when the application fetches the event (multicast joins attach the QP then).
    pub on_fetch: Option<OnFetch>,
}

pub struct EventChannel {
    pub raw: CBox<rdma_event_channel>,
    /// Queued events; its descriptor is the channel's `fd`.
    queue: FdQueue<Event>,
}

pub static CHANNELS: Lazy<Registry<EventChannel>> = Lazy::new(Registry::default);
pub static EVENTS: Lazy<Registry<Event>> = Lazy::new(Registry::default);

impl EventChannel {
    pub fn new() -> Result<Arc<EventChannel>> {
        let queue = FdQueue::new()?;
        let mut raw: CBox<rdma_event_channel> = CBox::zeroed();
        raw.init().fd = queue.fd();
        Ok(Arc::new(EventChannel { raw, queue }))
    }

    /// Creates a channel handed to the application.
    pub fn create() -> Result<*mut rdma_event_channel> {
        let ch = EventChannel::new()?;
        let p = ch.raw.as_ptr();
        CHANNELS.insert(p as usize, ch);
        Ok(p)
    }

    pub fn fd(&self) -> i32 {
        self.queue.fd()
    }

    /// Queues an event and makes the fd readable.
    pub fn post(&self, e: Event) {
        self.queue.push(e);
    }

    /// Waits for the next event (or `EAGAIN` on a non-blocking fd) and hands it out.
    pub fn get(&self) -> Result<*mut rdma_cm_event> {
        let mut e = self.queue.pop_wait()?;
        if let Some(f) = e.on_fetch.take() {
            // The event is ours and not yet visible to the application.
            f(e.ev.init());
        }
        let p = e.ev.as_ptr();
        EVENTS.insert(p as usize, Arc::new(e));
        Ok(p)
    }

    /// Removes and returns the queued events of `id` (it is destroyed or moves to another
    /// channel).
    pub fn take_events_of(&self, id: &Arc<CmId>) -> Vec<Event> {
        self.queue.take(|e| Arc::ptr_eq(&e.owner, id))
    }
}

/// Whether an event of `id` is handed out and not yet acknowledged.
pub fn has_unacked(id: &CmId) -> bool {
    EVENTS.values().iter().any(|e| std::ptr::eq(Arc::as_ptr(&e.owner), id))
}

/// Acknowledges (frees) an event handed out by `get`.
pub fn ack(p: *mut rdma_cm_event) -> Result<()> {
    let e = EVENTS.remove(p).ok_or(Errno::EINVAL)?;
    e.owner.event_acked();
    Ok(())
}
