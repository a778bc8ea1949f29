//! Same-host UD without a system call per datagram: a shared-memory ring per (sender QP,
//! receiver QP) pair, set up by the first datagram between them.
//!
//! Setup, over the receiver's datagram socket (which that first datagram travels by anyway):
//! 1. the sender makes a ring (a memfd holding [`ring::Ring`] direction 0) and sends `OFFER`
//!    with it;
//! 2. the receiver maps it, keeps it idle, and answers `ACCEPT` with its process doorbell;
//! 3. the sender, under its QP lock, sends `START` on the socket, and from then on writes the
//!    ring and rings the doorbell (which costs a system call only when the receiver sleeps).
//!
//! A socket is first in, first out per sender, and the receiver reads a ring only after its
//! `START`, so datagrams keep their order across the switch. A receiver that refuses (too many
//! rings, a segment it cannot map) sends no `ACCEPT`, and the sender stays on the socket.
//!
//! A record is the datagram's bytes as the socket would carry them (a [`UdHdr`], then the
//! payload) laid over one slot, or two for a payload longer than [`SLOT_SIZE`] less the header.
//! Everything in a ring is the peer's and untrusted: a header is copied out and checked (magic,
//! length, destination) before anything else is read, and the payload is copied out before it
//! is delivered.
//!
//! Teardown: each end marks the ring closed when its QP goes (`Drop`). A sender that finds it
//! closed goes back to the socket; a receiver drops it once drained. A sender that finds the
//! ring full asks the socket whether the receiver still exists: an empty datagram that is
//! refused means it is gone, and the datagram counts as delivered and lost, as on the socket.

use super::datagram::{UdHdr, HDR_LEN, MCAST_QPN, UD_MTU};
use super::link::qp_name;
use super::ring::{Ring, LINK_SIZE, SLOT_SIZE};
use crate::errno::Errno;
use crate::runtime::bell::Bell;
use crate::runtime::shm::Shm;
use crate::runtime::unix::{self, Pod};
use crate::runtime::{engine::engine, fork};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Rings a QP sends into / receives from, at most: beyond, the socket carries the datagrams.
pub const MAX_RINGS: usize = 128;
/// Records a receiver takes from one ring per call: a flooding sender cannot hold it.
const MAX_RECORDS: usize = 64;
/// How often a sender whose ring stays full asks whether the receiver still exists.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long a sender waits for the answer to its `OFFER` before it offers again (the answer
/// is read by its progress thread, which a busy machine may keep waiting).
const RESEND: Duration = Duration::from_secs(1);

/// A setup message (on the receiver's or the sender's socket).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Ctl {
    magic: u32,
    kind: u32,
    from_qpn: u32,
    to_qpn: u32,
}

// SAFETY: repr(C) integers only.
unsafe impl Pod for Ctl {}

const CTL_MAGIC: u32 = 0x5244_5552; // "RDUR"
const OFFER: u32 = 1;
const ACCEPT: u32 = 2;
const START: u32 = 3;

/// A setup message in a received datagram `b`, if it is one (a datagram of UD messages is
/// never this short: a header alone is [`HDR_LEN`] bytes).
pub fn is_setup(b: &[u8]) -> bool {
    b.len() == std::mem::size_of::<Ctl>()
        && Ctl::from_bytes(b).is_some_and(|c| c.magic == CTL_MAGIC)
}

/// Whether a ring into QP `qpn` may carry the message with header `h`: one for that QP, or a
/// multicast member's copy (whose header names the group, which the receiver checks it is
/// attached to). Both ends apply it: the sender to choose the ring, the receiver to drop a ring
/// that carries anything else.
fn for_ring_of(h: &UdHdr, qpn: u32) -> bool {
    h.dst_qpn == qpn || h.dst_qpn == MCAST_QPN
}

/// Slots a record of `len` payload bytes takes.
fn slots_for(len: usize) -> u64 {
    if HDR_LEN + len <= SLOT_SIZE {
        1
    } else {
        2
    }
}

/// The memory of a slot: `SLOT_SIZE` bytes (a slot's header area and its payload area).
fn slot_bytes(ring: &Ring, seq: u64) -> *mut u8 {
    ring.slot(seq).0.cast()
}

/// One ring and the segment that holds it; closed when dropped by the process that made it.
struct Segment {
    /// The sender keeps the descriptor (to offer the ring again); the receiver closes its own.
    shm: Shm,
    ring: Ring,
    generation: u64,
}

impl Segment {
    fn new(shm: Shm) -> Segment {
        // SAFETY: the segment is LINK_SIZE bytes (created or checked by Shm::map) and lives in
        // the same Segment as the ring.
        let ring = unsafe { Ring::new(shm.ptr(), 0) };
        Segment { shm, ring, generation: fork::generation() }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // A forked child's copy belongs to the parent's QP: it must leave the ring alone.
        if self.generation == fork::generation() {
            self.ring.close();
        }
    }
}

/// What an offer to a destination came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// How many of the messages were taken, the first ones.
    pub count: usize,
    /// The destination no longer exists (what was taken is lost with it).
    pub gone: bool,
}

impl Taken {
    fn by(count: usize) -> Taken {
        Taken { count, gone: false }
    }
}

/// What a sending QP knows of one destination.
enum Out {
    /// A ring made for it; the `OFFER` went at the instant given (`None`: not yet, the
    /// receiver's queue was full). The receiver's doorbell comes with its `ACCEPT`.
    Offered(Segment, Option<Instant>),
    /// Accepted; our `START` still waits for room in the receiver's queue.
    Starting(Segment, Bell),
    /// Running; with when we last asked the socket whether the receiver still exists.
    Ready(Segment, Bell, Option<Instant>),
    /// No ring: the receiver refused one, or we have too many.
    Socket,
}

/// A UD QP's rings towards its destinations (under the QP lock).
#[derive(Default)]
pub struct Senders {
    out: HashMap<u32, Out>,
}

impl Senders {
    /// Offers the messages `msgs` (each a header and its payload; `parts`, the same bytes as
    /// one socket datagram) from our socket `sock` (QPN `me`) to `dst`: through its ring when
    /// one runs (as many as fit), else through the socket (all or none), moving the ring's
    /// setup on. How many were taken, the first ones (0: no room now, hold them and try
    /// again), and whether `dst` was found gone (those taken are lost with it).
    pub fn offer(
        &mut self,
        sock: RawFd,
        me: u32,
        dst: u32,
        msgs: &[(UdHdr, &[u8])],
        parts: &[&[u8]],
    ) -> Taken {
        if msgs.is_empty() || msgs.iter().any(|(h, _)| !for_ring_of(h, dst)) {
            return by_socket(sock, dst, parts, msgs.len().max(1));
        }
        loop {
            match self.out.get_mut(&dst) {
                Some(Out::Ready(seg, bell, probed)) if !seg.ring.is_closed() => {
                    let n = write(&seg.ring, msgs);
                    if n > 0 {
                        bell.ring();
                        return Taken::by(n);
                    }
                    // No room. A receiver that is gone never makes any: its socket says so
                    // (asked now and then: the question is a datagram the receiver reads).
                    let now = Instant::now();
                    if probed.is_some_and(|t| now.duration_since(t) < PROBE_EVERY) {
                        return Taken::by(0);
                    }
                    *probed = Some(now);
                    if unix::send_dgram(sock, &qp_name(dst), &[]) != Err(Errno::ECONNREFUSED) {
                        return Taken::by(0);
                    }
                    self.out.remove(&dst);
                    // Lost with their receiver, as on the socket.
                    return Taken { count: msgs.len(), gone: true };
                }
                Some(Out::Ready(..)) => {
                    self.out.remove(&dst); // the receiver closed it: back to the socket
                    return by_socket(sock, dst, parts, msgs.len());
                }
                Some(Out::Starting(..)) => {
                    self.start(sock, me, dst); // Ready, Socket, or Starting still
                    if matches!(self.out.get(&dst), Some(Out::Starting(..))) {
                        return by_socket(sock, dst, parts, msgs.len());
                    }
                }
                Some(Out::Offered(seg, sent)) => {
                    let r = by_socket(sock, dst, parts, msgs.len());
                    // Offered (again) once a datagram went, when the offer could not go or no
                    // answer came for a while (a full queue at either end loses the message).
                    let now = Instant::now();
                    if r.count > 0
                        && !r.gone
                        && sent.is_none_or(|t| now.duration_since(t) >= RESEND)
                    {
                        match send_offer(sock, me, dst, seg) {
                            Ok(()) => *sent = Some(now),
                            Err(e) if e == Errno::EAGAIN => {}
                            Err(_) => {
                                self.out.insert(dst, Out::Socket);
                            }
                        }
                    }
                    return r;
                }
                Some(Out::Socket) => return by_socket(sock, dst, parts, msgs.len()),
                None => {
                    // The first datagram to `dst`: a ring is made for it and offered behind it.
                    let shm = (self.out.len() < MAX_RINGS).then(|| Shm::create(LINK_SIZE).ok());
                    let next = match shm.flatten() {
                        Some(shm) => Out::Offered(Segment::new(shm), None),
                        None => Out::Socket,
                    };
                    self.out.insert(dst, next);
                }
            }
        }
    }

    /// The receiver `from` accepted our ring with its doorbell `fds`: `START` goes on the
    /// socket, and the ring carries what follows (the caller holds the QP lock, so no send
    /// slips between the two).
    pub fn accepted(&mut self, sock: RawFd, me: u32, from: u32, fds: Vec<OwnedFd>) {
        let Some(Out::Offered(..)) = self.out.get(&from) else { return };
        let Some(Out::Offered(seg, _)) = self.out.remove(&from) else { return };
        let bell = match <[OwnedFd; 2]>::try_from(fds) {
            Ok([shm, tx]) => Bell::from_fds(shm, tx),
            Err(_) => Err(Errno::EINVAL),
        };
        let Ok(bell) = bell else {
            self.out.insert(from, Out::Socket);
            return;
        };
        self.out.insert(from, Out::Starting(seg, bell));
        self.start(sock, me, from);
    }

    /// Sends `START` to `dst` (accepted): the ring runs once it went.
    fn start(&mut self, sock: RawFd, me: u32, dst: u32) {
        let start = Ctl { magic: CTL_MAGIC, kind: START, from_qpn: me, to_qpn: dst };
        match unix::send_dgram(sock, &qp_name(dst), &[start.as_bytes()]) {
            Err(e) if e == Errno::EAGAIN => {} // tried again at the next send
            r => {
                let next = match (r, self.out.remove(&dst)) {
                    (Ok(()), Some(Out::Starting(seg, bell))) => Out::Ready(seg, bell, None),
                    _ => Out::Socket,
                };
                self.out.insert(dst, next);
            }
        }
    }
}

/// `parts` (`count` messages) as one datagram by the socket: how many went (all or none; all
/// if the receiver is gone, lost with it).
fn by_socket(sock: RawFd, dst: u32, parts: &[&[u8]], count: usize) -> Taken {
    match unix::send_dgram(sock, &qp_name(dst), parts) {
        Err(e) if e == Errno::EAGAIN => Taken::by(0),
        Err(e) if e == Errno::ECONNREFUSED => Taken { count, gone: true },
        _ => Taken::by(count),
    }
}

/// Sends `OFFER` with the ring `seg` to `dst`.
fn send_offer(sock: RawFd, me: u32, dst: u32, seg: &Segment) -> crate::errno::Result<()> {
    let offer = Ctl { magic: CTL_MAGIC, kind: OFFER, from_qpn: me, to_qpn: dst };
    let fd = seg.shm.fd()?.as_raw_fd();
    unix::send_dgram_fds(sock, &qp_name(dst), &[offer.as_bytes()], &[fd])
}

/// Writes the first of `msgs` that fit into `ring`: how many.
fn write(ring: &Ring, msgs: &[(UdHdr, &[u8])]) -> usize {
    let free = ring.free_for(msgs.iter().map(|(_, p)| slots_for(p.len())).sum());
    let (mut need, mut n) = (0, 0);
    for (_, p) in msgs {
        if need + slots_for(p.len()) > free {
            break;
        }
        need += slots_for(p.len());
        n += 1;
    }
    if n == 0 {
        return 0;
    }
    let mut seq = ring.head();
    for (h, payload) in &msgs[..n] {
        let first = payload.len().min(SLOT_SIZE - HDR_LEN);
        let s0 = slot_bytes(ring, seq);
        // SAFETY: slot `seq` is free (counted above) and SLOT_SIZE bytes long: the header and
        // `first` payload bytes fit it; the rest (at most UD_MTU - first, below SLOT_SIZE)
        // goes to the next slot, also free. Sources are valid for their lengths.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_bytes().as_ptr(), s0, HDR_LEN);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), s0.add(HDR_LEN), first);
            if payload.len() > first {
                let s1 = slot_bytes(ring, seq + 1);
                std::ptr::copy_nonoverlapping(
                    payload.as_ptr().add(first),
                    s1,
                    payload.len() - first,
                );
            }
        }
        seq += slots_for(payload.len());
    }
    ring.publish(need);
    n
}

/// A ring a receiving QP reads.
struct Inbound {
    seg: Segment,
    from: u32,
    /// `START` came: everything the sender sent by the socket before it has been read.
    started: bool,
}

/// A UD QP's rings from its senders and its receive buffer (under the QP's reading lock:
/// one reader at a time keeps datagrams in order).
#[derive(Default)]
pub struct Receivers {
    pub buf: Vec<u8>,
    rings: Vec<Inbound>,
    /// When a read of the socket last found something.
    socket_data_at: Option<Instant>,
}

/// After the socket last had something, how long a polling application keeps reading it at
/// every poll (datagrams still come that way: before a ring starts, with too many rings).
const SOCKET_WARM: Duration = Duration::from_millis(2);

impl Receivers {
    /// Whether a polling application reads the socket on this poll: only while datagrams
    /// come that way. A quiet socket is the progress thread's, which watches it and is woken by
    /// what arrives (and whose read makes the socket warm again), so senders on rings cost a
    /// polling receiver no system call at all.
    pub fn socket_due(&mut self) -> bool {
        match self.socket_data_at {
            Some(t) if t.elapsed() < SOCKET_WARM => true,
            _ => {
                self.socket_data_at = None;
                false
            }
        }
    }

    /// A read of the socket found something.
    pub fn socket_had_data(&mut self) {
        self.socket_data_at = Some(Instant::now());
    }

    /// A setup message `b` (see [`is_setup`]) came to our socket `sock` (QPN `me`) with
    /// descriptors `fds`. An `ACCEPT` is the sending side's: it is returned (the receiver's
    /// QPN and doorbell) for [`Senders::accepted`] under the QP lock.
    pub fn setup(
        &mut self,
        sock: RawFd,
        me: u32,
        b: &[u8],
        fds: Vec<OwnedFd>,
    ) -> Option<(u32, Vec<OwnedFd>)> {
        let c = Ctl::from_bytes(b)?;
        if c.to_qpn != me {
            return None;
        }
        match c.kind {
            OFFER => self.offered(sock, me, c.from_qpn, fds),
            START => {
                if let Some(r) = self.rings.iter_mut().find(|r| r.from == c.from_qpn) {
                    r.started = true;
                }
            }
            ACCEPT => return Some((c.from_qpn, fds)),
            _ => {}
        }
        None
    }

    /// Maps the ring `from` offers and answers with our doorbell. An offer repeated before its
    /// `START` (our answer was lost, or slow to be read) is the same ring: answered again. A
    /// started ring offered again is replaced (its QP was destroyed and its QPN used again).
    fn offered(&mut self, sock: RawFd, me: u32, from: u32, mut fds: Vec<OwnedFd>) {
        let waiting = self.rings.iter().any(|r| r.from == from && !r.started);
        if !waiting {
            self.rings.retain(|r| r.from != from);
            if self.rings.len() >= MAX_RINGS || fds.len() != 1 {
                return;
            }
            let Some(fd) = fds.pop() else { return };
            let Ok(mut shm) = Shm::map(fd, LINK_SIZE) else { return };
            shm.close_fd();
            self.rings.push(Inbound { seg: Segment::new(shm), from, started: false });
        }
        let Ok(bell) = engine().and_then(|e| e.bell().fds()) else { return };
        let accept = Ctl { magic: CTL_MAGIC, kind: ACCEPT, from_qpn: me, to_qpn: from };
        // Unsent (our sender's queue is full), the offer comes again.
        let _ = unix::send_dgram_fds(sock, &qp_name(from), &[accept.as_bytes()], &bell);
    }

    /// Takes what the started rings hold, a bounded batch each, handing each message to
    /// `deliver`: whether any came. A ring whose producer broke the protocol, or closed it and
    /// left it empty, is dropped.
    pub fn drain(&mut self, me: u32, mut deliver: impl FnMut(&UdHdr, &[u8])) -> bool {
        let mut got = false;
        let Receivers { buf, rings, .. } = self;
        if buf.len() < UD_MTU {
            buf.resize(UD_MTU, 0);
        }
        let payload = &mut buf[..UD_MTU];
        rings.retain(|r| {
            if !r.started {
                return true;
            }
            let ring = &r.seg.ring;
            for _ in 0..MAX_RECORDS {
                let Some(avail) = ring.available() else { return false };
                if avail == 0 {
                    return !ring.is_closed();
                }
                let tail = ring.tail();
                let s0 = slot_bytes(ring, tail);
                let mut hb = [0u8; HDR_LEN];
                // SAFETY: slot `tail` is published (avail > 0) and SLOT_SIZE bytes long; the
                // header is copied out before any of it is used.
                unsafe { std::ptr::copy_nonoverlapping(s0, hb.as_mut_ptr(), HDR_LEN) };
                let Some(h) = UdHdr::from_bytes(&hb) else { return false };
                let len = h.len as usize;
                if !h.valid(HDR_LEN + len) || !for_ring_of(&h, me) {
                    return false;
                }
                let need = slots_for(len);
                if need > avail {
                    return true; // an honest producer publishes a record whole
                }
                let first = len.min(SLOT_SIZE - HDR_LEN);
                // SAFETY: `len` ≤ UD_MTU (checked by `valid`), so `payload` holds it; the
                // record's `need` slots are published, and its bytes lie in them (see `write`).
                unsafe {
                    std::ptr::copy_nonoverlapping(s0.add(HDR_LEN), payload.as_mut_ptr(), first);
                    if len > first {
                        let s1 = slot_bytes(ring, tail + 1);
                        std::ptr::copy_nonoverlapping(
                            s1,
                            payload.as_mut_ptr().add(first),
                            len - first,
                        );
                    }
                }
                ring.consume(need);
                got = true;
                deliver(&h, &payload[..len]);
            }
            true
        });
        got
    }
}

#[cfg(test)]
#[path = "ud_ring_tests.rs"]
mod tests;
