//! Address and route resolution towards another namespace or host, with the kernel's routing:
//! a UDP socket `connect`ed to the destination says which source address the kernel picks
//! (`getsockname`) and the MTU of the route's interface (`IP_MTU` / `IPV6_MTU`). The path MTU
//! follows from that as RoCE's does ([`crate::provider::soft::roce::mtu`]: 1500 gives 1024).

use super::udp::sockaddr6;
use crate::errno::{Errno, Result};
use crate::provider::soft::roce::{mtu, ROCE_UDP_PORT};
use crate::runtime::socket::kernel_socket;
use crate::sys::ibv_mtu;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// What the kernel's routing says about a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Our address the kernel sends from.
    pub src: IpAddr,
    /// The path MTU (`ibv_mtu` enumerator).
    pub path_mtu: u32,
}

/// Resolves `dst`: `ENETUNREACH` / `EHOSTUNREACH` (or another errno) if the kernel has no route.
pub fn resolve(dst: IpAddr) -> Result<Route> {
    let fd = kernel_socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)?;
    let sa = sockaddr6(SocketAddr::new(dst, ROCE_UDP_PORT));
    let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: sa is a valid sockaddr_in6 of length len. A UDP connect sends nothing.
    if unsafe { libc::connect(fd.as_raw_fd(), (&sa as *const libc::sockaddr_in6).cast(), len) } < 0
    {
        return Err(Errno::last());
    }
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut me: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut mlen = len;
    // SAFETY: me has room for mlen bytes.
    if unsafe {
        libc::getsockname(fd.as_raw_fd(), (&mut me as *mut libc::sockaddr_in6).cast(), &mut mlen)
    } < 0
    {
        return Err(Errno::last());
    }
    let src = super::udp::unmapped(std::net::Ipv6Addr::from(me.sin6_addr.s6_addr));
    let (level, name) = if dst.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut iface_mtu: libc::c_int = 0;
    let mut ilen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reading an int option into a valid int.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut iface_mtu as *mut libc::c_int).cast(),
            &mut ilen,
        )
    };
    let iface_mtu = if r < 0 { 1500 } else { iface_mtu.max(0) as u32 };
    Ok(Route { src, path_mtu: path_mtu_for(iface_mtu, dst.is_ipv6()) })
}

/// The `ibv_mtu` of a path over an interface of `iface_mtu` bytes (256 if even that does not
/// fit: the smallest the wire allows).
pub fn path_mtu_for(iface_mtu: u32, ipv6: bool) -> u32 {
    mtu::ib_mtu_for(iface_mtu, ipv6)
        .and_then(mtu::ibv_mtu_enum)
        .map_or(ibv_mtu::IBV_MTU_256, u32::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethernet_mtu_gives_1024() {
        assert_eq!(path_mtu_for(1500, false), ibv_mtu::IBV_MTU_1024);
        assert_eq!(path_mtu_for(1500, true), ibv_mtu::IBV_MTU_1024);
        assert_eq!(path_mtu_for(9000, false), ibv_mtu::IBV_MTU_4096);
        assert_eq!(path_mtu_for(65536, false), ibv_mtu::IBV_MTU_4096);
    }

    #[test]
    fn loopback_route_resolves_to_loopback() {
        let r = resolve("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(r.src, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.path_mtu, ibv_mtu::IBV_MTU_4096);
    }
}
