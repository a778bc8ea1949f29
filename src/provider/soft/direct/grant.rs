//! A grant: the message (over the link's socket) that hands a peer one region's memfd, and the
//! peer's mapping of it, through which its RDMA WRITE, READ and atomics reach our memory.
//!
//! Everything in the message comes from the peer. The requester maps exactly `len` bytes plus
//! the control page of a sealed memfd (so no access can fault) and only ever touches
//! `[addr - base, addr - base + n)` of its own mapping after checking that it lies inside, so a
//! lying target can only mislead its own requests.

use super::super::sgl_copy::{place_in, take_out_last_byte_last};
use super::share::{page_size, SharedMem, VALID};
use crate::provider::{
    AccessError, MemoryKeys, Payload, SendWqe, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use crate::runtime::shm::Shm;
use crate::runtime::unix::Pod;
use crate::sys::*;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use ibv_wr_opcode::*;

/// The link message kind of a grant (after the handshake's `HELLO` and `ACK`).
pub const GRANT: u32 = 3;

/// Regions larger than this are not granted (nor accepted): a mapping must stay reasonable.
const MAX_LEN: u64 = 1 << 40;

/// The grant message; one descriptor (the memfd) travels with it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GrantMsg {
    pub magic: u32,
    pub kind: u32,
    pub rkey: u32,
    /// The rights granted: the region's remote rights as the target's QP allows them.
    pub access: u32,
    pub base: u64,
    pub len: u64,
}

// SAFETY: repr(C) integers only, no padding (4 × u32 then 2 × u64).
unsafe impl Pod for GrantMsg {}

const REMOTE: u32 = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

/// The message granting `s` under `rkey` with the rights `qp_access` leaves, and the
/// descriptor to send with it: read-only unless the peer may write, so that it cannot map the
/// region writable at all. `None` if nothing is left to grant.
pub fn offer(magic: u32, rkey: u32, s: &SharedMem, qp_access: u32) -> Option<(GrantMsg, OwnedFd)> {
    let access = s.access & qp_access & REMOTE;
    if access == 0 || s.is_revoked() || s.len as u64 > MAX_LEN {
        return None;
    }
    let writable = access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
    let fd = reopen(s.fd(), writable)?;
    // The peer addresses the region as its rkey does: in iova space.
    let (base, len) = (s.remote_base, s.len as u64);
    let msg = GrantMsg { magic, kind: GRANT, rkey, access, base, len };
    Some((msg, fd))
}

/// A new open file description of our memfd, read-only or read-write (`/proc/self/fd`).
fn reopen(fd: i32, writable: bool) -> Option<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let mode = if writable { libc::O_RDWR } else { libc::O_RDONLY };
    // SAFETY: a valid NUL-terminated path; the result is a new descriptor we own.
    let r = unsafe { libc::open(path.as_ptr(), mode | libc::O_CLOEXEC) };
    // SAFETY: r is a fresh descriptor when non-negative.
    (r >= 0).then(|| unsafe { OwnedFd::from_raw_fd(r) })
}

/// The remote right a request needs if it can take the direct path at all: an RDMA WRITE
/// without immediate, a READ, or an aligned atomic (a misaligned one is the target's to refuse).
pub fn right_needed(w: &SendWqe) -> Option<u32> {
    match w.opcode {
        IBV_WR_RDMA_WRITE => Some(ACCESS_REMOTE_WRITE),
        IBV_WR_RDMA_READ => Some(ACCESS_REMOTE_READ),
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD if w.remote_addr % 8 == 0 => {
            Some(ACCESS_REMOTE_ATOMIC)
        }
        _ => None,
    }
}

/// A peer's region as we (the requester) map it.
pub struct Granted {
    pub rkey: u32,
    base: u64,
    len: u64,
    access: u32,
    map: Shm,
}

impl Granted {
    /// Maps a grant received from the peer: `None` if anything about it is off (then the
    /// region simply stays on the copy path).
    pub fn map(m: &GrantMsg, fd: OwnedFd) -> Option<Granted> {
        let page = page_size() as u64;
        let sane = m.len > 0
            && m.len <= MAX_LEN
            && m.len % page == 0
            && m.base % page == 0
            && m.base.checked_add(m.len).is_some()
            && m.access & !REMOTE == 0
            && m.access != 0;
        if !sane {
            return None;
        }
        let writable = m.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
        let map = Shm::map_as(fd, (m.len + page) as usize, writable).ok()?;
        Some(Granted { rkey: m.rkey, base: m.base, len: m.len, access: m.access, map })
    }

    /// Whether the target still grants the region (it clears the word when it deregisters).
    pub fn valid(&self) -> bool {
        // SAFETY: the control page follows the len data bytes inside our mapping; 8-aligned.
        let w = unsafe { &*self.map.ptr().add(self.len as usize).cast::<AtomicU64>() };
        w.load(Ordering::Acquire) == VALID
    }

    /// Our address for the peer's `[addr, addr + n)` if it lies in the grant with `need`.
    fn at(&self, addr: u64, n: u64, need: u32) -> Option<*mut u8> {
        let off = addr.checked_sub(self.base)?;
        (self.access & need == need && n > 0 && off.checked_add(n)? <= self.len)
            // SAFETY: off + n <= len, inside our mapping.
            .then(|| unsafe { self.map.ptr().add(off as usize) })
    }

    /// Where `w` would act in our mapping, and on how many bytes: `None` if it cannot take the
    /// direct path on this grant (see [`execute`](Granted::execute)).
    fn target(&self, w: &SendWqe) -> Option<(*mut u8, usize)> {
        let need = right_needed(w)?;
        let n = if need == ACCESS_REMOTE_ATOMIC { 8 } else { w.len };
        if !self.valid() {
            return None;
        }
        Some((self.at(w.remote_addr, n, need)?, n as usize))
    }

    /// Whether [`execute`](Granted::execute) would take `w` now (the target may still revoke
    /// the grant before it runs; then it does not, and the copy path takes the request).
    pub fn takes(&self, w: &SendWqe) -> bool {
        self.target(w).is_some()
    }

    /// Executes `w` (an RDMA WRITE without immediate, a READ or an atomic) on the mapping.
    /// [`Executed::Declined`], having touched nothing, if it does not lie wholly inside the
    /// grant with the rights it needs (the copy path then lets the target decide, NAK
    /// included). Our buffers (a WRITE's source, a READ's or atomic's destination) are reached
    /// through `keys` while they stay registered: [`Executed::LocalFault`] if one is not (a bad
    /// key, or deregistered since the request was posted).
    pub fn execute(&self, w: &SendWqe, keys: &dyn MemoryKeys) -> Executed {
        let Some((p, n)) = self.target(w) else { return Executed::Declined };
        let placed = match (&w.payload, w.opcode) {
            // SAFETY: p has n bytes inside our mapping (checked by `at`); the payload has n
            // bytes. The last byte goes last, as the copy path does it: a target polling the
            // last byte sees the whole message.
            (p_in, IBV_WR_RDMA_WRITE) => unsafe { take_out_last_byte_last(keys, p_in, p, n) },
            // SAFETY: p has n readable bytes in our mapping.
            (Payload::Sges(sgl), IBV_WR_RDMA_READ) => unsafe { place_in(keys, sgl, 0, p, n) },
            (Payload::Sges(sgl), _) => {
                // SAFETY: p is 8-aligned (base is page-aligned, remote_addr 8-aligned) with 8
                // bytes in a shared mapping the target's CPU also reaches atomically.
                let cell = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
                let old = if w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP {
                    let r = cell.compare_exchange(
                        w.compare_add,
                        w.swap,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    r.unwrap_or_else(|v| v)
                } else {
                    cell.fetch_add(w.compare_add, Ordering::SeqCst)
                };
                // SAFETY: the source is the 8 bytes of `old`.
                unsafe { place_in(keys, sgl, 0, (&old as *const u64).cast(), 8) }
            }
            _ => return Executed::Declined, // READ or atomic with inline data: not valid
        };
        Executed::from(placed)
    }
}

/// What became of a request offered to the direct path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Executed {
    /// Not taken, nothing touched: the copy path carries it.
    Declined,
    /// Executed on the peer's memory, result (if any) placed.
    Done,
    /// Executed on the peer's memory, but a local buffer for its result was deregistered
    /// since the request's check: the request fails with a local protection error.
    LocalFault,
}

impl From<Result<(), AccessError>> for Executed {
    fn from(placed: Result<(), AccessError>) -> Executed {
        match placed {
            Ok(()) => Executed::Done,
            Err(_) => Executed::LocalFault,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::soft::test_keys::Regions;
    use crate::provider::{Sge, Sgl};

    #[test]
    fn a_grant_message_has_no_padding() {
        assert_eq!(std::mem::size_of::<GrantMsg>(), 32);
    }

    /// A grant as a (possibly lying) target would send it, over a real sealed memfd of
    /// `file_pages` + 1 pages whose control word is valid.
    fn granted(file_pages: usize, base: u64, len: u64, access: u32) -> Option<Granted> {
        let page = page_size();
        let shm = Shm::create((file_pages + 1) * page).unwrap();
        // SAFETY: the control word lies inside the fresh mapping, 8-aligned.
        unsafe { &*shm.ptr().add(file_pages * page).cast::<AtomicU64>() }
            .store(VALID, Ordering::Release);
        // SAFETY: dup of the live descriptor; owned by the OwnedFd.
        let fd = unsafe {
            OwnedFd::from_raw_fd(libc::dup(std::os::fd::AsRawFd::as_raw_fd(shm.fd().unwrap())))
        };
        let m = GrantMsg { magic: 0, kind: GRANT, rkey: 1, access, base, len };
        Granted::map(&m, fd)
    }

    fn write(addr: u64, buf: &[u8]) -> SendWqe {
        let sge = Sge { addr: buf.as_ptr() as u64, length: buf.len() as u32, lkey: 0 };
        SendWqe {
            opcode: IBV_WR_RDMA_WRITE,
            signaled: true,
            payload: Payload::Sges(Sgl::One(sge)),
            len: buf.len() as u64,
            remote_addr: addr,
            rkey: 1,
            ..SendWqe::empty()
        }
    }

    #[test]
    fn a_lying_grant_is_refused() {
        let page = page_size() as u64;
        let all = ACCESS_REMOTE_WRITE;
        assert!(granted(1, 0x10000, page, all).is_some());
        assert!(granted(1, 0x10000, 2 * page, all).is_none(), "longer than the file");
        assert!(granted(1, 0x10001, page, all).is_none(), "unaligned base");
        assert!(granted(1, 0x10000, 0, all).is_none(), "empty");
        assert!(granted(1, !(page - 1), page, all).is_none(), "wraps");
        assert!(granted(1, 0x10000, page, 0).is_none(), "no rights");
        assert!(granted(1, 0x10000, page, 1 << 9).is_none(), "unknown rights");
    }

    #[test]
    fn requests_outside_the_grant_or_its_rights_touch_nothing() {
        let page = page_size() as u64;
        let g = granted(2, 0x10000, 2 * page, ACCESS_REMOTE_WRITE).unwrap();
        let data = [7u8; 16];
        let keys = Regions::new(&[&data]);
        let run = |w: &SendWqe| g.execute(w, &keys) == Executed::Done;
        assert!(run(&write(0x10000 + 2 * page - 16, &data)));
        assert!(!run(&write(0x10000 + 2 * page - 15, &data)), "runs past the end");
        assert!(!run(&write(0x10000 - 1, &data)), "starts before");
        assert!(!run(&write(u64::MAX - 8, &data)), "wraps");
        let mut read = write(0x10000, &data);
        read.opcode = IBV_WR_RDMA_READ;
        assert!(!run(&read), "READ without the read right");
        let mut imm = write(0x10000, &data);
        imm.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        assert!(!run(&imm), "WRITE with immediate needs the target");
    }

    #[test]
    fn our_buffers_deregistered_since_the_check_are_not_touched() {
        let page = page_size() as u64;
        let g = granted(1, 0x10000, page, ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ).unwrap();
        let data: Vec<u8> = (0..64u8).collect();
        let mut local = vec![0xeeu8; 64];
        let keys = Regions::new(&[&data, &local]);
        let exec = |w: &SendWqe| g.execute(w, &keys);
        assert_eq!(exec(&write(0x10000, &data)), Executed::Done);
        // A READ of `at` into `local` (its address taken from a mutable borrow).
        let mut read_into_local = |at: u64| {
            let mut r = write(at, &[]);
            r.opcode = IBV_WR_RDMA_READ;
            r.len = 64;
            let sge = Sge { addr: local.as_mut_ptr() as u64, length: 64, lkey: 0 };
            r.payload = Payload::Sges(Sgl::One(sge));
            r
        };
        let read = read_into_local(0x10000);
        let read_later = read_into_local(0x10000 + 128);

        keys.gate.close(); // deregistered after the requests' checks, before they run
        assert_eq!(exec(&read), Executed::LocalFault);
        assert!(local.iter().all(|&b| b == 0xee), "a closed region was written");
        assert_eq!(exec(&write(0x10000 + 128, &data)), Executed::LocalFault);

        let open = Regions::new(&[&local]);
        let exec = |w: &SendWqe| g.execute(w, &open);
        assert_eq!(exec(&read_later), Executed::Done);
        assert!(local.iter().all(|&b| b == 0), "a closed region was read");
        assert_eq!(exec(&read), Executed::Done);
        assert_eq!(local, data);
    }
}
