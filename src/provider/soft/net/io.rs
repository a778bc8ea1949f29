//! The send side of a network RC QP: packets are encoded into slots and leave together, one
//! `sendmmsg` per batch (runs of equal length as segmented sends), with plain ACKs coalesced and
//! kept back for a while for the application's answer (see [`Io::flush_or_hold`]).

use super::endpoint::{self, Sock};
use crate::provider::soft::roce::{self, Flow, Packet, Syndrome};
use crate::runtime::udp;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Where the packets go. Packets are encoded into `buf`'s slots and sent together (one
/// `sendmmsg`) when a call into the engine ends or the slots are full.
pub(super) struct Io {
    sock: Arc<endpoint::Sock>,
    src: IpAddr,
    dst: SocketAddr,
    flow: Flow,
    buf: Vec<u8>,
    /// The length and kind of each packet waiting in `buf` (slot i at i × `slot`).
    lens: Vec<(usize, Kind)>,
    slot: usize,
    /// Since when (engine time) waiting ACKs have been kept back (see [`Io::flush_or_hold`]).
    held_since: Option<u64>,
    /// A completion came out or an RDMA WRITE landed since the packets waiting were last
    /// sent: the application may answer it (see [`Io::flush_or_hold`]).
    answerable: bool,
}

/// What a waiting packet is, for coalescing ACKs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Request,
    /// An ACK with the ACK syndrome: a later ACK or NAK of the batch acknowledges at least as
    /// much (the expected PSN only grows), so it need not go if one follows. A READ response
    /// or atomic ACK may answer a duplicate, an older PSN, so it does not stand in for one.
    PlainAck,
    Nak,
    Response,
}

fn kind_of(pkt: &Packet<'_>) -> Kind {
    use crate::provider::soft::roce::opcode::op;
    match pkt.bth.opcode() {
        op::ACK if pkt.ext.aeth.is_some_and(|a| matches!(a.syndrome(), Syndrome::Ack { .. })) => {
            Kind::PlainAck
        }
        op::ACK => Kind::Nak,
        op::ATOMIC_ACK | op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY => Kind::Response,
        _ => Kind::Request,
    }
}

/// Which packets of a batch go: the responder ACKs each request that asks (every SEND), so a
/// batch of packets read together leaves with only its last ACK.
fn to_send(kinds: impl DoubleEndedIterator<Item = Kind>) -> Vec<bool> {
    let mut later_ack = false;
    let mut keep: Vec<bool> = kinds
        .rev()
        .map(|k| {
            let keep = !(k == Kind::PlainAck && later_ack);
            later_ack |= matches!(k, Kind::PlainAck | Kind::Nak);
            keep
        })
        .collect();
    keep.reverse();
    keep
}

/// Whether an application's thread keeps the waiting packets `lens` back at `now`, having kept
/// them since `since`: `Some(since)` for a batch of nothing but plain ACKs younger than
/// `ACK_HOLD_NS`.
fn keeps_back(lens: &[(usize, Kind)], since: Option<u64>, now: u64) -> Option<u64> {
    if lens.is_empty() || lens.iter().any(|&(_, k)| k != Kind::PlainAck) {
        return None;
    }
    let since = since.unwrap_or(now);
    (now.saturating_sub(since) < ACK_HOLD_NS).then_some(since)
}

/// Orders the packets `kept` (indexes into `lens`) for sending: our requests first, then what
/// the responder sends (ACKs, responses, in their order). The two are different PSN spaces,
/// and the peer waits on our request; an ACK behind it costs the peer nothing.
fn requests_first(kept: &mut [usize], lens: &[(usize, Kind)]) {
    kept.sort_by_key(|&i| lens[i].1 != Kind::Request);
}

/// Packets an `Io` holds before it sends them (a window's worth: bursts go segmented).
const IO_BATCH: usize = 128;

/// How long ACKs are kept back for the application's answer (ns): far below the peer's
/// shortest retransmission interval, above the time between a receive and its answer.
const ACK_HOLD_NS: u64 = 20_000;

impl Io {
    /// Sends from `src` over `sock` to `dst` (the flow's ends), in slots of `slot` bytes.
    pub(super) fn new(
        sock: Arc<Sock>,
        src: IpAddr,
        dst: SocketAddr,
        flow: Flow,
        slot: usize,
    ) -> Io {
        Io {
            sock,
            src,
            dst,
            flow,
            held_since: None,
            answerable: false,
            buf: Vec::new(), // grows to the largest burst sent
            lens: Vec::with_capacity(IO_BATCH),
            slot,
        }
    }

    /// Where the packets go.
    pub(super) fn dst(&self) -> SocketAddr {
        self.dst
    }

    /// Encodes `pkt` into the next slot (sending what waits first if the slots are full).
    pub(super) fn push(&mut self, pkt: &Packet<'_>) {
        if self.lens.len() == IO_BATCH {
            self.flush();
        }
        let (at, slot) = (self.lens.len() * self.slot, self.slot);
        if self.buf.len() < at + slot {
            self.buf.resize(at + slot, 0);
        }
        let Ok(n) = roce::encode(pkt, &self.flow, &mut self.buf[at..at + slot]) else {
            return;
        };
        self.lens.push((n, kind_of(pkt)));
    }

    /// A completion came out or an RDMA WRITE landed: the application may answer it (see
    /// [`Io::flush_or_hold`]).
    pub(super) fn note_answerable(&mut self) {
        self.answerable = true;
    }

    /// Sends the waiting packets, except a batch of nothing but ACKs that came with a
    /// completion or a landed WRITE: that is kept back for a while, whichever thread read the
    /// request, so that the application's answer (a post) carries it. The peer then gets its
    /// ACK and our answer in one batch, which a peer polling for the ACK reads together (so
    /// its application need not hand the socket to its progress thread between the two), and
    /// we pay one system call, not two. Who calls next sends it once [`Io::acks_due`] has
    /// passed (the QP's owner arranges that someone does). ACKs in the middle of a message go
    /// at once: the sender's window waits on them.
    pub(super) fn flush_or_hold(&mut self) {
        if self.answerable {
            if let Some(since) = keeps_back(&self.lens, self.held_since, super::now_ns()) {
                self.held_since = Some(since);
                return;
            }
        }
        self.flush();
    }

    /// When the ACKs kept back are to go (engine time), if any are.
    pub(super) fn acks_due(&self) -> Option<u64> {
        self.held_since.map(|since| since + ACK_HOLD_NS)
    }

    pub(super) fn flush(&mut self) {
        self.held_since = None;
        self.answerable = false;
        if self.lens.is_empty() {
            return;
        }
        let keep = to_send(self.lens.iter().map(|&(_, k)| k));
        let mut kept: Vec<usize> = (0..self.lens.len()).filter(|&i| keep[i]).collect();
        requests_first(&mut kept, &self.lens);
        // A lost packet is the transport's to recover (retransmission), like one the wire drops.
        if super::faults::active().is_some() || !udp::gso::usable() {
            let bufs = self.slices(&kept);
            super::faults::send_all(&self.sock, &bufs, self.src, self.dst);
        } else {
            let lens: Vec<usize> = kept.iter().map(|&i| self.lens[i].0).collect();
            let mut runs = Vec::new();
            udp::gso::runs(&lens, &mut runs);
            self.number_ids(&kept, &runs);
            let bufs = self.slices(&kept);
            let fd = self.sock.as_raw_fd();
            if let Err(at) = endpoint::send_runs_from(fd, &bufs, &runs, self.src, self.dst) {
                // Segmented sends are refused here: the rest goes one by one, with ID 0.
                drop(bufs);
                self.number_ids(&kept, &runs[at..]);
                let rest = &kept[runs[at].start..];
                let bufs = self.slices(rest);
                super::faults::send_all(&self.sock, &bufs, self.src, self.dst);
            }
        }
        self.lens.clear();
    }

    /// The bytes of the waiting packets `which`.
    fn slices(&self, which: &[usize]) -> Vec<&[u8]> {
        which.iter().map(|&i| &self.buf[i * self.slot..i * self.slot + self.lens[i].0]).collect()
    }

    /// Segment k of a run goes with IPv4 ID k (see `udp::gso`): moves the ICRC of the packets
    /// `kept[r]` of each run `r` between ID 0 and their ID (in either direction: it is an XOR).
    fn number_ids(&mut self, kept: &[usize], runs: &[std::ops::Range<usize>]) {
        if !matches!(self.flow.addrs, roce::FlowAddrs::V4 { .. }) {
            return;
        }
        for r in runs {
            for (k, &i) in kept[r.clone()].iter().enumerate().skip(1) {
                let (at, n) = (i * self.slot, self.lens[i].0);
                let Some(tail) = self.buf.get_mut(at + n - roce::icrc::ICRC_LEN..at + n) else {
                    continue;
                };
                let Ok(b) = <[u8; 4]>::try_from(&*tail) else { continue };
                let icrc = u32::from_le_bytes(b);
                let ib_len = n - roce::icrc::ICRC_LEN;
                let moved = roce::icrc::with_ipv4_id(ib_len, icrc, 0, k as u16);
                tail.copy_from_slice(&moved.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's plain ACKs give way only to a later ACK or NAK: a READ response or atomic ACK
    /// may answer a duplicate request (an older PSN) and acknowledges nothing newer.
    #[test]
    fn only_a_later_ack_or_nak_replaces_a_plain_ack() {
        use Kind::*;
        let keep = |k: &[Kind]| to_send(k.iter().copied());
        assert_eq!(keep(&[PlainAck, PlainAck, Request]), [false, true, true]);
        assert_eq!(keep(&[PlainAck, Nak]), [false, true]);
        assert_eq!(keep(&[PlainAck, Response, Response]), [true, true, true]);
        assert_eq!(keep(&[PlainAck, Response, PlainAck]), [false, true, true]);
    }

    /// An application's thread keeps back a batch of nothing but plain ACKs, for at most
    /// `ACK_HOLD_NS` from the first time it did; anything else in the batch sends it all.
    #[test]
    fn only_plain_acks_are_kept_back_and_not_for_long() {
        use Kind::*;
        let acks = [(20, PlainAck), (20, PlainAck)];
        assert_eq!(keeps_back(&acks, None, 1_000), Some(1_000), "kept from now");
        assert_eq!(keeps_back(&acks, Some(1_000), 1_000 + ACK_HOLD_NS - 1), Some(1_000));
        assert_eq!(keeps_back(&acks, Some(1_000), 1_000 + ACK_HOLD_NS), None, "held long enough");
        assert_eq!(keeps_back(&[], None, 5), None, "nothing to keep");
        for other in [Request, Nak, Response] {
            assert_eq!(keeps_back(&[(20, PlainAck), (96, other)], None, 5), None, "{other:?}");
        }
    }

    /// Requests leave first; the responder's packets keep their order behind them.
    #[test]
    fn requests_leave_before_the_responders_packets() {
        use Kind::*;
        let lens = [(20, PlainAck), (96, Request), (40, Response), (20, Nak), (96, Request)];
        let mut kept = vec![0, 1, 2, 3, 4];
        requests_first(&mut kept, &lens);
        assert_eq!(kept, [1, 4, 0, 2, 3]);
    }
}
