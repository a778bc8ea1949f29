//! Addressing without a daemon: this process's UDP sockets and the QPNs they own.
//!
//! Every process (per fork generation) owns dual-stack UDP sockets bound to `[::]:<port>` with
//! a port the kernel picks; a QPN is `(port << 8) | slot`, so an address (the GID) and a QPN name
//! the socket that owns the QP, in any network namespace, without a relay. A socket has 256
//! slots; when all are taken another socket is bound. Sockets send with Don't Fragment (so the
//! IPv4 ID is 0 and the ICRC is computable), pin their source address to the QP's GID, and
//! report each datagram's destination address (the receiver needs it for the ICRC).

use crate::errno::{Errno, Result};
use crate::runtime::fork;
use crate::runtime::socket::kernel_socket;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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

/// Socket buffer size asked for (each direction).
const SOCKET_BUF: i32 = 32 << 20;

/// One of our UDP sockets.
pub struct Sock {
    pub fd: OwnedFd,
    pub port: u16,
    /// Held while a thread reads the socket and hands its packets to QPs: one reader at a
    /// time keeps the packets of a QP in their order (the progress thread and an application
    /// thread polling its CQ both read).
    pub(super) reading: Mutex<()>,
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

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> std::sync::MutexGuard<'static, Option<Table>> {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    // A forked child starts without sockets: the parent's stay the parent's.
    if t.as_ref().is_some_and(|t| t.generation != fork::generation()) {
        if let Some(old) = t.take() {
            std::mem::forget(old.socks); // the descriptors are the parent's to close
        }
    }
    t
}

fn check(r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

fn setopt(fd: RawFd, level: i32, name: i32, v: i32) -> Result<()> {
    // SAFETY: an int option of a valid socket.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// A dual-stack UDP socket on `[::]:0`, non-blocking, DF set, reporting destination addresses.
fn bind_socket() -> Result<(OwnedFd, u16)> {
    let fd = kernel_socket(
        libc::AF_INET6,
        libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0,
    )?;
    let raw = fd.as_raw_fd();
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    setopt(raw, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    setopt(raw, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    // Room for bursts of MTU-sized packets (a window, a READ's responses): beyond the
    // system's rmem_max/wmem_max where we may (root), else as much as it allows.
    for (force, plain) in
        [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
    {
        if setopt(raw, libc::SOL_SOCKET, force, SOCKET_BUF).is_err() {
            let _ = setopt(raw, libc::SOL_SOCKET, plain, SOCKET_BUF);
        }
    }
    let (sa, len) = sockaddr(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)));
    // SAFETY: sa is a valid sockaddr_in6 of length len.
    check(unsafe { libc::bind(raw, (&sa as *const libc::sockaddr_in6).cast(), len) })?;
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut got: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut glen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: got has room for glen bytes.
    check(unsafe {
        libc::getsockname(raw, (&mut got as *mut libc::sockaddr_in6).cast(), &mut glen)
    })?;
    Ok((fd, u16::from_be(got.sin6_port)))
}

/// `addr` as a sockaddr_in6 (IPv4 as IPv4-mapped).
pub fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_in6, libc::socklen_t) {
    let ip = match addr.ip() {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_port = addr.port().to_be();
    sa.sin6_addr.s6_addr = ip.octets();
    (sa, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
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
    let fd = Arc::new(Sock { fd, port, reading: Mutex::new(()) });
    super::recv::watch(fd.clone())?;
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
    let (mut sa, salen) = sockaddr(dst);
    let mut iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let src6 = match src {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    let info =
        libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: src6.octets() }, ipi6_ifindex: 0 };
    // u64 alignment is enough for cmsghdr.
    let mut cbuf = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::in6_pktinfo>() as u32) };
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut sa as *mut libc::sockaddr_in6).cast();
    msg.msg_namelen = salen;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as usize;
    // SAFETY: msg_control points at cbuf (64 bytes >= space), so the first header and its data
    // lie inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::IPPROTO_IPV6;
        (*c).cmsg_type = libc::IPV6_PKTINFO;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
    }
    for _ in 0..2 {
        // SAFETY: msg describes valid buffers for the duration of the call.
        match check(unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) } as libc::c_int) {
            Err(e) if e == Errno::EAGAIN => {
                // Our own send buffer is full (a burst): wait for it to drain a little rather
                // than drop the packet and pay a retransmission timeout.
                let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, SEND_WAIT_MS) };
            }
            r => return r.map(|_| ()),
        }
    }
    Err(Errno::EAGAIN)
}

/// How long a send waits for room in a full socket buffer before the packet is dropped.
const SEND_WAIT_MS: i32 = 20;

/// One received datagram: its length, the sender, and the address it was sent to.
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub to: IpAddr,
}

/// Receives one datagram without blocking (`None`: nothing waiting, or no destination address).
pub fn recv_one(fd: RawFd, buf: &mut [u8]) -> Option<Result<Received>> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut cbuf = [0u64; 16];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut sa as *mut libc::sockaddr_in6).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = Errno::last();
        return (e != Errno::EAGAIN).then_some(Err(e));
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 || sa.sin6_family != libc::AF_INET6 as libc::sa_family_t
    {
        return Some(Err(Errno::EINVAL));
    }
    let from = SocketAddr::V6(SocketAddrV6::new(
        Ipv6Addr::from(sa.sin6_addr.s6_addr),
        u16::from_be(sa.sin6_port),
        0,
        0,
    ));
    let mut to = None;
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of headers; the CMSG
    // macros stay inside them, and each header's type says what its data holds.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_PKTINFO {
                let i: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                to = Some(IpAddr::V6(Ipv6Addr::from(i.ipi6_addr.s6_addr)));
            } else if (*c).cmsg_level == libc::IPPROTO_IP
                && (*c).cmsg_type == libc::IP_PKTINFO
                && to.is_none()
            {
                let i: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                to = Some(IpAddr::V4(u32::from_be(i.ipi_addr.s_addr).into()));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let to = to?;
    Some(Ok(Received { len: n as usize, from, to }))
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
