//! Every socket the library makes for itself comes from here: `socket(2)` by system call, not
//! through the libc symbol. Debian's librspreload interposes `socket` and turns every INET
//! socket made on a thread that is not already inside `rsocket()` into an rsocket, so a UDP
//! socket of the network path, the CM or a datagram rsocket made through libc would become an
//! rsocket of our own (and an AF_UNIX one would cost a failed `rsocket()` that leaves errno set).

use crate::errno::{check, Result};
use std::os::fd::{FromRawFd, OwnedFd};

/// A new socket owned by the caller (`ty` may carry `SOCK_NONBLOCK`/`SOCK_CLOEXEC`).
pub fn kernel_socket(domain: i32, ty: i32, protocol: i32) -> Result<OwnedFd> {
    // SAFETY: the socket system call with integer arguments; it returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_socket, domain, ty, protocol) } as i32;
    let raw = check(raw)?;
    // SAFETY: raw was just created by the kernel and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
