//! The library's UDP sockets (the CM's and the network path's): dual-stack (IPv4 as v4-mapped
//! IPv6), non-blocking, Don't Fragment (so the IPv4 ID is 0 and an ICRC over the IP header is
//! computable), and with the packet information that tells, for each datagram, the local
//! address it came to. Sends pin their source address the same way, so what a peer checks is
//! what we computed. Also the kernel's route toward an address (source address, interface MTU).

use crate::errno::{check, Errno, Result};
use crate::runtime::socket::kernel_socket;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

pub mod gso;

const SOCKADDR6_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;

fn setopt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> Result<()> {
    // SAFETY: setting an int option from a valid int of the length given.
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

/// `a` as a sockaddr_in6 (IPv4 as v4-mapped).
pub fn sockaddr6(a: SocketAddr) -> libc::sockaddr_in6 {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    s.sin6_port = a.port().to_be();
    s.sin6_addr.s6_addr = mapped(a.ip()).octets();
    s
}

/// Opens a dual-stack UDP socket bound to `[::]:port` (0: an ephemeral port). With `buf`, asks
/// for that many bytes of socket buffer each way: beyond rmem_max/wmem_max where we may (root),
/// else as much as the system allows.
pub fn open(port: u16, buf: Option<libc::c_int>) -> Result<OwnedFd> {
    open_socket(port, buf, false)
}

/// A dual-stack socket on `[::]:port` that lets sockets bound to multicast groups on the same
/// port coexist with it (SO_REUSEADDR; only sockets that set it too may bind there), and that
/// receives no multicast itself. The caller makes sure it is the one such socket (port 4791's
/// owner takes a lock first).
pub fn open_shared(port: u16) -> Result<OwnedFd> {
    open_socket(port, None, true)
}

fn open_socket(port: u16, buf: Option<libc::c_int>, shared: bool) -> Result<OwnedFd> {
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
    if let Some(size) = buf {
        for (force, plain) in
            [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
        {
            if setopt(raw, libc::SOL_SOCKET, force, size).is_err() {
                let _ = setopt(raw, libc::SOL_SOCKET, plain, size);
            }
        }
    }
    if shared {
        setopt(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        // A wildcard socket would otherwise get a copy of every group's packets that another
        // socket of the host joined.
        setopt(raw, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
        let _ = setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_ALL, 0); // Linux >= 4.20
    }
    let sa = sockaddr6(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    // SAFETY: sa is a valid sockaddr_in6 of the length given.
    check(unsafe { libc::bind(raw, (&sa as *const libc::sockaddr_in6).cast(), SOCKADDR6_LEN) })?;
    Ok(fd)
}

/// The local name of an IPv6 socket.
fn local_name(fd: RawFd) -> Result<libc::sockaddr_in6> {
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = SOCKADDR6_LEN;
    // SAFETY: sa has room for len bytes.
    check(unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in6).cast(), &mut len) })?;
    Ok(sa)
}

/// The port a socket is bound to.
pub fn local_port(fd: RawFd) -> Result<u16> {
    local_name(fd).map(|sa| u16::from_be(sa.sin6_port))
}

/// A msghdr naming `sa`, the one buffer `iov` and the first `controllen` bytes of `cbuf` (at
/// most all of it; u64 alignment is enough for cmsghdr). It holds raw pointers to all three:
/// the caller keeps them alive, and unmoved, until the system call returns.
fn msghdr(
    sa: &mut libc::sockaddr_in6,
    iov: &mut libc::iovec,
    cbuf: &mut [u64],
    controllen: usize,
) -> libc::msghdr {
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (sa as *mut libc::sockaddr_in6).cast();
    msg.msg_namelen = SOCKADDR6_LEN;
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_controllen = controllen.min(std::mem::size_of_val(cbuf));
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg
}

/// Sends one datagram from `src` (an address of ours, pinned with `IPV6_PKTINFO`) to `dst`,
/// without blocking (`EAGAIN` when the socket buffer is full).
pub fn send_from(fd: RawFd, src: IpAddr, dst: SocketAddr, data: &[u8]) -> Result<()> {
    send_batch_from(fd, src, dst, &[data]).and_then(|n| {
        if n == 1 {
            Ok(())
        } else {
            Err(Errno::EAGAIN)
        }
    })
}

/// Most datagrams one `send_batch_from` call takes.
pub const SEND_BATCH: usize = 64;

/// Sends up to [`SEND_BATCH`] datagrams from `src` to `dst` with one system call (`sendmmsg`),
/// without blocking: how many went (the first ones; fewer when the socket buffer filled), or
/// the error if the first could not go.
pub fn send_batch_from(fd: RawFd, src: IpAddr, dst: SocketAddr, data: &[&[u8]]) -> Result<usize> {
    let count = data.len().min(SEND_BATCH);
    if count == 0 {
        return Ok(0);
    }
    let mut sa = sockaddr6(dst);
    let info = libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr { s6_addr: mapped(src).octets() },
        ipi6_ifindex: 0,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::in6_pktinfo>() as u32) };
    let mut iov0 = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
    let msg = msghdr(&mut sa, &mut iov0, &mut cbuf, space as usize);
    // SAFETY: msg_control points at cbuf, large enough for one in6_pktinfo cmsg (64 bytes), so
    // the first header and its data lie inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::IPPROTO_IPV6;
        (*c).cmsg_type = libc::IPV6_PKTINFO;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
    }
    let mut iovs = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; SEND_BATCH];
    // SAFETY: all-zero is a valid mmsghdr; each is filled in below.
    let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
    for (i, d) in data.iter().take(count).enumerate() {
        iovs[i] = libc::iovec { iov_base: d.as_ptr() as *mut _, iov_len: d.len() };
        // Every datagram shares the one destination name and source-address message (the
        // kernel only reads them).
        hdrs[i].msg_hdr = msg;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
    }
    let Some(_wire) = super::pcap::wire() else { return Ok(count) };
    // SAFETY: every header points at the shared name and control buffer and at its own
    // iovec, all alive and unmoved until the call returns; the data are borrowed slices.
    let r = unsafe {
        libc::sendmmsg(
            fd,
            hdrs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    if super::pcap::on() {
        captured_sent(fd, src, dst, data[..r as usize].iter().map(|d| (0, *d)));
    }
    Ok(r as usize)
}

/// `RDMASHIM_PCAP`: the datagrams `fd` sent from `src` to `dst`, each with its IPv4 ID.
fn captured_sent<'a>(
    fd: RawFd,
    src: IpAddr,
    dst: SocketAddr,
    data: impl Iterator<Item = (u16, &'a [u8])>,
) {
    let Ok(port) = local_port(fd) else { return };
    let from = SocketAddr::new(src, port);
    for (id, d) in data {
        super::pcap::datagram(from, dst, id, d);
    }
}

/// `RDMASHIM_PCAP`: a buffer `fd` received (see [`Received`]).
fn captured_received(fd: RawFd, r: &Received, data: &[u8]) {
    if let Ok(port) = local_port(fd) {
        super::pcap::received(r.from, r.to, port, data, r.segment);
    }
}

/// One received datagram: its length, the sender, and the local address it was sent to
/// (`None` if the kernel did not say). Addresses are plain (IPv4 not v4-mapped). On a socket
/// with [`gso::enable_gro`], a buffer may hold a burst of datagrams: each `segment` bytes long
/// but the last, which may be shorter.
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub to: Option<IpAddr>,
    /// The length of each datagram in the buffer (`len` when it holds one).
    pub segment: usize,
}

/// Receives one datagram without blocking; `Ok(None)` when none is pending. A datagram that
/// was truncated or has no IPv6 sender name is consumed and reported as `EINVAL`.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> Result<Option<Received>> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut cbuf = [0u64; CBUF_WORDS];
    let mut msg = msghdr(&mut sa, &mut iov, &mut cbuf, usize::MAX);
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = Errno::last();
        return if e == Errno::EAGAIN { Ok(None) } else { Err(e) };
    }
    let r = parse(&msg, &sa, n as usize)?;
    if super::pcap::on() {
        captured_received(fd, &r, &buf[..r.len]);
    }
    Ok(Some(r))
}

/// Control-message room per datagram (both packet-information messages and the segment size
/// fit).
const CBUF_WORDS: usize = 16;

/// What a received `msg` (filled by the kernel, `n` bytes of data) says: the sender `sa`
/// and the local address from the packet information.
fn parse(msg: &libc::msghdr, sa: &libc::sockaddr_in6, n: usize) -> Result<Received> {
    if msg.msg_flags & libc::MSG_TRUNC != 0 || sa.sin6_family != libc::AF_INET6 as libc::sa_family_t
    {
        return Err(Errno::EINVAL);
    }
    let from =
        SocketAddr::new(unmapped(Ipv6Addr::from(sa.sin6_addr.s6_addr)), u16::from_be(sa.sin6_port));
    let mut to = None;
    let mut segment = n;
    // SAFETY: walking the control messages the kernel wrote into the control buffer, within
    // msg_controllen; each data read is unaligned and of the type its level/type names.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let i: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    to = Some(unmapped(Ipv6Addr::from(i.ipi6_addr.s6_addr)));
                }
                // An IPv4 datagram carries both; the IPv6 one (the same address) wins.
                (libc::IPPROTO_IP, libc::IP_PKTINFO) if to.is_none() => {
                    let i: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    to = Some(IpAddr::V4(u32::from_be(i.ipi_addr.s_addr).into()));
                }
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let g: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    if g > 0 {
                        segment = (g as usize).min(n);
                    }
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    // An empty datagram is one segment of length 0 (chunks of it: none).
    Ok(Received { len: n, from, to, segment: segment.max(1) })
}

/// Buffers for receiving up to `count` datagrams of up to `size` bytes with one system call
/// (`recvmmsg`): a busy socket costs one call per batch instead of one per datagram.
pub struct RecvBatch {
    size: usize,
    data: Vec<u8>,
    names: Vec<libc::sockaddr_in6>,
    cbufs: Vec<[u64; CBUF_WORDS]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    got: usize,
}

// SAFETY: the raw pointers inside `iovs`/`hdrs` point only into this value's own heap buffers
// and are rebuilt before every use; nothing is shared.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub fn new(count: usize, size: usize) -> RecvBatch {
        let count = count.max(1);
        // SAFETY: all-zero is a valid sockaddr_in6, iovec and mmsghdr (null pointers, zero
        // lengths); they are filled in before each call.
        let (name, iov, hdr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
        RecvBatch {
            size,
            data: vec![0; count * size],
            names: vec![name; count],
            cbufs: vec![[0; CBUF_WORDS]; count],
            iovs: vec![iov; count],
            hdrs: vec![hdr; count],
            got: 0,
        }
    }

    /// Receives what is pending, up to the batch's size, without blocking: how many came
    /// (0 when none is pending).
    pub fn recv(&mut self, fd: RawFd) -> Result<usize> {
        self.got = 0;
        let count = self.hdrs.len();
        for i in 0..count {
            self.iovs[i] = libc::iovec {
                // SAFETY: i * size + size <= data.len(): the slot lies inside `data`.
                iov_base: unsafe { self.data.as_mut_ptr().add(i * self.size) }.cast(),
                iov_len: self.size,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_in6).cast();
            h.msg_namelen = SOCKADDR6_LEN;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.cbufs[i].as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of::<[u64; CBUF_WORDS]>();
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: every header points at its own name, iovec and control buffer, all alive and
        // unmoved (this value is borrowed mutably) for the duration of the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = Errno::last();
            return if e == Errno::EAGAIN { Ok(0) } else { Err(e) };
        }
        self.got = n as usize;
        if super::pcap::on() {
            for i in 0..self.got {
                if let Some((Ok(r), data)) = self.get(i) {
                    captured_received(fd, &r, data);
                }
            }
        }
        Ok(self.got)
    }

    /// Datagram `i` of the last `recv`: what it says, and its bytes (`EINVAL`: truncated or
    /// without an IPv6 sender name).
    pub fn get(&self, i: usize) -> Option<(Result<Received>, &[u8])> {
        if i >= self.got {
            return None;
        }
        let h = &self.hdrs[i];
        let n = (h.msg_len as usize).min(self.size);
        let data = &self.data[i * self.size..i * self.size + n];
        Some((parse(&h.msg_hdr, &self.names[i], n), data))
    }
}

/// What the kernel's routing says about a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Our address the kernel sends from.
    pub src: IpAddr,
    /// The MTU of the route's interface (`None` if the kernel did not say).
    pub iface_mtu: Option<u32>,
}

/// The kernel's route toward `dst` (port `port`): a UDP socket `connect`ed to it (which sends
/// nothing) names the source address (`getsockname`) and the interface MTU (`IP_MTU` /
/// `IPV6_MTU`). `ENETUNREACH` / `EHOSTUNREACH` (or another errno) if there is no route.
pub fn route(dst: IpAddr, port: u16) -> Result<Route> {
    let fd = kernel_socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)?;
    let sa = sockaddr6(SocketAddr::new(dst, port));
    // SAFETY: sa is a valid sockaddr_in6 of the length given.
    check(unsafe {
        libc::connect(fd.as_raw_fd(), (&sa as *const libc::sockaddr_in6).cast(), SOCKADDR6_LEN)
    })?;
    let src = unmapped(Ipv6Addr::from(local_name(fd.as_raw_fd())?.sin6_addr.s6_addr));
    let (level, name) = if dst.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reading an int option into a valid int of the length given.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), level, name, (&mut v as *mut libc::c_int).cast(), &mut len)
    };
    let iface_mtu = (r >= 0).then_some(v.max(0) as u32);
    Ok(Route { src, iface_mtu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_round_trips() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(mapped(v4), "::ffff:10.1.2.3".parse::<Ipv6Addr>().unwrap());
        assert_eq!(unmapped(mapped(v4)), v4);
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(unmapped(mapped(v6)), v6);
    }

    #[test]
    fn datagram_carries_its_destination_address() {
        let a = open(0, None).unwrap();
        let b = open(0, Some(1 << 20)).unwrap();
        let (pa, pb) = (local_port(a.as_raw_fd()).unwrap(), local_port(b.as_raw_fd()).unwrap());
        assert_ne!(pb, 0);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        send_from(a.as_raw_fd(), lo, SocketAddr::new(lo, pb), b"hello").unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..1000 {
            got = recv(b.as_raw_fd(), &mut buf).unwrap();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let r = got.expect("the datagram arrives on loopback");
        assert_eq!(&buf[..r.len], b"hello");
        assert_eq!(r.from, SocketAddr::new(lo, pa));
        assert_eq!(r.to, Some(lo));
        assert!(recv(b.as_raw_fd(), &mut buf).unwrap().is_none());
    }

    #[test]
    fn batches_go_and_come_in_order_with_their_addresses() {
        let a = open(0, None).unwrap();
        let b = open(0, Some(1 << 20)).unwrap();
        let (pa, pb) = (local_port(a.as_raw_fd()).unwrap(), local_port(b.as_raw_fd()).unwrap());
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + usize::from(i) * 3]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        assert_eq!(send_batch_from(a.as_raw_fd(), lo, SocketAddr::new(lo, pb), &refs).unwrap(), 40);
        // Batches of 16 (smaller than what waits) and buffers of 64 bytes (the longest
        // datagram, 118 bytes, is truncated and reported as EINVAL).
        let mut batch = RecvBatch::new(16, 64);
        let mut seen = Vec::new();
        for _ in 0..1000 {
            let n = batch.recv(b.as_raw_fd()).unwrap();
            for i in 0..n {
                let (r, data) = batch.get(i).unwrap();
                match r {
                    Ok(r) => {
                        assert_eq!(
                            (r.from, r.to, r.len),
                            (SocketAddr::new(lo, pa), Some(lo), data.len())
                        );
                        seen.push(data.to_vec());
                    }
                    Err(e) => {
                        assert_eq!(e, Errno::EINVAL);
                        seen.push(Vec::new());
                    }
                }
            }
            assert!(batch.get(n).is_none());
            if seen.len() == 40 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(seen.len(), 40);
        for (i, got) in seen.iter().enumerate() {
            if msgs[i].len() <= 64 {
                assert_eq!(got, &msgs[i], "datagram {i}");
            } else {
                assert!(got.is_empty(), "datagram {i} is truncated");
            }
        }
        assert_eq!(batch.recv(b.as_raw_fd()).unwrap(), 0);
    }

    #[test]
    fn loopback_route_is_loopback() {
        let r = route("127.0.0.1".parse().unwrap(), 4791).unwrap();
        assert_eq!(r.src, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert!(r.iface_mtu.is_some_and(|m| m >= 1500));
    }
}
