//! The addresses of this network namespace's interfaces (the GID table's source, and how the
//! soft provider tells a peer in our namespace from one behind the network).

use std::net::IpAddr;

/// This host's IP addresses, loopback first: the source of the GID table.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifa with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } == 0 {
        let mut p = ifa;
        while !p.is_null() {
            // SAFETY: p walks the list returned by getifaddrs.
            let a = unsafe { (*p).ifa_addr };
            if !a.is_null() {
                // SAFETY: a points at a sockaddr whose family says its real type.
                match unsafe { (*a).sa_family } as i32 {
                    libc::AF_INET => {
                        // SAFETY: AF_INET addresses are sockaddr_in.
                        let sin = unsafe { &*(a as *const libc::sockaddr_in) };
                        v4.push(IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        // SAFETY: AF_INET6 addresses are sockaddr_in6.
                        let sin6 = unsafe { &*(a as *const libc::sockaddr_in6) };
                        v6.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            // SAFETY: as above.
            p = unsafe { (*p).ifa_next };
        }
        // SAFETY: ifa came from getifaddrs.
        unsafe { libc::freeifaddrs(ifa) };
    }
    v4.sort_by_key(|a| !a.is_loopback());
    v6.sort_by_key(|a| !a.is_loopback());
    v4.dedup();
    v6.dedup();
    v4.into_iter().chain(v6).collect()
}

/// The index of the interface that holds `ip` (0 if none does): the net device behind a GID
/// (`ibv_gid_entry.ndev_ifindex`).
pub fn ifindex_of(ip: IpAddr) -> u32 {
    let mut found = 0;
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifa with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return 0;
    }
    let mut p = ifa;
    while !p.is_null() && found == 0 {
        // SAFETY: p walks the list returned by getifaddrs.
        let (a, name) = unsafe { ((*p).ifa_addr, (*p).ifa_name) };
        if !a.is_null() && !name.is_null() {
            // SAFETY: a points at a sockaddr whose family says its real type.
            let this = match unsafe { (*a).sa_family } as i32 {
                // SAFETY: AF_INET addresses are sockaddr_in.
                libc::AF_INET => Some(IpAddr::from(
                    u32::from_be(unsafe { &*(a as *const libc::sockaddr_in) }.sin_addr.s_addr)
                        .to_be_bytes(),
                )),
                // SAFETY: AF_INET6 addresses are sockaddr_in6.
                libc::AF_INET6 => Some(IpAddr::from(
                    unsafe { &*(a as *const libc::sockaddr_in6) }.sin6_addr.s6_addr,
                )),
                _ => None,
            };
            if this == Some(ip) {
                // SAFETY: name is the interface's NUL-terminated name.
                found = unsafe { libc::if_nametoindex(name) };
            }
        }
        // SAFETY: as above.
        p = unsafe { (*p).ifa_next };
    }
    // SAFETY: ifa came from getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
    found
}
