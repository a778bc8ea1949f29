//! UD multicast across network namespaces. A group's MGID names an IP group (an IPv4-mapped
//! MGID is the IPv4 group, any other the IPv6 group with those bytes). While a QP of this
//! process is attached, one UDP socket bound to `group:4791` (SO_REUSEADDR/SO_REUSEPORT, so
//! every process of a namespace gets its copy) is a member on the interfaces that hold our
//! addresses; its packets (ICRC checked, BTH dest QP 0xFFFFFF) go to every attached QP. Senders
//! switch multicast loopback off: members in the sender's namespace get their copy over the
//! unix path, exactly once.

use super::endpoint;
use crate::errno::{Errno, Result};
use crate::provider::soft::roce::{self, Flow, ROCE_UDP_PORT};
use crate::provider::MCAST_QPN;
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::lock;
use crate::runtime::socket::kernel_socket;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// The IP group an MGID stands for, `None` if it is not a multicast address.
pub fn group_of(mgid: &[u8; 16]) -> Option<IpAddr> {
    let ip = super::route::ip_of_gid(mgid);
    ip.is_multicast().then_some(ip)
}

struct Group {
    mgid: [u8; 16],
    fd: Arc<OwnedFd>,
    members: Vec<u32>,
}

static GROUPS: PerProcess<Mutex<Vec<Group>>> = PerProcess::new(|| Mutex::new(Vec::new()));

fn groups() -> std::sync::MutexGuard<'static, Vec<Group>> {
    lock(GROUPS.get())
}

/// `qpn`'s network membership of a group: leaves (closing the socket with the last) on drop.
pub struct Membership {
    mgid: [u8; 16],
    qpn: u32,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut g = groups();
        let Some(i) = g.iter().position(|x| x.mgid == self.mgid) else { return };
        g[i].members.retain(|&q| q != self.qpn);
        if g[i].members.is_empty() {
            let gone = g.swap_remove(i);
            if let Ok(e) = engine() {
                e.unwatch(gone.fd.as_raw_fd());
            }
        }
    }
}

/// Makes `qpn` receive the group `mgid` from the network (`Err`: not a multicast MGID, or no
/// interface could join; the same-namespace path works without it).
pub fn join(mgid: &[u8; 16], qpn: u32) -> Result<Membership> {
    let group = group_of(mgid).ok_or(Errno::EINVAL)?;
    let mut g = groups();
    if let Some(x) = g.iter_mut().find(|x| x.mgid == *mgid) {
        if !x.members.contains(&qpn) {
            x.members.push(qpn);
        }
        return Ok(Membership { mgid: *mgid, qpn });
    }
    let fd = Arc::new(open(group)?);
    let (w, m) = (Arc::downgrade(&fd), *mgid);
    engine()?.watch(
        fd.as_raw_fd(),
        Arc::new(move |_| {
            if let Some(fd) = w.upgrade() {
                drain(fd.as_raw_fd(), &m, group);
            }
        }),
    )?;
    g.push(Group { mgid: *mgid, fd, members: vec![qpn] });
    Ok(Membership { mgid: *mgid, qpn })
}

fn setopt<T>(fd: RawFd, level: i32, name: i32, v: &T) -> Result<()> {
    // SAFETY: v is a valid T for the duration of the call and its size is passed along.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// A dual-stack socket bound to `group:4791`, a member on every interface holding one of our
/// addresses of the group's family (at least one must succeed).
fn open(group: IpAddr) -> Result<OwnedFd> {
    let fd = kernel_socket(
        libc::AF_INET6,
        libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0,
    )?;
    let raw = fd.as_raw_fd();
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &0i32)?;
    setopt(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, &1i32)?;
    setopt(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, &1i32)?;
    setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, &1i32)?;
    setopt(raw, libc::IPPROTO_IP, libc::IP_PKTINFO, &1i32)?;
    let g6 = match group {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_port = ROCE_UDP_PORT.to_be();
    sa.sin6_addr.s6_addr = g6.octets();
    let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: sa is a valid sockaddr_in6 of length len.
    if unsafe { libc::bind(raw, (&sa as *const libc::sockaddr_in6).cast(), len) } < 0 {
        return Err(Errno::last());
    }
    let mut joined = 0;
    match group {
        IpAddr::V4(g) => {
            for a in crate::runtime::ifaddrs::local_addresses() {
                let IpAddr::V4(a) = a else { continue };
                if a.is_loopback() {
                    continue;
                }
                let m = libc::ip_mreq {
                    imr_multiaddr: libc::in_addr { s_addr: u32::from(g).to_be() },
                    imr_interface: libc::in_addr { s_addr: u32::from(a).to_be() },
                };
                joined +=
                    usize::from(setopt(raw, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &m).is_ok());
            }
        }
        IpAddr::V6(g) => {
            let m = libc::ipv6_mreq {
                ipv6mr_multiaddr: libc::in6_addr { s6_addr: g.octets() },
                ipv6mr_interface: 0,
            };
            joined +=
                usize::from(setopt(raw, libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &m).is_ok());
        }
    }
    if joined == 0 {
        return Err(Errno::ENODEV);
    }
    Ok(fd)
}

/// Datagrams read per readiness event of a group socket.
const BATCH: usize = 64;

/// Reads a bounded batch from a group socket; each packet that decodes (ICRC checked), was sent
/// to the group and names QP 0xFFFFFF goes to every QP of ours attached to `mgid`.
fn drain(fd: RawFd, mgid: &[u8; 16], group: IpAddr) {
    let mut buf = [0u8; 4096 + 256];
    for _ in 0..BATCH {
        let r = match endpoint::recv_one(fd, &mut buf) {
            None => return,
            Some(Err(_)) => continue,
            Some(Ok(r)) => r,
        };
        if unmap(r.to) != group {
            continue;
        }
        let Some(flow) = Flow::new(r.from, SocketAddr::new(r.to, ROCE_UDP_PORT)) else {
            continue;
        };
        let Ok(pkt) = roce::decode(&buf[..r.len], &flow) else { continue };
        if pkt.bth.dest_qp() != MCAST_QPN {
            continue;
        }
        let members = match groups().iter().find(|g| g.mgid == *mgid) {
            Some(g) => g.members.clone(),
            None => return,
        };
        // Members are UD QPs: nothing they do waits for the end of a batch.
        let mut delivered = crate::provider::soft::qp::Delivered::default();
        for q in members {
            crate::provider::soft::qp::deliver_packet(q, &pkt, &r.from, group, &mut delivered);
        }
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 => v4,
    }
}

/// Switches multicast loopback off on a sending socket: members in our own namespace are served
/// over the unix path already.
pub fn no_loop(fd: RawFd) {
    let _ = setopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, &0i32);
    let _ = setopt(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, &0i32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_mgid_is_the_ipv4_group() {
        let g = std::net::Ipv4Addr::new(239, 1, 1, 1).to_ipv6_mapped().octets();
        assert_eq!(group_of(&g), Some("239.1.1.1".parse().unwrap()));
    }

    #[test]
    fn other_mgids_are_ipv6_groups_and_unicast_is_no_group() {
        let g: std::net::Ipv6Addr = "ff0e::1234".parse().unwrap();
        assert_eq!(group_of(&g.octets()), Some(IpAddr::V6(g)));
        let u = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().octets();
        assert_eq!(group_of(&u), None);
        assert_eq!(group_of(&[0; 16]), None);
    }
}
