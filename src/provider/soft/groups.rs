//! Multicast groups on one host (network namespace): which QPs are attached, known to a sender
//! without a daemon and without listing /proc/net/unix at every send.
//!
//! * A QP attached to a group binds a marker socket, `rdmashim/mc/<mgid>/<qpn>`, for as long as
//!   it stays attached: the bound name is the membership, and it goes when the socket closes.
//! * A process that sends to a group binds a sender marker, `rdmashim/mc/<mgid>/s<pid>-<k>`,
//!   once, then lists the group's markers and keeps the list ([`Senders::members`]).
//! * A QP that attaches lists the markers once and sends each sender marker one byte. A sender
//!   finds it at its next send (one non-blocking read) and lists the group again.
//! * Each side binds before it lists, so of a joiner and a new sender at least one sees the
//!   other. A member that left is noticed at the next send to it (its name is gone) and
//!   dropped, so leaving needs no message.
//!
//! Listing /proc/net/unix thus happens at joins and at a process's first send to a group, not
//! per datagram.

use crate::errno::{Errno, Result};
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, unix};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

fn group_prefix(mgid: &[u8; 16]) -> String {
    let hex: String = mgid.iter().map(|b| format!("{b:02x}")).collect();
    format!("rdmashim/mc/{hex}/")
}

/// What a marker's name says: a member QP, or a sender process.
#[derive(Debug, PartialEq, Eq)]
enum Marker {
    Member(u32),
    Sender(String),
}

fn parse(prefix: &str, name: &str) -> Option<Marker> {
    let rest = name.strip_prefix(prefix)?;
    if rest.starts_with('s') {
        return Some(Marker::Sender(name.to_string()));
    }
    (rest.len() == 6).then(|| u32::from_str_radix(rest, 16).ok()).flatten().map(Marker::Member)
}

/// The group's markers bound now.
fn list(mgid: &[u8; 16]) -> Vec<Marker> {
    let prefix = group_prefix(mgid);
    unix::bound_names(&prefix).iter().filter_map(|n| parse(&prefix, n)).collect()
}

/// Attaches `qpn` to `mgid` for as long as the returned socket lives, and tells the group's
/// senders to list it again.
pub fn join(mgid: &[u8; 16], qpn: u32) -> Result<OwnedFd> {
    let marker = unix::bind_dgram(&format!("{}{qpn:06x}", group_prefix(mgid)))?;
    nudge_senders(mgid, marker.as_raw_fd());
    Ok(marker)
}

/// A QP of ours detached from `mgid` (its marker is closed): the group's senders list it
/// again, so they stop sending to it. `from`: a datagram socket of the QP's to send from.
pub fn left(mgid: &[u8; 16], from: RawFd) {
    nudge_senders(mgid, from);
}

/// Sends each sender marker of `mgid` one byte, from the datagram socket `fd`.
fn nudge_senders(mgid: &[u8; 16], fd: RawFd) {
    for m in list(mgid) {
        if let Marker::Sender(name) = m {
            // A full queue already holds a nudge: that sender lists the group anyway.
            let _ = unix::send_dgram(fd, &name, &[b"j"]);
        }
    }
}

/// One group as a sending process knows it.
struct Group {
    /// Our sender marker: joiners write to it.
    marker: OwnedFd,
    members: Vec<u32>,
}

/// The groups this process has sent to.
#[derive(Default)]
pub struct Senders {
    groups: HashMap<[u8; 16], Group>,
}

static SENDERS: PerProcess<Mutex<Senders>> = PerProcess::new(|| Mutex::new(Senders::default()));

/// The QPs attached to `mgid` on this host, for a send (see the module's text).
pub fn members(mgid: &[u8; 16]) -> Vec<u32> {
    let mut s = lock(SENDERS.get());
    s.members(mgid)
}

/// A member of `mgid` that a send found gone: dropped from this process's list.
pub fn gone(mgid: &[u8; 16], qpn: u32) {
    let mut s = lock(SENDERS.get());
    if let Some(g) = s.groups.get_mut(mgid) {
        g.members.retain(|&m| m != qpn);
    }
}

impl Senders {
    fn members(&mut self, mgid: &[u8; 16]) -> Vec<u32> {
        let stale = match self.groups.get(mgid) {
            Some(g) => nudged(&g.marker),
            None => match sender_marker(mgid) {
                Ok(marker) => {
                    self.groups.insert(*mgid, Group { marker, members: Vec::new() });
                    true
                }
                // No marker, so no nudges: list every time rather than miss a joiner.
                Err(_) => return members_now(mgid),
            },
        };
        let Some(g) = self.groups.get_mut(mgid) else { return Vec::new() };
        if stale {
            g.members = members_now(mgid);
        }
        g.members.clone()
    }
}

fn members_now(mgid: &[u8; 16]) -> Vec<u32> {
    list(mgid)
        .into_iter()
        .filter_map(|m| match m {
            Marker::Member(q) => Some(q),
            Marker::Sender(_) => None,
        })
        .collect()
}

/// Binds this process's sender marker for `mgid` (a free `s<pid>-<k>` name).
fn sender_marker(mgid: &[u8; 16]) -> Result<OwnedFd> {
    let prefix = group_prefix(mgid);
    let pid = std::process::id();
    for k in 0..64 {
        match unix::bind_dgram(&format!("{prefix}s{pid}-{k}")) {
            Err(e) if e == Errno::EADDRINUSE => continue,
            r => return r,
        }
    }
    Err(Errno::EADDRINUSE)
}

/// Whether a joiner wrote to `marker` since we last looked (its bytes are read and dropped).
fn nudged(marker: &OwnedFd) -> bool {
    let mut any = false;
    let mut b = [0u8; 16];
    while let Ok(Some(_)) = unix::recv_dgram(marker.as_raw_fd(), &mut b) {
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(tag: u8) -> [u8; 16] {
        // A group of this test process alone (the pid keeps parallel runs apart).
        let mut g = [0xff; 16];
        g[..4].copy_from_slice(&std::process::id().to_be_bytes());
        g[15] = tag;
        g
    }

    #[test]
    fn names_parse_as_members_or_senders() {
        let p = group_prefix(&[0; 16]);
        assert_eq!(parse(&p, &format!("{p}00abcd")), Some(Marker::Member(0xabcd)));
        assert_eq!(parse(&p, &format!("{p}s12-0")), Some(Marker::Sender(format!("{p}s12-0"))));
        assert_eq!(parse(&p, &format!("{p}abc")), None, "a member name is six hex digits");
        assert_eq!(parse(&p, &format!("{p}00zzzz")), None);
        assert_eq!(parse(&p, "rdmashim/mc/other/00abcd"), None);
    }

    /// A sender lists the group once; a later join reaches it through its marker, a leave is
    /// seen by `gone`, and in between the list is kept (no listing per send).
    #[test]
    fn a_sender_learns_joins_without_listing_per_send() {
        let g = gid(1);
        let mut s = Senders::default();
        let a = join(&g, 0x10_0001).expect("join a");
        assert_eq!(s.members(&g), vec![0x10_0001]);
        // A member bound behind the sender's back, without the nudge, is not listed: proof
        // that the list is kept between sends rather than made again.
        let silent = unix::bind_dgram(&format!("{}{:06x}", group_prefix(&g), 0x10_0002)).unwrap();
        assert_eq!(s.members(&g), vec![0x10_0001]);
        // A join nudges the sender, which lists the group again: all three now.
        let b = join(&g, 0x10_0003).expect("join b");
        let mut m = s.members(&g);
        m.sort();
        assert_eq!(m, vec![0x10_0001, 0x10_0002, 0x10_0003]);
        drop((a, b, silent));
    }

    #[test]
    fn a_member_that_left_is_dropped() {
        let g = gid(2);
        let a = join(&g, 0x20_0001).expect("join");
        let b = join(&g, 0x20_0002).expect("join");
        let mut m = members(&g);
        m.sort();
        assert_eq!(m, vec![0x20_0001, 0x20_0002]);
        drop(a);
        gone(&g, 0x20_0001);
        assert_eq!(members(&g), vec![0x20_0002]);
        drop(b);
    }
}
