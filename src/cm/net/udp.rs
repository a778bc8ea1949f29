//! The CM's UDP sockets: dual-stack (IPv4 as v4-mapped IPv6), non-blocking, Don't Fragment
//! (so the IPv4 ID is 0 and the ICRC is computable), and with the packet information that
//! tells, for each datagram, the local address it came to (the ICRC covers both addresses).
//! Sends name their source address the same way, so the ICRC we compute is the one on the wire.

use crate::errno::{Errno, Result};
use crate::runtime::socket::kernel_socket;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

fn check(r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

fn setopt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> Result<()> {
    // SAFETY: setting an int option from a valid int.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// IPv4 addresses as v4-mapped IPv6, as a dual-stack socket sees them.
pub fn mapped(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The plain address of a v4-mapped one.
pub fn unmapped(ip: Ipv6Addr) -> IpAddr {
    ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4)
}

pub fn sockaddr6(a: SocketAddr) -> libc::sockaddr_in6 {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    s.sin6_port = a.port().to_be();
    s.sin6_addr.s6_addr = mapped(a.ip()).octets();
    s
}

/// Opens a dual-stack UDP socket bound to `[::]:port` (0: an ephemeral port).
pub fn open(port: u16) -> Result<OwnedFd> {
    let fd = kernel_socket(
        libc::AF_INET6,
        libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0,
    )?;
    let raw = fd.as_raw_fd();
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    setopt(raw, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    setopt(raw, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    let sa = sockaddr6(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    // SAFETY: sa is a valid sockaddr_in6 of the length given.
    check(unsafe {
        libc::bind(
            raw,
            (&sa as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// The port a socket is bound to.
pub fn local_port(fd: RawFd) -> Result<u16> {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: sa has room for len bytes.
    check(unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in6).cast(), &mut len) })?;
    Ok(u16::from_be(sa.sin6_port))
}

/// Sends one datagram from `src` (an address of ours) to `dst`.
pub fn send_from(fd: RawFd, src: IpAddr, dst: SocketAddr, data: &[u8]) -> Result<()> {
    let mut sa = sockaddr6(dst);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
    let info = libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr { s6_addr: mapped(src).octets() },
        ipi6_ifindex: 0,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut sa as *mut libc::sockaddr_in6).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen =
        unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::in6_pktinfo>() as u32) } as usize;
    // SAFETY: msg_control points at cbuf, large enough for one in6_pktinfo cmsg (64 bytes).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::IPPROTO_IPV6;
        (*c).cmsg_type = libc::IPV6_PKTINFO;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
    }
    // SAFETY: msg describes valid buffers for the duration of the call.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// One received datagram: its length, the sender, and the local address it was sent to.
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub to: IpAddr,
}

/// Receives one datagram without blocking; `Ok(None)` when none is pending. Datagrams whose
/// local address the kernel did not report are skipped (their ICRC cannot be checked).
pub fn recv(fd: RawFd, buf: &mut [u8]) -> Result<Option<Received>> {
    loop {
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
            return if e == Errno::EAGAIN { Ok(None) } else { Err(e) };
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 || sa.sin6_family != libc::AF_INET6 as u16 {
            continue;
        }
        let from = SocketAddr::new(
            unmapped(Ipv6Addr::from(sa.sin6_addr.s6_addr)),
            u16::from_be(sa.sin6_port),
        );
        let mut to = None;
        // SAFETY: walking the control messages the kernel wrote into cbuf, within
        // msg_controllen; each data read is unaligned and of the type its level/type names.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let i =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>());
                        to = Some(IpAddr::V4(u32::from_be(i.ipi_addr.s_addr).into()));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let i = std::ptr::read_unaligned(
                            libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(),
                        );
                        to = Some(unmapped(Ipv6Addr::from(i.ipi6_addr.s6_addr)));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let Some(to) = to else { continue };
        return Ok(Some(Received { len: n as usize, from, to }));
    }
}
