//! Who may reach this process's sockets. Abstract unix sockets carry no file permissions, so
//! every process of the network namespace could connect to our QP and CM sockets; we check the
//! peer's user id, which the kernel records (`SO_PEERCRED` for connections, `SCM_CREDENTIALS`
//! for datagrams) and the peer cannot forge.
//!
//! Accepted: our own user (real or effective uid), and the users listed in
//! `RDMASHIM_ALLOW_UIDS` (comma-separated uids, or `*` for everyone). Root gets no exception in
//! either direction: a root process and a user process talk only where each side lists the
//! other's uid, so a user cannot impersonate a root service's listener, nor root reach a
//! user's QPs by accident.

use once_cell::sync::Lazy;

/// The environment variable that opens this process to other users.
pub const ALLOW_VAR: &str = "RDMASHIM_ALLOW_UIDS";

enum Policy {
    Everyone,
    Listed(Vec<u32>),
}

/// Parses `RDMASHIM_ALLOW_UIDS`; entries that are not numbers are ignored.
fn parse(v: &str) -> Policy {
    if v.split(',').any(|t| t.trim() == "*") {
        return Policy::Everyone;
    }
    Policy::Listed(v.split(',').filter_map(|t| t.trim().parse().ok()).collect())
}

static POLICY: Lazy<Policy> = Lazy::new(|| parse(&std::env::var(ALLOW_VAR).unwrap_or_default()));

/// `true` if a peer running as `uid` may talk to this process.
pub fn allowed(uid: u32) -> bool {
    // SAFETY: getuid/geteuid cannot fail and have no preconditions.
    let (me, eme) = unsafe { (libc::getuid(), libc::geteuid()) };
    if uid == me || uid == eme {
        return true;
    }
    match &*POLICY {
        Policy::Everyone => true,
        Policy::Listed(l) => l.contains(&uid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_wildcard() {
        assert!(matches!(parse("*"), Policy::Everyone));
        assert!(matches!(parse("1, *"), Policy::Everyone));
        match parse("65534, 1000,x,") {
            Policy::Listed(l) => assert_eq!(l, vec![65534, 1000]),
            Policy::Everyone => panic!("not a wildcard"),
        }
        match parse("") {
            Policy::Listed(l) => assert!(l.is_empty()),
            Policy::Everyone => panic!("empty is nobody"),
        }
    }
}
