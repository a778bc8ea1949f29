//! Where a peer is: in our network namespace (the shared-memory rings reach it) or behind the
//! network (RoCEv2 over UDP), and the path MTU the kernel's route towards it allows.

use crate::provider::soft::roce::{mtu, ROCE_UDP_PORT};
use crate::runtime::udp;
use std::net::IpAddr;

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
    let iface_mtu = udp::route(ip, ROCE_UDP_PORT).ok()?.iface_mtu.filter(|&m| m > 0)?;
    mtu::ib_mtu_for(iface_mtu, ip.is_ipv6())
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
