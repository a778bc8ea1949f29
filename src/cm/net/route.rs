//! Address and route resolution towards another namespace or host, with the kernel's routing
//! ([`crate::runtime::udp::route`]: the source address the kernel picks and the MTU of the
//! route's interface). The path MTU
//! follows from that as RoCE's does ([`crate::provider::soft::roce::mtu`]: 1500 gives 1024).

use crate::errno::Result;
use crate::provider::soft::roce::{mtu, ROCE_UDP_PORT};
use crate::runtime::udp;
use crate::sys::ibv_mtu;
use std::net::IpAddr;

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
    let r = udp::route(dst, ROCE_UDP_PORT)?;
    // An interface that does not say is taken for Ethernet.
    let iface_mtu = r.iface_mtu.unwrap_or(1500);
    Ok(Route { src: r.src, path_mtu: path_mtu_for(iface_mtu, dst.is_ipv6()) })
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
