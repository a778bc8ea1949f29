//! The addresses of this network namespace's interfaces (the GID table's source, and how the
//! soft provider tells a peer in our namespace from one behind the network).

use std::net::IpAddr;

/// Calls `f` with each interface address of this namespace and its interface's name, until
/// `f` says stop (`false`).
fn each_address(mut f: impl FnMut(IpAddr, &std::ffi::CStr) -> bool) {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifa with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list returned by getifaddrs.
        let (a, name) = unsafe { ((*p).ifa_addr, (*p).ifa_name) };
        if !a.is_null() && !name.is_null() {
            // SAFETY: a points at a sockaddr whose family says its real type.
            let ip = match unsafe { (*a).sa_family } as i32 {
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
            // SAFETY: name is the interface's NUL-terminated name, alive until freeifaddrs.
            let name = unsafe { std::ffi::CStr::from_ptr(name) };
            if ip.is_some_and(|ip| !f(ip, name)) {
                break;
            }
        }
        // SAFETY: p is a non-NULL entry of the list getifaddrs returned, alive until freeifaddrs.
        p = unsafe { (*p).ifa_next };
    }
    // SAFETY: ifa came from getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
}

/// This host's IP addresses, loopback first: the source of the GID table.
pub fn local_addresses() -> Vec<IpAddr> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    each_address(|ip, _| {
        if ip.is_ipv4() {
            v4.push(ip)
        } else {
            v6.push(ip)
        }
        true
    });
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
    each_address(|a, name| {
        if a == ip {
            // SAFETY: name is a NUL-terminated interface name.
            found = unsafe { libc::if_nametoindex(name.as_ptr()) };
        }
        found == 0
    });
    found
}
