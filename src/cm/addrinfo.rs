//! `rdma_getaddrinfo` / `rdma_freeaddrinfo` with rdma-core 44 semantics.
//!
//! The lookup wraps libc `getaddrinfo` and keeps only its first result:
//! * the hints map to socket hints as RC/UC/XRC → `SOCK_STREAM`, UD → `SOCK_DGRAM`,
//!   `RDMA_PS_TCP` → `IPPROTO_TCP`, `RDMA_PS_UDP`/`RDMA_PS_IPOIB` → `IPPROTO_UDP` (and
//!   `RDMA_PS_IB` → whatever the socket type implies); `RAI_PASSIVE` → `AI_PASSIVE`,
//!   `RAI_NUMERICHOST` → `AI_NUMERICHOST`, and `ai_family` is passed through (except `AF_IB`);
//! * the result maps back: `ai_qp_type` and `ai_port_space` come from the hints when they give
//!   them, otherwise from the socket type and protocol of the result (so with no hints at all a
//!   lookup gives `IBV_QPT_RC` on `RDMA_PS_TCP`);
//! * a passive lookup sets `ai_flags = RAI_PASSIVE` and fills `ai_src_addr` (the wildcard
//!   address when `node` is NULL); an active one leaves `ai_flags = 0` and fills `ai_dst_addr`,
//!   with `ai_src_addr` only when the hints give one.
//!
//! Errors: `EINVAL` when node, service and hints are all absent; a failing libc lookup gives its
//! own `EAI_*` code (negative on glibc), which `rdma_getaddrinfo` returns as is with errno
//! untouched ([`GaiError::Eai`]).
//!
//! Every pointer field of a result is a separate `malloc` allocation, because programs free the
//! result with `rdma_freeaddrinfo`, which frees each field and walks `ai_next`.
//!
//! Not supported: `AF_IB` results (there is no InfiniBand addressing here). Hints asking for
//! them explicitly (`RAI_FAMILY | RAI_NUMERICHOST` with `ai_family = AF_IB`) fail with
//! `EAI_FAMILY`; without `RAI_FAMILY` an `AF_IB` family hint means "any family", as in
//! rdma-core. `RAI_NOROUTE` is accepted and has no effect: there is no ibacm route lookup.

use crate::errno::Errno;
use crate::sys::{ibv_qp_type, rdma_addrinfo, rdma_port_space};
use libc::{c_int, sockaddr, socklen_t};
use std::ffi::CStr;
use std::ptr;

// The `RAI_*` flags are `#define`s in rdma_cma.h that rdma-sys does not generate, so they are
// restated here with the header's values.
/// The address is for a listening (passive) endpoint.
pub const RAI_PASSIVE: c_int = 0x1;
/// `node` must be a numeric address; no name resolution.
pub const RAI_NUMERICHOST: c_int = 0x2;
/// Do not resolve a route (ibacm); has no effect here.
pub const RAI_NOROUTE: c_int = 0x4;
/// The result must be of the family given in `ai_family`.
pub const RAI_FAMILY: c_int = 0x8;

/// Why a lookup failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaiError {
    /// A local failure (`EINVAL`, `ENOMEM`): `rdma_getaddrinfo` returns −1 with errno.
    Errno(Errno),
    /// libc `getaddrinfo` failed with this `EAI_*` code: `rdma_getaddrinfo` returns it as is.
    Eai(i32),
}

impl From<Errno> for GaiError {
    fn from(e: Errno) -> GaiError {
        GaiError::Errno(e)
    }
}

/// Resolves `node`/`service` into a one-element `rdma_addrinfo` list, to be released with
/// [`freeaddrinfo`].
///
/// # Safety
/// When `hints` is given, its `ai_src_addr` and `ai_dst_addr` are NULL or valid for reads of
/// `ai_src_len` and `ai_dst_len` bytes respectively (the `rdma_getaddrinfo` contract).
pub unsafe fn getaddrinfo(
    node: Option<&CStr>,
    service: Option<&CStr>,
    hints: Option<&rdma_addrinfo>,
) -> Result<*mut rdma_addrinfo, GaiError> {
    if node.is_none() && service.is_none() && hints.is_none() {
        return Err(Errno::EINVAL.into());
    }
    let mut rai = Building::new()?;
    if node.is_some() || service.is_some() {
        resolve(node, service, hints, rai.get())?;
    } else if let Some(h) = hints {
        // No name to resolve: the result is the hints themselves.
        let r = rai.get();
        r.ai_flags = h.ai_flags;
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        if h.ai_dst_len != 0 {
            // SAFETY: per this function's contract on the hints' addresses.
            r.ai_dst_addr = unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) }?;
            r.ai_dst_len = h.ai_dst_len;
        }
    }
    if let Some(h) = hints {
        let r = rai.get();
        if r.ai_src_len == 0 && h.ai_src_len != 0 {
            // SAFETY: per this function's contract on the hints' addresses.
            r.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) }?;
            r.ai_src_len = h.ai_src_len;
        }
    }
    Ok(rai.into_raw())
}

/// Frees a list returned by [`getaddrinfo`]: every node and every pointer field of each node.
///
/// # Safety
/// `res` is NULL or a list whose nodes and pointer fields were all allocated with `malloc`
/// (as [`getaddrinfo`] makes them) and are not used afterwards.
pub unsafe fn freeaddrinfo(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: `res` is a live node of the list, per the contract.
        let node = unsafe { &*res };
        let next = node.ai_next;
        // SAFETY: each field is NULL or its own malloc'd block, freed exactly once here, and
        // then the node itself.
        unsafe {
            libc::free(node.ai_connect);
            libc::free(node.ai_route);
            libc::free(node.ai_src_canonname.cast());
            libc::free(node.ai_dst_canonname.cast());
            libc::free(node.ai_src_addr.cast());
            libc::free(node.ai_dst_addr.cast());
            libc::free(res.cast());
        }
        res = next;
    }
}

/// The libc lookup and its conversion into `rai` (which owns whatever is stored in it, even on
/// failure). Only the libc result is read, never the hints' addresses.
fn resolve(
    node: Option<&CStr>,
    service: Option<&CStr>,
    hints: Option<&rdma_addrinfo>,
    rai: &mut rdma_addrinfo,
) -> Result<(), GaiError> {
    // SAFETY: all-zero is a valid rdma_addrinfo (integers and NULL pointers); it stands for
    // "no hints" when mapping the result back.
    let nohints: rdma_addrinfo = unsafe { std::mem::zeroed() };
    let h = hints.unwrap_or(&nohints);
    if h.ai_flags & RAI_FAMILY != 0
        && h.ai_family == libc::AF_IB
        && h.ai_flags & RAI_NUMERICHOST != 0
    {
        return Err(GaiError::Eai(libc::EAI_FAMILY));
    }
    let ai_hints = hints.map(socket_hints);
    let mut list: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: node and service are NUL-terminated strings or NULL, the hints are NULL or a
    // fully initialised addrinfo, and `list` is a valid out-pointer.
    let ret = unsafe {
        libc::getaddrinfo(
            node.map_or(ptr::null(), CStr::as_ptr),
            service.map_or(ptr::null(), CStr::as_ptr),
            ai_hints.as_ref().map_or(ptr::null(), |a| a as *const libc::addrinfo),
            &mut list,
        )
    };
    if ret != 0 {
        return Err(GaiError::Eai(ret));
    }
    let list = LibcList(list);
    // SAFETY: a successful getaddrinfo returns at least one valid entry, alive until `list`
    // is dropped.
    let ai = unsafe { &*list.0 };

    rai.ai_qp_type = if h.ai_qp_type != 0 {
        h.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => ibv_qp_type::IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => ibv_qp_type::IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    rai.ai_port_space = if h.ai_port_space != 0 {
        h.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => rdma_port_space::RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => rdma_port_space::RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    rai.ai_family = ai.ai_family;

    // SAFETY: a getaddrinfo entry's ai_addr is valid for ai_addrlen bytes.
    let addr = unsafe { copy_addr(ai.ai_addr, ai.ai_addrlen) }?;
    // SAFETY: ai_canonname is NULL or a NUL-terminated string owned by the list.
    let canon = unsafe { copy_name(ai.ai_canonname) };
    let (slot, len, name) = if h.ai_flags & RAI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE;
        (&mut rai.ai_src_addr, &mut rai.ai_src_len, &mut rai.ai_src_canonname)
    } else {
        (&mut rai.ai_dst_addr, &mut rai.ai_dst_len, &mut rai.ai_dst_canonname)
    };
    // Stored before checking `canon`, so that the node's destructor frees the address.
    *slot = addr;
    *len = ai.ai_addrlen;
    *name = canon?;
    Ok(())
}

/// The libc hints for rdma hints. The hints' addresses are not passed on: POSIX wants the
/// address fields of getaddrinfo hints zero, and glibc ignores them anyway.
fn socket_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: all-zero is a valid addrinfo (integers and NULL pointers).
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.ai_family != libc::AF_IB {
        ai.ai_family = h.ai_family;
    }
    ai.ai_socktype = match h.ai_qp_type as ibv_qp_type::Type {
        ibv_qp_type::IBV_QPT_RC
        | ibv_qp_type::IBV_QPT_UC
        | ibv_qp_type::IBV_QPT_XRC_SEND
        | ibv_qp_type::IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        ibv_qp_type::IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space as rdma_port_space::Type {
        rdma_port_space::RDMA_PS_TCP => libc::IPPROTO_TCP,
        rdma_port_space::RDMA_PS_UDP | rdma_port_space::RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        rdma_port_space::RDMA_PS_IB => match ai.ai_socktype {
            libc::SOCK_STREAM => libc::IPPROTO_TCP,
            libc::SOCK_DGRAM => libc::IPPROTO_UDP,
            _ => 0,
        },
        _ => 0,
    };
    ai
}

/// A malloc'd copy of a socket address.
///
/// # Safety
/// `src` is NULL or valid for reads of `len` bytes.
unsafe fn copy_addr(src: *const sockaddr, len: socklen_t) -> Result<*mut sockaddr, GaiError> {
    if src.is_null() || len == 0 {
        return Err(Errno::EINVAL.into());
    }
    // SAFETY: plain allocation of `len` (non-zero) bytes.
    let dst = unsafe { libc::malloc(len as usize) }.cast::<sockaddr>();
    if dst.is_null() {
        return Err(Errno::ENOMEM.into());
    }
    // SAFETY: `src` is readable for `len` bytes per the contract, `dst` is a fresh block of
    // `len` bytes, and the two cannot overlap.
    unsafe { ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), len as usize) };
    Ok(dst)
}

/// A malloc'd copy of a C string, NULL for NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn copy_name(s: *const libc::c_char) -> Result<*mut libc::c_char, GaiError> {
    if s.is_null() {
        return Ok(ptr::null_mut());
    }
    // SAFETY: `s` is a NUL-terminated string per the contract.
    let copy = unsafe { libc::strdup(s) };
    if copy.is_null() {
        Err(Errno::ENOMEM.into())
    } else {
        Ok(copy)
    }
}

/// A result node under construction: freed with [`freeaddrinfo`] unless handed out.
struct Building(*mut rdma_addrinfo);

impl Building {
    fn new() -> Result<Building, GaiError> {
        // SAFETY: plain zeroed allocation; all-zero is a valid rdma_addrinfo.
        let p = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) };
        if p.is_null() {
            Err(Errno::ENOMEM.into())
        } else {
            Ok(Building(p.cast()))
        }
    }

    fn get(&mut self) -> &mut rdma_addrinfo {
        // SAFETY: the pointer is a live, initialised node owned by `self`.
        unsafe { &mut *self.0 }
    }

    fn into_raw(self) -> *mut rdma_addrinfo {
        let p = self.0;
        std::mem::forget(self);
        p
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        // SAFETY: the node and its fields were all malloc'd here and nobody else has them.
        unsafe { freeaddrinfo(self.0) };
    }
}

/// A libc `getaddrinfo` result, freed on drop.
struct LibcList(*mut libc::addrinfo);

impl Drop for LibcList {
    fn drop(&mut self) {
        // SAFETY: the list came from a successful getaddrinfo and is freed once.
        unsafe { libc::freeaddrinfo(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zero_hints() -> rdma_addrinfo {
        // SAFETY: all-zero is a valid rdma_addrinfo.
        unsafe { std::mem::zeroed() }
    }

    /// Runs a lookup and hands the node to `check`, then frees it.
    fn with_result(
        node: Option<&CStr>,
        service: Option<&CStr>,
        hints: Option<&rdma_addrinfo>,
        check: impl FnOnce(&rdma_addrinfo),
    ) {
        // SAFETY: the hints built by these tests hold NULL or valid addresses.
        let res = unsafe { getaddrinfo(node, service, hints) }.expect("lookup");
        assert!(!res.is_null());
        // SAFETY: a successful lookup returns a valid node.
        let r = unsafe { &*res };
        assert!(r.ai_next.is_null());
        check(r);
        // SAFETY: the list came from getaddrinfo and is not used afterwards.
        unsafe { freeaddrinfo(res) };
    }

    fn sin(p: *const sockaddr) -> libc::sockaddr_in {
        // SAFETY: callers pass an AF_INET address of sizeof(sockaddr_in) bytes.
        unsafe { ptr::read_unaligned(p.cast::<libc::sockaddr_in>()) }
    }

    fn sin6(p: *const sockaddr) -> libc::sockaddr_in6 {
        // SAFETY: callers pass an AF_INET6 address of sizeof(sockaddr_in6) bytes.
        unsafe { ptr::read_unaligned(p.cast::<libc::sockaddr_in6>()) }
    }

    /// The port of an AF_INET or AF_INET6 address, and whether the address is the wildcard.
    fn port_and_wildcard(r: &rdma_addrinfo, p: *const sockaddr) -> (u16, bool) {
        match r.ai_family {
            libc::AF_INET => {
                let a = sin(p);
                (u16::from_be(a.sin_port), a.sin_addr.s_addr == 0)
            }
            libc::AF_INET6 => {
                let a = sin6(p);
                (u16::from_be(a.sin6_port), a.sin6_addr.s6_addr == [0; 16])
            }
            f => panic!("unexpected family {f}"),
        }
    }

    #[test]
    fn addrinfo_passive_wildcard() {
        let mut h = zero_hints();
        h.ai_flags = RAI_PASSIVE;
        h.ai_port_space = rdma_port_space::RDMA_PS_TCP as c_int;
        with_result(None, Some(c"7471"), Some(&h), |r| {
            assert_eq!(r.ai_flags, RAI_PASSIVE);
            assert!(!r.ai_src_addr.is_null());
            assert!(r.ai_dst_addr.is_null());
            assert_eq!(r.ai_dst_len, 0);
            assert_eq!(r.ai_qp_type, ibv_qp_type::IBV_QPT_RC as c_int);
            assert_eq!(r.ai_port_space, rdma_port_space::RDMA_PS_TCP as c_int);
            assert_eq!(port_and_wildcard(r, r.ai_src_addr), (7471, true));
            // SAFETY: ai_src_addr holds at least a sockaddr header.
            let fam = unsafe { (*r.ai_src_addr).sa_family };
            assert_eq!(c_int::from(fam), r.ai_family);
        });
    }

    #[test]
    fn addrinfo_active_ipv4_no_hints() {
        with_result(Some(c"127.0.0.1"), Some(c"7471"), None, |r| {
            assert_eq!(r.ai_flags, 0);
            assert_eq!(r.ai_family, libc::AF_INET);
            assert!(r.ai_src_addr.is_null());
            assert_eq!(r.ai_src_len, 0);
            assert_eq!(r.ai_dst_len as usize, std::mem::size_of::<libc::sockaddr_in>());
            let a = sin(r.ai_dst_addr);
            assert_eq!(a.sin_family as c_int, libc::AF_INET);
            assert_eq!(a.sin_port, 7471u16.to_be());
            assert_eq!(a.sin_addr.s_addr, u32::from_be_bytes([127, 0, 0, 1]).to_be());
            // Nothing in the hints: RC on the TCP port space.
            assert_eq!(r.ai_qp_type, ibv_qp_type::IBV_QPT_RC as c_int);
            assert_eq!(r.ai_port_space, rdma_port_space::RDMA_PS_TCP as c_int);
        });
    }

    #[test]
    fn addrinfo_active_ipv6_loopback() {
        let mut h = zero_hints();
        h.ai_flags = RAI_NUMERICHOST;
        h.ai_port_space = rdma_port_space::RDMA_PS_TCP as c_int;
        with_result(Some(c"::1"), Some(c"7471"), Some(&h), |r| {
            assert_eq!(r.ai_flags, 0);
            assert_eq!(r.ai_family, libc::AF_INET6);
            assert_eq!(r.ai_dst_len as usize, std::mem::size_of::<libc::sockaddr_in6>());
            let a = sin6(r.ai_dst_addr);
            assert_eq!(a.sin6_port, 7471u16.to_be());
            let mut lo = [0u8; 16];
            lo[15] = 1;
            assert_eq!(a.sin6_addr.s6_addr, lo);
        });
    }

    #[test]
    fn addrinfo_udp_port_space_gives_ud() {
        let mut h = zero_hints();
        h.ai_port_space = rdma_port_space::RDMA_PS_UDP as c_int;
        with_result(Some(c"127.0.0.1"), Some(c"7174"), Some(&h), |r| {
            assert_eq!(r.ai_qp_type, ibv_qp_type::IBV_QPT_UD as c_int);
            assert_eq!(r.ai_port_space, rdma_port_space::RDMA_PS_UDP as c_int);
            assert_eq!(port_and_wildcard(r, r.ai_dst_addr), (7174, false));
        });
    }

    #[test]
    fn addrinfo_family_hint_is_honoured() {
        let mut h = zero_hints();
        h.ai_flags = RAI_PASSIVE | RAI_FAMILY;
        h.ai_family = libc::AF_INET;
        with_result(None, Some(c"7471"), Some(&h), |r| {
            assert_eq!(r.ai_family, libc::AF_INET);
            assert_eq!(port_and_wildcard(r, r.ai_src_addr), (7471, true));
        });
    }

    #[test]
    fn addrinfo_active_keeps_source_hint() {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut src: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        src.sin_family = libc::AF_INET as libc::sa_family_t;
        src.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let mut h = zero_hints();
        h.ai_src_addr = ptr::addr_of_mut!(src).cast();
        h.ai_src_len = std::mem::size_of::<libc::sockaddr_in>() as socklen_t;
        with_result(Some(c"127.0.0.1"), Some(c"7471"), Some(&h), |r| {
            assert_eq!(r.ai_src_len, h.ai_src_len);
            assert_ne!(r.ai_src_addr, h.ai_src_addr, "the source address must be a copy");
            assert_eq!(port_and_wildcard(r, r.ai_src_addr), (0, false));
            assert!(!r.ai_dst_addr.is_null());
        });
    }

    #[test]
    fn addrinfo_hints_only_copies_them() {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut dst: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        dst.sin_family = libc::AF_INET as libc::sa_family_t;
        dst.sin_port = 9u16.to_be();
        let mut h = zero_hints();
        h.ai_family = libc::AF_INET;
        h.ai_qp_type = ibv_qp_type::IBV_QPT_UD as c_int;
        h.ai_port_space = rdma_port_space::RDMA_PS_UDP as c_int;
        h.ai_dst_addr = ptr::addr_of_mut!(dst).cast();
        h.ai_dst_len = std::mem::size_of::<libc::sockaddr_in>() as socklen_t;
        with_result(None, None, Some(&h), |r| {
            assert_eq!(r.ai_qp_type, h.ai_qp_type);
            assert_eq!(r.ai_port_space, h.ai_port_space);
            assert_eq!(r.ai_dst_len, h.ai_dst_len);
            assert_eq!(port_and_wildcard(r, r.ai_dst_addr), (9, true));
            assert!(r.ai_src_addr.is_null());
        });
    }

    #[test]
    fn addrinfo_all_null_is_einval() {
        // SAFETY: no hints.
        let r = unsafe { getaddrinfo(None, None, None) };
        assert_eq!(r, Err(GaiError::Errno(Errno::EINVAL)));
    }

    #[test]
    fn addrinfo_unresolvable_numeric_host_is_eai() {
        let mut h = zero_hints();
        h.ai_flags = RAI_NUMERICHOST;
        // SAFETY: the hints hold no addresses.
        let r = unsafe { getaddrinfo(Some(c"no.such.host"), Some(c"7471"), Some(&h)) };
        assert_eq!(r, Err(GaiError::Eai(libc::EAI_NONAME)));
    }

    #[test]
    fn addrinfo_af_ib_is_unsupported() {
        let mut h = zero_hints();
        h.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
        h.ai_family = libc::AF_IB;
        // SAFETY: the hints hold no addresses.
        let r = unsafe { getaddrinfo(Some(c"::1"), None, Some(&h)) };
        assert_eq!(r, Err(GaiError::Eai(libc::EAI_FAMILY)));
    }

    #[test]
    fn addrinfo_free_null_is_noop() {
        // SAFETY: NULL is an empty list.
        unsafe { freeaddrinfo(ptr::null_mut()) };
    }
}
