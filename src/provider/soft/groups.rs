//! Multicast groups on one host (network namespace): which QPs are attached, known to a sender
//! without a daemon, without listing /proc/net/unix and without a system call at every send.
//!
//! * A QP attached to a group binds a marker socket, `rdmashim/mc/<mgid>/<qpn>`, for as long as
//!   it stays attached: the bound name is the membership, and it goes when the socket closes.
//! * A process that sends to a group binds a sender marker, `rdmashim/mc/<mgid>/w<pid>-<k>`,
//!   once, has its progress thread watch it, then lists the group's markers and keeps the list
//!   ([`Senders::members`]).
//! * A QP that attaches lists the markers once and sends each sender marker a nudge naming its
//!   own marker. The sender's progress thread marks the group stale and answers; the joiner
//!   waits for the answers (at most [`ACK_WAIT`]: a sender that cannot answer is stopped or
//!   hung; a marker whose process is gone, kept open by a forked child, is not waited for), so
//!   a send that follows the attach lists the group again, as before, while a send between
//!   joins costs one load of a flag.
//! * A sender whose progress thread cannot watch its marker binds `s<pid>-<k>` instead, is not
//!   waited for, and reads its marker at each send (one non-blocking read).
//! * Each side binds before it lists, so of a joiner and a new sender at least one sees the
//!   other. A member that left is noticed at the next send to it (its name is gone) and
//!   dropped, so leaving needs no answer.
//!
//! Listing /proc/net/unix thus happens at joins and at a process's first send to a group, not
//! per datagram.

use crate::errno::{Errno, Result};
use crate::runtime::engine::{engine, on_progress_thread};
use crate::runtime::fork::PerProcess;
use crate::runtime::{access, lock, unix};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a joiner waits, in all, for the group's senders to answer its nudge.
pub const ACK_WAIT: Duration = Duration::from_millis(200);
/// A nudge from a joiner, followed by the name of its marker (where the answer goes).
const JOINED: u8 = b'j';
/// A nudge from a QP that detached (not answered: a late list only sends it what it drops).
const LEFT: u8 = b'l';
/// A sender's answer to [`JOINED`].
const SEEN: u8 = b'a';

fn group_prefix(mgid: &[u8; 16]) -> String {
    let hex: String = mgid.iter().map(|b| format!("{b:02x}")).collect();
    format!("rdmashim/mc/{hex}/")
}

/// What a marker's name says: a member QP, or a sender process (and whether it answers).
#[derive(Debug, PartialEq, Eq)]
enum Marker {
    Member(u32),
    Sender { name: String, answers: bool },
}

/// A sender's name starts with a letter that is not a hex digit: `w` (watched, answers) or
/// `s` (reads its marker at each send).
fn parse(prefix: &str, name: &str) -> Option<Marker> {
    let rest = name.strip_prefix(prefix)?;
    if rest.starts_with('s') || rest.starts_with('w') {
        return Some(Marker::Sender { name: name.to_string(), answers: rest.starts_with('w') });
    }
    (rest.len() == 6).then(|| u32::from_str_radix(rest, 16).ok()).flatten().map(Marker::Member)
}

/// The group's markers bound now.
fn list(mgid: &[u8; 16]) -> Vec<Marker> {
    let prefix = group_prefix(mgid);
    unix::bound_names(&prefix).iter().filter_map(|n| parse(&prefix, n)).collect()
}

/// Attaches `qpn` to `mgid` for as long as the returned socket lives: the group's senders are
/// told to list it again, and those that answer have done so when this returns (see the
/// module's text). Not to be called under a lock the progress thread takes.
pub fn join(mgid: &[u8; 16], qpn: u32) -> Result<OwnedFd> {
    let name = format!("{}{qpn:06x}", group_prefix(mgid));
    let marker = unix::bind_dgram(&name)?;
    let mut nudge = vec![JOINED];
    nudge.extend_from_slice(name.as_bytes());
    let answers = nudge_senders(mgid, marker.as_raw_fd(), &nudge);
    // The progress thread must not wait: it may be the one to answer.
    if answers > 0 && !on_progress_thread() {
        wait_answers(marker.as_raw_fd(), answers);
    }
    Ok(marker)
}

/// A QP of ours detached from `mgid` (its marker is closed): the group's senders list it
/// again, so they stop sending to it. `from`: a datagram socket of the QP's to send from.
pub fn left(mgid: &[u8; 16], from: RawFd) {
    nudge_senders(mgid, from, &[LEFT]);
}

/// Sends each sender marker of `mgid` the nudge `msg`, from the datagram socket `fd`: how
/// many of those that answer it reached.
fn nudge_senders(mgid: &[u8; 16], fd: RawFd, msg: &[u8]) -> usize {
    let prefix = group_prefix(mgid);
    let mut answering = 0;
    for m in list(mgid) {
        if let Marker::Sender { name, answers } = m {
            // A full queue already holds a nudge: that sender lists the group anyway (and
            // answers the nudges it holds, not this one).
            if unix::send_dgram(fd, &name, &[msg]).is_ok() && answers && owner_runs(&prefix, &name)
            {
                answering += 1;
            }
        }
    }
    answering
}

/// Whether the process a sender marker names (`w<pid>-<k>`) still runs. A forked child keeps
/// its parent's marker open, and once the parent is gone nothing answers there.
fn owner_runs(prefix: &str, name: &str) -> bool {
    let pid = name.strip_prefix(prefix).and_then(|r| r.get(1..)).and_then(|r| r.split('-').next());
    match pid.and_then(|p| p.parse::<libc::pid_t>().ok()) {
        Some(p) if p > 0 => {
            // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
            let r = unsafe { libc::kill(p, 0) };
            r == 0 || Errno::last() == Errno::EPERM
        }
        _ => false,
    }
}

/// Reads `count` answers at our marker `fd`, or until [`ACK_WAIT`] has passed.
fn wait_answers(fd: RawFd, mut count: usize) {
    let deadline = Instant::now() + ACK_WAIT;
    let mut b = [0u8; 16];
    while count > 0 {
        match unix::recv_dgram(fd, &mut b) {
            Ok(Some((1, _))) if b[0] == SEEN => count -= 1,
            Ok(Some(_)) => {}
            Ok(None) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as i32) };
            }
            Err(_) => return,
        }
    }
}

/// One group as a sending process knows it.
struct Group {
    /// Our sender marker: joiners write to it.
    marker: Arc<OwnedFd>,
    /// Set by our progress thread when a joiner or leaver nudged the marker; `None`: nothing
    /// watches it, and each send reads it.
    nudged: Option<Arc<AtomicBool>>,
    members: Vec<u32>,
}

/// The groups this process has sent to.
#[derive(Default)]
pub struct Senders {
    groups: HashMap<[u8; 16], Group>,
}

static SENDERS: PerProcess<Mutex<Senders>> = PerProcess::new(|| Mutex::new(Senders::default()));

/// The QPs attached to `mgid` on this host, for a send (see the module's text), into `out`
/// (cleared first; a buffer the caller keeps, so a send allocates nothing).
pub fn members_into(mgid: &[u8; 16], out: &mut Vec<u32>) {
    out.clear();
    lock(SENDERS.get()).members_into(mgid, out);
}

/// A member of `mgid` that a send found gone: dropped from this process's list.
pub fn gone(mgid: &[u8; 16], qpn: u32) {
    let mut s = lock(SENDERS.get());
    if let Some(g) = s.groups.get_mut(mgid) {
        g.members.retain(|&m| m != qpn);
    }
}

impl Senders {
    fn members_into(&mut self, mgid: &[u8; 16], out: &mut Vec<u32>) {
        let stale = match self.groups.get(mgid) {
            // A plain load per send; the flag is taken only when set.
            Some(Group { nudged: Some(f), .. }) => {
                f.load(Ordering::Relaxed) && f.swap(false, Ordering::Acquire)
            }
            Some(g) => nudged(&g.marker),
            None => match sender(mgid) {
                Ok((marker, nudged)) => {
                    self.groups.insert(*mgid, Group { marker, nudged, members: Vec::new() });
                    true
                }
                // No marker, so no nudges: list every time rather than miss a joiner.
                Err(_) => return out.extend(members_now(mgid)),
            },
        };
        let Some(g) = self.groups.get_mut(mgid) else { return };
        if stale {
            g.members = members_now(mgid);
        }
        out.extend_from_slice(&g.members);
    }
}

fn members_now(mgid: &[u8; 16]) -> Vec<u32> {
    list(mgid)
        .into_iter()
        .filter_map(|m| match m {
            Marker::Member(q) => Some(q),
            Marker::Sender { .. } => None,
        })
        .collect()
}

/// Binds this process's sender marker for `mgid` (a free name) and has the progress thread
/// watch it: the marker, and the flag the watch sets (`None` if it could not watch).
fn sender(mgid: &[u8; 16]) -> Result<(Arc<OwnedFd>, Option<Arc<AtomicBool>>)> {
    if let Ok(e) = engine() {
        let marker = Arc::new(sender_marker(mgid, 'w')?);
        let flag = Arc::new(AtomicBool::new(false));
        let fd = marker.as_raw_fd();
        let (m, f, prefix) = (marker.clone(), flag.clone(), group_prefix(mgid));
        // The handler keeps the marker open; groups live as long as the process.
        let h = Arc::new(move |_| answer_nudges(&m, &f, &prefix));
        if e.watch(fd, h).is_ok() {
            return Ok((marker, Some(flag)));
        }
    }
    Ok((Arc::new(sender_marker(mgid, 's')?), None))
}

/// On the progress thread: takes the nudges at our `marker`, sets `flag` if any came from a
/// user we accept, and answers each joiner that named its marker in the group (`prefix`).
fn answer_nudges(marker: &OwnedFd, flag: &AtomicBool, prefix: &str) {
    let mut b = [0u8; 128];
    while let Ok(Some((n, uid))) = unix::recv_dgram(marker.as_raw_fd(), &mut b) {
        if !uid.is_some_and(access::allowed) {
            continue;
        }
        flag.store(true, Ordering::Release);
        let Some((&JOINED, name)) = b[..n.min(b.len())].split_first() else { continue };
        // Only a member marker of this group is answered: a nudge cannot aim our answer
        // anywhere else.
        if let Ok(name) = std::str::from_utf8(name) {
            if matches!(parse(prefix, name), Some(Marker::Member(_))) {
                let _ = unix::send_dgram(marker.as_raw_fd(), name, &[&[SEEN]]);
            }
        }
    }
}

/// Binds a sender marker for `mgid` whose name starts with `kind` (a free `<kind><pid>-<k>`).
fn sender_marker(mgid: &[u8; 16], kind: char) -> Result<OwnedFd> {
    let prefix = group_prefix(mgid);
    let pid = std::process::id();
    for k in 0..64 {
        match unix::bind_dgram(&format!("{prefix}{kind}{pid}-{k}")) {
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

    /// What a send to `mgid` from `s` would be offered to.
    fn members_of(s: &mut Senders, mgid: &[u8; 16]) -> Vec<u32> {
        let mut out = Vec::new();
        s.members_into(mgid, &mut out);
        out
    }

    fn members(mgid: &[u8; 16]) -> Vec<u32> {
        let mut out = Vec::new();
        members_into(mgid, &mut out);
        out
    }

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
        let sender = |n: &str, answers| Some(Marker::Sender { name: format!("{p}{n}"), answers });
        assert_eq!(parse(&p, &format!("{p}s12-0")), sender("s12-0", false));
        assert_eq!(parse(&p, &format!("{p}w12-0")), sender("w12-0", true));
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
        assert_eq!(members_of(&mut s, &g), vec![0x10_0001]);
        assert!(s.groups[&g].nudged.is_some(), "the progress thread watches the marker");
        // A member bound behind the sender's back, without the nudge, is not listed: proof
        // that the list is kept between sends rather than made again.
        let silent = unix::bind_dgram(&format!("{}{:06x}", group_prefix(&g), 0x10_0002)).unwrap();
        assert_eq!(members_of(&mut s, &g), vec![0x10_0001]);
        // A join nudges the sender and returns once its progress thread has answered, so the
        // next send lists the group again: all three now.
        let b = join(&g, 0x10_0003).expect("join b");
        let mut m = members_of(&mut s, &g);
        m.sort();
        assert_eq!(m, vec![0x10_0001, 0x10_0002, 0x10_0003]);
        drop((a, b, silent));
    }

    /// A sender answers a joiner's nudge at the joiner's marker, and only there: a nudge
    /// naming any other socket marks the group stale and gets no answer.
    #[test]
    fn a_nudge_is_answered_only_at_a_member_marker() {
        let g = gid(3);
        let prefix = group_prefix(&g);
        let sender_name = format!("{prefix}w{}-test", std::process::id());
        let sender = unix::bind_dgram(&sender_name).unwrap();
        let flag = AtomicBool::new(false);
        let victim_name = format!("rdmashim/test-victim-{}", std::process::id());
        let victim = unix::bind_dgram(&victim_name).unwrap();
        let member_name = format!("{prefix}{:06x}", 0x30_0001);
        let member = unix::bind_dgram(&member_name).unwrap();
        let mut b = [0u8; 16];
        for (target, fd) in [(&victim_name, &victim), (&member_name, &member)] {
            let nudge = [&[JOINED][..], target.as_bytes()].concat();
            unix::send_dgram(member.as_raw_fd(), &sender_name, &[&nudge]).unwrap();
            flag.store(false, Ordering::Relaxed);
            answer_nudges(&sender, &flag, &prefix);
            assert!(flag.load(Ordering::Relaxed), "{target}: the group is marked stale");
            let got = unix::recv_dgram(fd.as_raw_fd(), &mut b).unwrap();
            if fd.as_raw_fd() == victim.as_raw_fd() {
                assert!(got.is_none(), "no answer outside the group");
            } else {
                assert_eq!(got.map(|(n, _)| b[..n].to_vec()), Some(vec![SEEN]));
            }
        }
    }

    /// A joiner waits only for senders whose process runs (a forked child may hold a gone
    /// parent's marker).
    #[test]
    fn only_a_running_senders_answer_is_awaited() {
        let p = group_prefix(&gid(4));
        assert!(owner_runs(&p, &format!("{p}w{}-0", std::process::id())));
        assert!(!owner_runs(&p, &format!("{p}w{}-0", libc::pid_t::MAX)), "no such process");
        assert!(!owner_runs(&p, &format!("{p}w-0")));
        assert!(!owner_runs(&p, &format!("{p}wx-0")));
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
