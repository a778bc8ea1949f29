//! QP links: the shared rings between two connected RC QPs and the handshake that sets them up.
//!
//! Handshake (over abstract SEQPACKET sockets named after QPNs): the QP with the smaller QPN
//! connects to `qp/<peer qpn>` and sends `Hello` with the link segment and its doorbell attached;
//! the peer answers `Ack` with its own doorbell. The connection then stays open: its hang-up tells
//! each side that the other QP is gone.

use super::net::endpoint;
use super::ring::{Ring, LINK_SIZE};
use crate::errno::{Errno, Result};
use crate::runtime::engine::{engine, Bell};
use crate::runtime::fork;
use crate::runtime::shm::Shm;
use crate::runtime::unix::{self, Pod};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

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
    peer_bell: Mutex<Option<Bell>>,
    sock: OwnedFd,
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
            peer_bell: Mutex::new(None),
            sock,
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
            peer_bell: Mutex::new(Some(peer)),
            sock,
            generation: fork::generation(),
        })
    }

    /// Active side: reads the peer's `Ack`. `Ok(false)` means the peer hung up.
    pub fn on_readable(&self) -> Result<bool> {
        let mut buf = [0u8; 64];
        let r = match unix::recv(self.sock.as_raw_fd(), &mut buf) {
            Err(e) if e == Errno::EAGAIN => return Ok(true), // nothing yet (non-blocking)
            r => r?,
        };
        match r {
            None => Ok(false),
            Some((n, mut fds)) => {
                let h = Hello::from_bytes(&buf[..n]).ok_or(Errno::EINVAL)?;
                if n != std::mem::size_of::<Hello>()
                    || h.magic != MAGIC
                    || h.kind != ACK
                    || fds.len() != 2
                {
                    return Err(Errno::EINVAL);
                }
                let efd = fds.pop().ok_or(Errno::EINVAL)?;
                let bshm = fds.pop().ok_or(Errno::EINVAL)?;
                // Store the doorbell first, then ring it: a publisher that still saw no doorbell
                // published before this ring, so the peer's wake-up sees its data; one that sees
                // the doorbell rings it itself. (The other order loses wake-ups.)
                let mut slot = self.peer_bell.lock().unwrap_or_else(|e| e.into_inner());
                let bell = slot.insert(Bell::from_fds(bshm, efd)?);
                bell.ring();
                Ok(true)
            }
        }
    }

    /// The control socket, watched by the engine for the ack and for hang-up.
    pub fn sock_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Wakes the peer's progress thread if it sleeps.
    pub fn notify_peer(&self) {
        if let Some(b) = self.peer_bell.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
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
