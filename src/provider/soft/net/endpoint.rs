//! Addressing without a daemon: this process's UDP sockets and the QPNs they own.
//!
//! Every process (per fork generation) owns dual-stack UDP sockets bound to `[::]:<port>` with
//! a port the kernel picks; a QPN is `(port << 8) | slot`, so an address (the GID) and a QPN name
//! the socket that owns the QP, in any network namespace, without a relay. A socket has 256
//! slots; when all are taken another socket is bound. Sockets send with Don't Fragment (so the
//! IPv4 ID is 0 and the ICRC is computable), pin their source address to the QP's GID, and
//! report each datagram's destination address (the receiver needs it for the ICRC).
//!
//! Other stacks' QPNs do not name a port: a QPN whose port would be a privileged one (below
//! [`FIRST_PORT`], which no socket of ours has) is another stack's, reached at port 4791, where
//! other stacks send to us too (`well_known`). Each of our sockets has an inbox for the packets
//! the owner of 4791 passes on (`relay`).

use crate::errno::{Errno, Result};
use crate::provider::soft::roce::ROCE_UDP_PORT;
use crate::runtime::fork::PerProcess;
use crate::runtime::{fork, lock, udp};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// The QPN of `slot` on `port`, or `None` for the QPNs that never occur (0, 1, 0xFFFFFF).
pub fn qpn_of(port: u16, slot: u8) -> Option<u32> {
    let q = (u32::from(port) << 8) | u32::from(slot);
    (q > 1 && q != 0x00ff_ffff).then_some(q)
}

/// The UDP port that owns `qpn`.
pub fn port_of(qpn: u32) -> u16 {
    ((qpn >> 8) & 0xffff) as u16
}

/// Our sockets' ports are at least this (ephemeral ports are): a QPN naming a lower port is
/// another stack's (rxe's QPNs, for one, are below 0x40000).
pub const FIRST_PORT: u16 = 1024;

/// The UDP port packets to `qpn` go to: its socket's if it is one of ours, else RoCEv2's 4791.
pub fn dest_port(qpn: u32) -> u16 {
    match port_of(qpn) {
        p if p >= FIRST_PORT => p,
        _ => ROCE_UDP_PORT,
    }
}

/// Which of a socket's 256 slots are taken.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots([u64; 4]);

impl Slots {
    /// Takes the lowest free slot whose QPN can occur on `port`.
    pub fn take(&mut self, port: u16) -> Option<u8> {
        let slot = (0..=255u8).find(|&s| !self.used(s) && qpn_of(port, s).is_some())?;
        self.0[usize::from(slot >> 6)] |= 1 << (slot & 63);
        Some(slot)
    }
    pub fn free(&mut self, slot: u8) {
        self.0[usize::from(slot >> 6)] &= !(1 << (slot & 63));
    }
    pub fn used(&self, slot: u8) -> bool {
        self.0[usize::from(slot >> 6)] & (1 << (slot & 63)) != 0
    }
}

/// Socket buffer size asked for (each direction): room for bursts of MTU-sized packets (a
/// window, a READ's responses).
const SOCKET_BUF: i32 = 32 << 20;

/// One of our UDP sockets.
pub struct Sock {
    pub fd: OwnedFd,
    pub port: u16,
    /// Held while a thread reads the socket and hands its packets to QPs: one reader at a
    /// time keeps the packets of a QP in their order (the progress thread and an application
    /// thread polling its CQ both read). It owns the receive buffers.
    pub(super) reading: Mutex<udp::RecvBatch>,
    /// When an application thread last read the socket (engine time, ns; 0: never).
    pub(super) app_read_at: AtomicU64,
    /// The inbox of packets passed on from port 4791 (`None` if it could not be bound: then
    /// only our own kind reaches this socket's QPs).
    _inbox: Option<super::relay::Inbox>,
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

struct Socket {
    fd: Arc<Sock>,
    port: u16,
    slots: Slots,
}

struct Table {
    generation: u64,
    socks: Vec<Socket>,
}

static TABLE: PerProcess<Mutex<Option<Table>>> = PerProcess::new(|| Mutex::new(None));

fn table() -> std::sync::MutexGuard<'static, Option<Table>> {
    let mut t = lock(TABLE.get());
    // A forked child starts without sockets: the parent's stay the parent's.
    if t.as_ref().is_some_and(|t| t.generation != fork::generation()) {
        if let Some(old) = t.take() {
            std::mem::forget(old.socks); // the descriptors are the parent's to close
        }
    }
    t
}

/// A dual-stack UDP socket on `[::]:0`, non-blocking, DF set, reporting destination addresses,
/// taking bursts whole where the kernel can (GRO; without it they arrive one by one).
fn bind_socket() -> Result<(OwnedFd, u16)> {
    // An ephemeral port is never below FIRST_PORT unless the system's range says otherwise.
    for _ in 0..16 {
        let fd = udp::open(0, Some(SOCKET_BUF))?;
        let port = udp::local_port(fd.as_raw_fd())?;
        if port >= FIRST_PORT {
            udp::gso::enable_gro(fd.as_raw_fd());
            return Ok((fd, port));
        }
    }
    Err(Errno::EADDRNOTAVAIL)
}

/// Takes a free QPN and returns it with the socket that owns it (binding a socket, watched by
/// the progress engine, when every slot is taken).
pub fn allocate() -> Result<(u32, Arc<Sock>)> {
    let mut t = table();
    let t = t.get_or_insert_with(|| Table { generation: fork::generation(), socks: Vec::new() });
    for s in t.socks.iter_mut() {
        if let Some(slot) = s.slots.take(s.port) {
            return qpn_of(s.port, slot).map(|q| (q, s.fd.clone())).ok_or(Errno::ENOSPC);
        }
    }
    let (fd, port) = bind_socket()?;
    let batch = udp::RecvBatch::new(super::recv::BATCH, super::recv::BUF);
    let inbox = super::relay::open_inbox(
        port,
        Arc::new(move |pkt: &[u8], from, to| super::recv::deliver_relayed(port, pkt, from, to)),
    )
    .ok();
    let fd = Arc::new(Sock {
        fd,
        port,
        reading: Mutex::new(batch),
        app_read_at: AtomicU64::new(0),
        _inbox: inbox,
    });
    super::recv::watch(fd.clone())?;
    if t.socks.is_empty() {
        // Other stacks reach our QPs through port 4791 only.
        super::well_known::want();
    }
    let mut slots = Slots::default();
    let slot = slots.take(port).ok_or(Errno::ENOSPC)?;
    t.socks.push(Socket { fd: fd.clone(), port, slots });
    Ok((qpn_of(port, slot).ok_or(Errno::ENOSPC)?, fd))
}

/// Gives `qpn`'s slot back (its socket stays: other QPs or later ones use it).
pub fn release(qpn: u32) {
    let mut t = table();
    let Some(t) = t.as_mut() else { return };
    if let Some(s) = t.socks.iter_mut().find(|s| s.port == port_of(qpn)) {
        s.slots.free((qpn & 0xff) as u8);
    }
}

/// Sends one datagram to `dst` from source address `src` (the QP's GID: the peer checks the
/// ICRC over the addresses it sees, so the kernel must not pick another one).
pub fn send_from(fd: RawFd, buf: &[u8], src: IpAddr, dst: SocketAddr) -> Result<()> {
    for _ in 0..2 {
        match udp::send_from(fd, src, dst, buf) {
            Err(e) if e == Errno::EAGAIN => wait_room(fd),
            r => return r,
        }
    }
    Err(Errno::EAGAIN)
}

/// Our own send buffer is full (a burst): wait for it to drain a little rather than drop
/// packets and pay a retransmission timeout.
fn wait_room(fd: RawFd) {
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, SEND_WAIT_MS) };
}

/// Sends datagrams to `dst` from `src`, batched. A datagram that cannot go, say for want of a
/// route, is a loss, like the wire's; a full send buffer is waited on once, and what still
/// does not fit is dropped (the transport recovers it).
pub fn send_all_from(fd: RawFd, bufs: &[&[u8]], src: IpAddr, dst: SocketAddr) {
    // Plain batches are never refused as segmented ones can be: no Err to handle.
    let _ = send_batches(fd, bufs.len(), |at| udp::send_batch_from(fd, src, dst, &bufs[at..]));
}

/// Sends runs of datagrams (from `udp::gso::runs`) to `dst` from `src`, each as one segmented
/// send, as [`send_all_from`] sends datagrams. `Err(i)` if the kernel refused segmented sends
/// at run `i`: runs `i..` did not go.
pub fn send_runs_from(
    fd: RawFd,
    bufs: &[&[u8]],
    runs: &[std::ops::Range<usize>],
    src: IpAddr,
    dst: SocketAddr,
) -> std::result::Result<(), usize> {
    send_batches(fd, runs.len(), |at| udp::gso::send_runs_from(fd, src, dst, bufs, &runs[at..]))
}

/// Sends `count` items with `send(first)`, which sends some from `first` on and says how many:
/// an item that fails for another reason than a full buffer counts as sent (a loss); a full
/// buffer is waited on once, then the rest is dropped. `Err(i)` if `send` said `EOPNOTSUPP`
/// at item `i`.
fn send_batches(
    fd: RawFd,
    count: usize,
    mut send: impl FnMut(usize) -> Result<usize>,
) -> std::result::Result<(), usize> {
    let (mut sent, mut waited) = (0, false);
    while sent < count {
        match send(sent) {
            Ok(n) if n > 0 => sent += n,
            Err(e) if e == Errno::EOPNOTSUPP => return Err(sent),
            Err(e) if e != Errno::EAGAIN => sent += 1,
            _ if !waited => {
                waited = true;
                wait_room(fd);
            }
            _ => break,
        }
    }
    Ok(())
}

/// How long a send waits for room in a full socket buffer before the packet is dropped.
const SEND_WAIT_MS: i32 = 20;

/// One received datagram (or burst of them, `segment` bytes each but the last): its length,
/// the sender, and the address it was sent to.
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub to: IpAddr,
    pub segment: usize,
}

/// Receives one datagram without blocking (`None`: nothing waiting, or no destination address).
pub fn recv_one(fd: RawFd, buf: &mut [u8]) -> Option<Result<Received>> {
    match udp::recv(fd, buf).transpose()? {
        Ok(r) => received(r),
        Err(e) => Some(Err(e)),
    }
}

/// A datagram as the QPs see addresses (see [`as_seen`]); `None` without a destination
/// address.
pub fn received(r: udp::Received) -> Option<Result<Received>> {
    let from = as_seen(r.from);
    let to = IpAddr::V6(udp::mapped(r.to?));
    Some(Ok(Received { len: r.len, from, to, segment: r.segment }))
}

/// An address as the QPs see it: as the dual-stack socket names it (IPv4 as v4-mapped).
pub fn as_seen(a: SocketAddr) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(udp::mapped(a.ip()), a.port(), 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpn_encodes_port_and_slot() {
        assert_eq!(qpn_of(0x1234, 0x56), Some(0x12_3456));
        assert_eq!(port_of(0x12_3456), 0x1234);
        assert_eq!(qpn_of(0, 0), None);
        assert_eq!(qpn_of(0, 1), None);
        assert_eq!(qpn_of(0xffff, 0xff), None);
        assert_eq!(qpn_of(0xffff, 0xfe), Some(0xff_fffe));
    }

    #[test]
    fn other_stacks_qpns_go_to_4791() {
        assert_eq!(dest_port(0x11), 4791, "rxe's first QPN");
        assert_eq!(dest_port(0x3_ff00), 4791);
        assert_eq!(dest_port(0x4_0000), 1024);
        assert_eq!(dest_port(0xc0_1203), 0xc012);
    }

    #[test]
    fn slots_are_taken_once_and_reused_after_free() {
        let mut s = Slots::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..256 {
            assert!(seen.insert(s.take(40000).expect("a free slot")));
        }
        assert_eq!(s.take(40000), None, "all 256 slots are taken");
        s.free(77);
        assert_eq!(s.take(40000), Some(77));
        // Port 0xffff cannot use slot 255 (QPN 0xFFFFFF), port 0 neither 0 nor 1.
        let mut t = Slots::default();
        assert_eq!((0..256).filter_map(|_| t.take(0xffff)).count(), 255);
        let mut z = Slots::default();
        assert_eq!(z.take(0), Some(2));
    }

    #[test]
    fn allocated_qpns_name_a_bound_port() {
        let (q1, f1) = allocate().expect("allocate");
        let (q2, f2) = allocate().expect("allocate");
        assert_ne!(q1, q2);
        assert_eq!(port_of(q1), port_of(q2), "the second QP shares the first socket");
        assert_eq!(f1.as_raw_fd(), f2.as_raw_fd());
        release(q1);
        release(q2);
    }
}
