//! The process's CM device (the context and PD ids bind to) and local addressing: socket
//! addresses in their C and wire forms, local addresses, GIDs and their indices.

use super::*;

/// The device context and default PD the CM binds ids to (one per process, as librdmacm keeps
/// one per device).
struct CmDevice {
    ctx: usize,
    pd: usize,
}

/// Opened on first use, and again in a forked child (the parent's context is not the child's).
static CM_DEVICE: PerProcess<Mutex<Option<(u64, CmDevice)>>> = PerProcess::new(|| Mutex::new(None));

fn cm_device() -> Result<(usize, usize)> {
    let generation = crate::runtime::fork::generation();
    let mut d = lock(CM_DEVICE.get());
    if let Some((g, dev)) = d.as_ref() {
        if *g == generation {
            return Ok((dev.ctx, dev.pd));
        }
    }
    let ctx = device::Context::open(device::device_ptr())?;
    let c = objects().contexts.get(ctx)?;
    let pd = crate::verbs::pd::Pd::alloc(c)?;
    *d = Some((generation, CmDevice { ctx: ctx as usize, pd: pd as usize }));
    Ok((ctx as usize, pd as usize))
}

/// The context `rdma_get_devices` returns and ids are bound to.
pub fn cm_context() -> Result<*mut ibv_context> {
    cm_device().map(|(ctx, _)| ctx as *mut ibv_context)
}

pub(in crate::cm) fn cm_pd() -> Result<*mut ibv_pd> {
    cm_device().map(|(_, pd)| pd as *mut ibv_pd)
}

// --- socket addresses ----------------------------------------------------------------------

/// Reads a socket address given by the caller (`EINVAL` for other families, like rdma-core).
///
/// # Safety
/// `sa` is NULL or points at a sockaddr of the size its family implies.
pub unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Result<SocketAddr> {
    // SAFETY: per the function's contract.
    let fam = unsafe { sa.as_ref() }.ok_or(Errno::EINVAL)?.sa_family as i32;
    match fam {
        libc::AF_INET => {
            // SAFETY: AF_INET addresses are sockaddr_in.
            let s = unsafe { &*(sa as *const libc::sockaddr_in) };
            Ok(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                u16::from_be(s.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 addresses are sockaddr_in6.
            let s = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Ok(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                u16::from_be(s.sin6_port),
            ))
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Writes the id's source address.
///
/// # Safety
/// `r` is a live `rdma_cm_id` and the caller holds its state lock (the only Rust writers).
pub(in crate::cm) unsafe fn set_src(r: *mut rdma_cm_id, a: &SocketAddr) {
    // SAFETY: per the function's contract; a raw write of one field, no reference made.
    unsafe {
        std::ptr::addr_of_mut!((*r).route.addr.src_addr_union)
            .cast::<libc::sockaddr_storage>()
            .write(storage(a))
    };
}

/// Writes the id's destination address.
///
/// # Safety
/// As `set_src`.
pub(in crate::cm) unsafe fn set_dst(r: *mut rdma_cm_id, a: &SocketAddr) {
    // SAFETY: per the function's contract; a raw write of one field, no reference made.
    unsafe {
        std::ptr::addr_of_mut!((*r).route.addr.dst_addr_union)
            .cast::<libc::sockaddr_storage>()
            .write(storage(a))
    };
}

fn storage(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let dst = &mut st;
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(dst as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s = unsafe { &mut *(dst as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
        }
    }
    st
}

pub(in crate::cm) fn addr_to_wire(a: &SocketAddr) -> [u8; 28] {
    let mut w = [0u8; 28];
    let ip = match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    w[..16].copy_from_slice(&ip.octets());
    w[16..18].copy_from_slice(&a.port().to_be_bytes());
    w
}

pub(in crate::cm) fn addr_from_wire(w: &[u8; 28]) -> SocketAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&w[..16]);
    let port = u16::from_be_bytes([w[16], w[17]]);
    let ip6 = Ipv6Addr::from(o);
    match ip6.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
        None => SocketAddr::new(IpAddr::V6(ip6), port),
    }
}

/// `true` if `ip` belongs to this host (a socket can bind to it).
pub(in crate::cm) fn is_local(ip: IpAddr) -> bool {
    // The GID table answers, as it does for ibv_query_gid and UD sends (re-read on a miss).
    ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || device::is_local_ip(ip)
}

pub(in crate::cm) fn random_port() -> u16 {
    let mut r: u16 = 0;
    // SAFETY: getrandom into a valid 2-byte buffer.
    unsafe { libc::getrandom((&mut r as *mut u16).cast(), 2, 0) };
    32768 + r % 28232
}

pub(in crate::cm) fn gid_of_addr(a: &SocketAddr) -> [u8; 16] {
    let ip = if a.ip().is_unspecified() {
        match a.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    } else {
        a.ip()
    };
    device::gid_of(ip)
}

/// The GID table index of our address `local` (the source GID of the id's path): the network
/// path sends from the sgid, so it must be the address the peer knows us by, not index 0
/// (loopback). 0 when unknown (unbound, or a wildcard).
pub(in crate::cm) fn sgid_index_of(local: Option<SocketAddr>) -> u8 {
    let Some(l) = local else { return 0 };
    let gid = gid_of_addr(&l);
    device::gid_lookup(|t| t.position(&gid)).and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
}
