//! Where a peer is: in our network namespace (the shared-memory rings reach it) or behind the
//! network (RoCEv2 over UDP), and the path MTU the kernel's route towards it allows.

use crate::provider::soft::roce::mtu;
use crate::runtime::socket::kernel_socket;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// The IP address a GID stands for (IPv4-mapped GIDs are IPv4).
pub fn ip_of_gid(gid: &[u8; 16]) -> IpAddr {
    let a = std::net::Ipv6Addr::from(*gid);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// Whether `ip` belongs to an interface of our network namespace (loopback included). A QPN
/// alone cannot tell: the same QPN may exist in two namespaces.
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || crate::runtime::ifaddrs::local_addresses().contains(&ip)
}

/// The IB path MTU towards `ip`: the largest IB MTU whose packets fit the MTU of the route the
/// kernel picks (a connected UDP socket's `IP_MTU`), `None` if there is no route.
pub fn path_mtu(ip: IpAddr) -> Option<u32> {
    let v6 = ip.is_ipv6();
    let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = kernel_socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0).ok()?;
    let dst = SocketAddr::new(ip, crate::provider::soft::roce::ROCE_UDP_PORT);
    let r = match dst {
        SocketAddr::V4(a) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_port = a.port().to_be();
            sa.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            // SAFETY: sa is a valid sockaddr_in.
            unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        SocketAddr::V6(_) => {
            let (sa, len) = super::endpoint::sockaddr(dst);
            // SAFETY: sa is a valid sockaddr_in6 of length len.
            unsafe { libc::connect(fd.as_raw_fd(), (&sa as *const libc::sockaddr_in6).cast(), len) }
        }
    };
    if r < 0 {
        return None;
    }
    let (level, name) =
        if v6 { (libc::IPPROTO_IPV6, libc::IPV6_MTU) } else { (libc::IPPROTO_IP, libc::IP_MTU) };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option into v.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), level, name, (&mut v as *mut libc::c_int).cast(), &mut len)
    };
    if r < 0 || v <= 0 {
        return None;
    }
    mtu::ib_mtu_for(v as u32, v6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_its_mtu_is_the_largest() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(!is_local("192.0.2.1".parse().unwrap()), "TEST-NET-1 is nobody's interface");
        assert_eq!(path_mtu("127.0.0.1".parse().unwrap()), Some(4096));
    }

    #[test]
    fn gids_map_back_to_addresses() {
        let g = std::net::Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped().octets();
        assert_eq!(ip_of_gid(&g), "10.1.2.3".parse::<IpAddr>().unwrap());
    }
}
