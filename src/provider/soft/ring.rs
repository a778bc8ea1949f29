//! Single-producer single-consumer rings of fixed-size slots in shared memory.
//!
//! A message is cut into segments, one per slot, each with a header. The producer advances
//! `head` after writing a slot (release); the consumer advances `tail` after copying a slot out
//! (release). Both counters only grow, so `head - tail` is the number of full slots.
//!
//! An RC segment is also sealed: its header's last word, stored (release) after the rest of the
//! slot, names the sequence number it was written for ([`Ring::seal_and_publish`]). The RC
//! consumer waits on the seal of the slot at its tail, not on `head` ([`Ring::sealed`]), so a
//! segment reaches it in the cache lines of the slot alone: `head`'s line stays with the
//! producer. (UD records span slots and keep to `head`, see `ud_ring`.)

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const SLOT_SIZE: usize = 4096;
pub const SLOTS: u64 = 64;
pub const SEG_DATA: usize = SLOT_SIZE - std::mem::size_of::<SegHdr>();

/// First segment of a message.
pub const SEG_FIRST: u32 = 1;
/// Last segment of a message.
pub const SEG_LAST: u32 = 2;
/// The message carries immediate data.
pub const SEG_IMM: u32 = 4;
/// A SEND with invalidate: `imm` holds the rkey the responder invalidates.
pub const SEG_INV: u32 = 8;
/// The request's solicited event bit (a SEND, or a WRITE with immediate).
pub const SEG_SOLICITED: u32 = 16;

/// Transport opcodes of a segment.
pub const OP_SEND: u32 = 0;
pub const OP_WRITE: u32 = 1;
pub const OP_READ_REQ: u32 = 2;
pub const OP_READ_RESP: u32 = 3;
pub const OP_CMP_SWAP: u32 = 4;
pub const OP_FETCH_ADD: u32 = 5;
pub const OP_ATOMIC_RESP: u32 = 6;
/// A negative acknowledgement: the request ending at `req_seq` failed with `status`.
pub const OP_NAK: u32 = 7;

/// The header of one slot: one cache line, so that a small message costs the consumer two
/// (header, payload) and a 64-byte one fits the second.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct SegHdr {
    /// Total length of the message (the same in every segment).
    pub msg_len: u32,
    /// Bytes of payload in this slot.
    pub seg_len: u32,
    pub flags: u32,
    pub opcode: u32,
    /// Immediate data, in network byte order as given by the sender; a NAK's work completion
    /// status for the requester.
    pub imm: u32,
    pub rkey: u32,
    /// Target address of this segment's payload (one-sided operations).
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    /// Responses and NAKs: the ring sequence number just past the request they answer.
    pub req_seq: u64,
    /// XRC requests: the SRQ number at the target that the request names.
    pub xrc_srqn: u32,
    /// [`seal_of`] the slot's sequence number once the slot is complete; written by
    /// [`Ring::seal_and_publish`] alone (a header is written with 0 here, which no seal is).
    pub seal: u32,
}

const _: () = assert!(std::mem::size_of::<SegHdr>() == 64);
const SEAL_AT: usize = std::mem::offset_of!(SegHdr, seal);

/// The seal of the segment with sequence number `seq`: never 0 (a header as written, or a
/// slot never written), and never the seal of the same slot one lap earlier.
pub fn seal_of(seq: u64) -> u32 {
    seq as u32 | 1 << 31
}

/// Control words of one direction, each on its own cache line.
#[repr(C, align(64))]
pub struct Counter {
    pub value: AtomicU64,
}

#[repr(C)]
pub struct RingCtl {
    pub head: Counter,
    pub tail: Counter,
    /// Set by an endpoint that will never touch the ring again (QP destroyed or in error).
    pub closed: Counter,
    /// Set by the consumer while a message waits for a receive (the RNR NAK): the sequence
    /// number just past its first segment, with the consumer's `min_rnr_timer` in the top byte.
    pub rnr: Counter,
    /// Set by the consumer: its QP's remote access flags (`qp_access_flags`) with
    /// `ACCESS_PUBLISHED`, which the direct path obeys (see `direct`).
    pub access: Counter,
    /// Set by the consumer: grants it has sent over the link's socket (see `direct`).
    pub grants: Counter,
}

/// Marks the consumer's access word as written.
const ACCESS_PUBLISHED: u64 = 1 << 32;
/// Bytes between the two directions' control blocks.
const CTL_STRIDE: usize = 512;
const _: () = assert!(std::mem::size_of::<RingCtl>() <= CTL_STRIDE && 2 * CTL_STRIDE <= CTL_SIZE);

/// The layout of a link's segment: two control blocks, then two slot arrays.
pub const CTL_SIZE: usize = 4096;
pub const LINK_SIZE: usize = CTL_SIZE + 2 * SLOTS as usize * SLOT_SIZE;

/// A view of one direction of a link.
pub struct Ring {
    ctl: *const RingCtl,
    slots: *mut u8,
    /// This end's last reading of the other end's counter: the producer's of `tail`, the
    /// consumer's of `head`. It is read again only when it shows no room (no data), so the
    /// cache line the other end writes moves once per batch rather than once per slot. Only
    /// the owning QP uses it, under its lock; the counters only grow, so a stale reading
    /// under-counts and is always safe.
    seen: AtomicU64,
}

// SAFETY: the ring points into shared memory kept mapped by its owner (the link), and all
// cross-thread access follows the SPSC protocol through atomics.
unsafe impl Send for Ring {}
// SAFETY: shared references reach the mapping only through the SPSC protocol's atomics and
// the slots each end owns by that protocol.
unsafe impl Sync for Ring {}

impl Ring {
    /// Direction `dir` (0 or 1) of a link mapped at `base`.
    ///
    /// # Safety
    /// `base` points at a mapping of at least `LINK_SIZE` bytes that outlives the ring.
    pub unsafe fn new(base: *mut u8, dir: usize) -> Ring {
        // SAFETY: offsets are within LINK_SIZE per the contract.
        unsafe {
            Ring {
                ctl: base.add(dir * CTL_STRIDE).cast(),
                slots: base.add(CTL_SIZE + dir * SLOTS as usize * SLOT_SIZE),
                seen: AtomicU64::new(0),
            }
        }
    }

    fn ctl(&self) -> &RingCtl {
        // SAFETY: ctl points into the live mapping (see new()); RingCtl is only atomics.
        unsafe { &*self.ctl }
    }

    pub fn head(&self) -> u64 {
        self.ctl().head.value.load(Ordering::Acquire)
    }

    pub fn tail(&self) -> u64 {
        self.ctl().tail.value.load(Ordering::Acquire)
    }

    /// Free slots, as seen by the producer. The peer writes `tail`: a tail past our head
    /// (impossible from an honest consumer) leaves no room rather than a wrapped count.
    /// At least one when there is room, `tail` is read only when the last reading shows none.
    pub fn free(&self) -> u64 {
        self.free_for(1)
    }

    /// [`Ring::free`] for a producer that needs `want` slots: `tail` is read again when the
    /// last reading shows fewer.
    pub fn free_for(&self, want: u64) -> u64 {
        let head = self.ctl().head.value.load(Ordering::Relaxed);
        let room = |tail: u64| SLOTS.saturating_sub(head.wrapping_sub(tail));
        let free = room(self.seen.load(Ordering::Relaxed));
        if free >= want {
            return free;
        }
        let tail = self.tail();
        self.seen.store(tail, Ordering::Relaxed);
        room(tail)
    }

    /// Full slots, as seen by the consumer; `None` when the peer's `head` is behind the tail or
    /// more than `SLOTS` ahead of it, which no honest producer publishes (a protocol violation).
    /// `head` is read only when the last reading shows nothing more.
    pub fn available(&self) -> Option<u64> {
        let tail = self.ctl().tail.value.load(Ordering::Relaxed);
        let full = self.seen.load(Ordering::Relaxed).wrapping_sub(tail);
        if full != 0 && full <= SLOTS {
            return Some(full);
        }
        let head = self.head();
        self.seen.store(head, Ordering::Relaxed);
        let full = head.wrapping_sub(tail);
        (full <= SLOTS).then_some(full)
    }

    /// The slot with sequence number `seq`: its header and payload area.
    pub fn slot(&self, seq: u64) -> (*mut SegHdr, *mut u8) {
        let i = (seq % SLOTS) as usize;
        // SAFETY: i < SLOTS, so the slot lies within the mapping.
        let p = unsafe { self.slots.add(i * SLOT_SIZE) };
        // SAFETY: the payload follows the header within the same slot.
        (p.cast(), unsafe { p.add(std::mem::size_of::<SegHdr>()) })
    }

    /// RC producer: seals the slot at `head`, whose header and payload are written, and
    /// publishes it.
    pub fn seal_and_publish(&self) {
        let seq = self.ctl().head.value.load(Ordering::Relaxed);
        self.seal_word(seq).store(seal_of(seq), Ordering::Release);
        self.publish(1);
    }

    /// RC consumer: whether the slot with sequence number `seq` holds its segment (acquire:
    /// then its header and payload may be read).
    pub fn sealed(&self, seq: u64) -> bool {
        self.seal_word(seq).load(Ordering::Acquire) == seal_of(seq)
    }

    fn seal_word(&self, seq: u64) -> &AtomicU32 {
        let (hp, _) = self.slot(seq);
        // SAFETY: the seal is an aligned u32 inside the slot's header, in the live mapping;
        // both ends only ever touch it atomically (headers are written with 0 there before
        // the seal, which no seal equals).
        unsafe { AtomicU32::from_ptr(hp.cast::<u8>().add(SEAL_AT).cast()) }
    }

    /// Producer: makes the next `n` slots visible.
    pub fn publish(&self, n: u64) {
        let c = &self.ctl().head.value;
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Consumer: releases the next `n` slots.
    pub fn consume(&self, n: u64) {
        let c = &self.ctl().tail.value;
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Consumer: the message starting at `seq` waits for a receive; `timer` is min_rnr_timer.
    pub fn set_rnr(&self, seq: u64, timer: u8) {
        let v = (seq.wrapping_add(1) & ((1 << 56) - 1)) | ((timer as u64) << 56);
        self.ctl().rnr.value.store(v, Ordering::Release);
    }

    /// Producer: `Some((seq, timer))` if the message starting at `seq` got an RNR NAK and is
    /// still not consumed. The peer writes this word: callers only use `seq` to select one of
    /// their own requests and `timer` to index the 32-entry delay table.
    pub fn rnr(&self) -> Option<(u64, u8)> {
        let v = self.ctl().rnr.value.load(Ordering::Acquire);
        let seq = (v & ((1 << 56) - 1)).checked_sub(1)?;
        (seq >= self.tail()).then_some((seq, (v >> 56) as u8))
    }

    /// Consumer: the remote rights its QP gives the producer's requests.
    pub fn set_peer_access(&self, flags: u32) {
        self.ctl().access.value.store(ACCESS_PUBLISHED | flags as u64, Ordering::Release);
    }

    /// Producer: the rights the consumer published, if it did.
    pub fn peer_access(&self) -> Option<u32> {
        let v = self.ctl().access.value.load(Ordering::Acquire);
        (v & ACCESS_PUBLISHED != 0).then_some(v as u32)
    }

    /// Consumer: one more grant sent (after sending it, before releasing the request's slot).
    pub fn grant_sent(&self) {
        self.ctl().grants.value.fetch_add(1, Ordering::Release);
    }

    /// Producer: grants the consumer says it has sent.
    pub fn grants_sent(&self) -> u64 {
        self.ctl().grants.value.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.ctl().closed.value.store(1, Ordering::Release);
    }

    pub fn is_closed(&self) -> bool {
        self.ctl().closed.value.load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    fn link_memory() -> Vec<Page> {
        (0..LINK_SIZE / 4096).map(|_| Page([0; 4096])).collect()
    }

    /// The producer's and the consumer's views of direction 0 of `mem`, as two processes have.
    fn ends(mem: &mut [Page]) -> (Ring, Ring) {
        // SAFETY: mem is LINK_SIZE bytes, page-aligned like a mapping, and outlives the rings
        // (each test keeps it until they are dropped).
        unsafe { (Ring::new(mem.as_mut_ptr().cast(), 0), Ring::new(mem.as_mut_ptr().cast(), 0)) }
    }

    #[test]
    fn a_head_out_of_range_is_refused() {
        let mut mem = link_memory();
        let (p, c) = ends(&mut mem);
        assert_eq!(c.available(), Some(0));
        p.publish(SLOTS);
        assert_eq!(c.available(), Some(SLOTS));
        assert_eq!(p.free(), 0);
        p.publish(1 << 40);
        assert_eq!(c.available(), Some(SLOTS), "the slots already seen are still there");
        c.consume(1);
        assert_eq!(c.available(), Some(SLOTS - 1));
        c.consume(SLOTS - 1);
        assert_eq!(c.available(), None, "read again: too far ahead");
        p.ctl().head.value.store(5, Ordering::Relaxed);
        c.consume(6); // head behind tail
        assert_eq!(c.available(), None);
    }

    #[test]
    fn a_tail_past_the_head_leaves_no_room() {
        let mut mem = link_memory();
        let (p, c) = ends(&mut mem);
        p.publish(SLOTS);
        assert_eq!(p.free(), 0);
        c.consume(SLOTS + 3); // a consumer releasing what was never published
        assert_eq!(p.free(), 0);
    }

    #[test]
    fn a_slot_is_sealed_for_its_own_lap_only() {
        let mut mem = link_memory();
        let (p, c) = ends(&mut mem);
        assert!(!c.sealed(0), "a slot never written holds no seal");
        let (hp, _) = p.slot(0);
        // SAFETY: slot 0 is in the mapping and the producer's; the consumer reads it only sealed.
        unsafe { hp.write_volatile(SegHdr { msg_len: 7, ..SegHdr::default() }) };
        assert!(!c.sealed(0), "a header written but not sealed");
        p.seal_and_publish();
        assert!(c.sealed(0));
        assert_eq!(p.head(), 1);
        assert!(!c.sealed(1) && !c.sealed(SLOTS), "the next slot, and slot 0's next lap");
        for _ in 1..SLOTS {
            p.seal_and_publish();
        }
        assert!(!c.sealed(SLOTS), "slot 0 still holds its first lap's segment");
        // SAFETY: hp points at slot 0's header inside the ring's mapping, which the test owns
        // (the slot's second lap is the same memory).
        unsafe { hp.write_volatile(SegHdr::default()) };
        assert!(!c.sealed(0) && !c.sealed(SLOTS), "rewritten: neither lap's seal");
        p.seal_and_publish();
        assert!(c.sealed(SLOTS) && !c.sealed(0));
        assert_ne!(seal_of(u32::MAX as u64), 0, "the seal never wraps to 0");
    }

    /// Each end reads the other's counter once per batch, and never misses what it published.
    #[test]
    fn counters_are_read_again_only_when_the_last_reading_is_used_up() {
        let mut mem = link_memory();
        let (p, c) = ends(&mut mem);
        assert_eq!(p.free(), SLOTS);
        p.publish(3);
        assert_eq!(c.available(), Some(3));
        p.publish(2); // not seen until the three are consumed
        assert_eq!(c.available(), Some(3));
        c.consume(3);
        assert_eq!(c.available(), Some(2));
        c.consume(2);
        assert_eq!(c.available(), Some(0));
        // The producer fills the ring on its first reading of the tail, then reads it again.
        assert_eq!(p.free(), SLOTS - 5);
        p.publish(SLOTS - 5);
        assert_eq!(p.free(), 5, "the five consumed slots, read again");
        p.publish(5);
        assert_eq!(p.free(), 0);
        assert_eq!(c.available(), Some(SLOTS));
        c.consume(1);
        assert_eq!(p.free(), 1);
        // One free slot was last seen; a producer that needs two reads the tail again.
        c.consume(2);
        assert_eq!(p.free(), 1, "the reading is kept while it shows room");
        assert_eq!(p.free_for(2), 3);
    }
}
