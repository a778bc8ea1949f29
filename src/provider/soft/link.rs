//! QP links: the shared rings between two connected RC QPs and the handshake that sets them up.
//!
//! Handshake (over abstract SEQPACKET sockets named after QPNs): the QP with the smaller QPN
//! connects to `qp/<peer qpn>` and sends `Hello` with the link segment and its doorbell attached;
//! the peer answers `Ack` with its own doorbell. The connection then stays open: its hang-up tells
//! each side that the other QP is gone, and it carries the direct path's grants (`direct`).

use super::direct::grant::{self, GrantMsg, Granted};
use super::direct::share::SharedMem;
use super::direct::Grants;
use super::net::endpoint;
use super::ring::{Ring, LINK_SIZE};
use crate::errno::{Errno, Result};
use crate::runtime::engine::{engine, Bell};
use crate::runtime::shm::Shm;
use crate::runtime::unix::{self, Pod};
use crate::runtime::{fork, lock};
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const MAGIC: u32 = 0x5244_4d53; // "RDMS"
pub const HELLO: u32 = 1;
pub const ACK: u32 = 2;

/// A handshake message.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Hello {
    pub magic: u32,
    pub kind: u32,
    pub from_qpn: u32,
    pub to_qpn: u32,
}

// SAFETY: repr(C) integers only.
unsafe impl Pod for Hello {}

pub fn qp_name(qpn: u32) -> String {
    format!("rdmashim/qp/{qpn:06x}")
}

/// Allocates a QPN and the sockets that own it: a slot on one of our UDP sockets (the QPN is
/// `(port << 8) | slot`, see `net::endpoint`, so it is unique in the network namespace and names
/// the socket across namespaces) and the abstract name same-host peers find it by: a listening
/// SEQPACKET socket for connected QPs, a datagram socket for UD QPs.
pub fn allocate_qpn(datagram: bool) -> Result<(u32, OwnedFd, Arc<endpoint::Sock>)> {
    for _ in 0..1000 {
        let (qpn, udp) = endpoint::allocate()?;
        let bound =
            if datagram { unix::bind_dgram(&qp_name(qpn)) } else { unix::listen(&qp_name(qpn)) };
        match bound {
            Ok(fd) => return Ok((qpn, fd, udp)),
            // A stale name (a process of this namespace that kept it): the slot stays taken.
            Err(e) if e == Errno::EADDRINUSE => continue,
            Err(e) => {
                endpoint::release(qpn);
                return Err(e);
            }
        }
    }
    Err(Errno::ENOSPC)
}

/// Decodes the `Hello` a connecting peer sends first (exactly one, nothing more or less).
pub fn parse_hello(first: &[u8]) -> Result<Hello> {
    if first.len() != std::mem::size_of::<Hello>() {
        return Err(Errno::EINVAL);
    }
    match Hello::from_bytes(first) {
        Some(h) if h.magic == MAGIC && h.kind == HELLO => Ok(h),
        _ => Err(Errno::EINVAL),
    }
}

/// One end of a link.
pub struct Link {
    shm: Shm,
    /// The ring we produce into.
    pub out: Ring,
    /// The ring we consume from.
    pub inn: Ring,
    /// Set once, when the peer's Ack brings it: read on every publish, so no lock.
    peer_bell: OnceLock<Bell>,
    sock: OwnedFd,
    grants: Mutex<Grants>,
    /// The process generation that made the link: in a forked child the rings still belong to
    /// the parent's connection, so the child's copy must leave them alone.
    generation: u64,
}

impl Link {
    /// Active side: connects to `peer_qpn` and sends the link segment and our doorbell.
    pub fn connect(my_qpn: u32, peer_qpn: u32) -> Result<Link> {
        let mut shm = Shm::create(LINK_SIZE)?;
        let sock = unix::connect(&qp_name(peer_qpn))?;
        let bell = engine()?.bell().fds()?;
        let h = Hello { magic: MAGIC, kind: HELLO, from_qpn: my_qpn, to_qpn: peer_qpn };
        unix::send(sock.as_raw_fd(), h.as_bytes(), &[shm.fd()?.as_raw_fd(), bell[0], bell[1]])?;
        shm.close_fd(); // the peer has its own descriptor now
                        // SAFETY: the segment is LINK_SIZE bytes and lives in self.shm as long as the rings.
        let (out, inn) = unsafe { (Ring::new(shm.ptr(), 0), Ring::new(shm.ptr(), 1)) };
        Ok(Link {
            shm,
            out,
            inn,
            peer_bell: OnceLock::new(),
            sock,
            grants: Mutex::default(),
            generation: fork::generation(),
        })
    }

    /// Passive side: adopts the segment and doorbell from a `Hello` and answers with ours.
    pub fn accept(
        my_qpn: u32,
        sock: OwnedFd,
        hello: &Hello,
        mut fds: Vec<OwnedFd>,
    ) -> Result<Link> {
        if fds.len() != 3 {
            return Err(Errno::EINVAL);
        }
        let efd = fds.pop().ok_or(Errno::EINVAL)?;
        let bshm = fds.pop().ok_or(Errno::EINVAL)?;
        let lshm = fds.pop().ok_or(Errno::EINVAL)?;
        let mut shm = Shm::map(lshm, LINK_SIZE)?;
        shm.close_fd();
        let peer = Bell::from_fds(bshm, efd)?;
        let bell = engine()?.bell().fds()?;
        let a = Hello { magic: MAGIC, kind: ACK, from_qpn: my_qpn, to_qpn: hello.from_qpn };
        unix::send(sock.as_raw_fd(), a.as_bytes(), &bell)?;
        // SAFETY: the segment is LINK_SIZE bytes (checked by map) and lives in self.shm.
        let (out, inn) = unsafe { (Ring::new(shm.ptr(), 1), Ring::new(shm.ptr(), 0)) };
        Ok(Link {
            shm,
            out,
            inn,
            peer_bell: OnceLock::from(peer),
            sock,
            grants: Mutex::default(),
            generation: fork::generation(),
        })
    }

    /// Reads what the peer sent on the control socket: the `Ack` (active side) and grants.
    /// `Ok(false)` means the peer hung up. The progress thread calls it when the socket is
    /// readable; a requester calls it too when the ring says a grant waits (`grant_for`).
    pub fn on_readable(&self) -> Result<bool> {
        let mut g = self.lock_grants();
        self.read_messages(&mut g)
    }

    fn lock_grants(&self) -> std::sync::MutexGuard<'_, Grants> {
        lock(&self.grants)
    }

    fn read_messages(&self, g: &mut Grants) -> Result<bool> {
        loop {
            let mut buf = [0u8; 64];
            let r = match unix::recv(self.sock.as_raw_fd(), &mut buf) {
                Err(e) if e == Errno::EAGAIN => return Ok(true), // nothing more (non-blocking)
                r => r?,
            };
            let Some((n, mut fds)) = r else {
                g.hung_up = true;
                return Ok(false);
            };
            let m = &buf[..n];
            if let Some(h) =
                Hello::from_bytes(m).filter(|h| n == size_of::<Hello>() && h.kind == ACK)
            {
                if h.magic != MAGIC || fds.len() != 2 {
                    return Err(Errno::EINVAL);
                }
                let efd = fds.pop().ok_or(Errno::EINVAL)?;
                let bshm = fds.pop().ok_or(Errno::EINVAL)?;
                // Store the doorbell first, then ring it: a publisher that still saw no doorbell
                // published before this ring, so the peer's wake-up sees its data; one that sees
                // the doorbell rings it itself (`notify_peer` looks again after a fence when it
                // sees none). The other order loses wake-ups.
                if self.peer_bell.set(Bell::from_fds(bshm, efd)?).is_err() {
                    return Err(Errno::EINVAL); // one Ack per link
                }
                if let Some(bell) = self.peer_bell.get() {
                    bell.ring();
                }
                continue;
            }
            let gm = GrantMsg::from_bytes(m).filter(|gm| {
                n == size_of::<GrantMsg>() && gm.magic == MAGIC && gm.kind == grant::GRANT
            });
            let (Some(gm), 1) = (gm, fds.len()) else { return Err(Errno::EINVAL) };
            g.taken += 1;
            let fd = fds.pop().ok_or(Errno::EINVAL)?;
            // A grant we cannot map leaves the region on the copy path.
            if let Some(granted) = Granted::map(&gm, fd) {
                crate::trace::note(format_args!(
                    "peer region rkey={:#x} {:#x}+{} mapped: direct path",
                    gm.rkey, gm.base, gm.len
                ));
                g.by_key.insert(gm.rkey, Arc::new(granted));
            }
        }
    }

    /// Requester: the peer's grant for `rkey`, if it gave one and it is still valid. Reads
    /// the socket only when the ring says grants wait there.
    pub fn grant_for(&self, rkey: u32) -> Option<Arc<Granted>> {
        let mut g = self.lock_grants();
        if self.out.grants_sent() != g.taken && !g.hung_up {
            // A hang-up or a bad message is the progress thread's to handle (it reads too).
            let _ = self.read_messages(&mut g);
        }
        let found = g.by_key.get(&rkey)?;
        if found.valid() {
            return Some(found.clone());
        }
        g.by_key.remove(&rkey); // revoked: unmapped once no request uses it
        None
    }

    /// Responder: grants the peer region `rkey` (backed by `s`) with what `qp_access` allows,
    /// once per region. The grant is counted in the ring after it is sent, before the caller
    /// releases the request's slot.
    pub fn offer(&self, rkey: u32, s: &SharedMem, qp_access: u32) {
        let mut g = self.lock_grants();
        if g.sent.get(&rkey) == Some(&s.base) {
            return;
        }
        let Some((msg, fd)) = grant::offer(MAGIC, rkey, s, qp_access) else { return };
        // Non-blocking: a peer that does not read its socket keeps the copy path.
        if unix::send(self.sock.as_raw_fd(), msg.as_bytes(), &[fd.as_raw_fd()]).is_ok() {
            g.sent.insert(rkey, s.base);
            self.inn.grant_sent();
        }
    }

    /// The control socket, watched by the engine for the ack and for hang-up.
    pub fn sock_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Wakes the peer's progress thread if it sleeps.
    pub fn notify_peer(&self) {
        if let Some(b) = self.peer_bell.get() {
            b.ring();
            return;
        }
        // No doorbell seen: it may be being stored right now. After a full fence, either this
        // load sees it, or its setter's ring comes after our publish and wakes the peer for it.
        fence(Ordering::SeqCst);
        if let Some(b) = self.peer_bell.get() {
            b.ring();
        }
    }

    pub fn segment_len(&self) -> usize {
        self.shm.len()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.generation != fork::generation() {
            return;
        }
        self.out.close();
        self.notify_peer();
        if let Ok(e) = engine() {
            e.unwatch(self.sock.as_raw_fd());
        }
    }
}
