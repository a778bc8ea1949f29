//! Abstract-namespace unix SEQPACKET sockets: the rendezvous and control channel of the soft
//! provider (QP links and the connection manager). Abstract names live per network namespace,
//! which is exactly the scope of "this host" for the tests' namespaces.

use crate::errno::{check, check_size, Errno, Result};
use crate::runtime::socket::kernel_socket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn sockaddr(name: &str) -> Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > a.sun_path.len() {
        return Err(Errno::EINVAL);
    }
    // sun_path[0] stays 0: the abstract namespace.
    for (i, b) in bytes.iter().enumerate() {
        a.sun_path[i + 1] = *b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((a, len as libc::socklen_t))
}

/// Every socket is non-blocking: a peer that stops reading or writing must never block us.
fn socket() -> Result<OwnedFd> {
    kernel_socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0)
}

/// Binds a socket to an abstract name; `EADDRINUSE` if taken.
pub fn bind(name: &str) -> Result<OwnedFd> {
    let fd = socket()?;
    let (a, len) = sockaddr(name)?;
    // SAFETY: a is a valid sockaddr_un of length len.
    check(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// Binds and listens.
pub fn listen(name: &str) -> Result<OwnedFd> {
    let fd = bind(name)?;
    // SAFETY: fd is a bound socket.
    check(unsafe { libc::listen(fd.as_raw_fd(), 1024) })?;
    set_nonblocking(fd.as_raw_fd())?;
    Ok(fd)
}

/// Starts listening on an already bound socket.
pub fn listen_bound(fd: &OwnedFd, backlog: i32) -> Result<()> {
    // SAFETY: fd is a bound socket.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog.max(1)) })?;
    set_nonblocking(fd.as_raw_fd())
}

/// Connects to the socket listening on `name` (`ECONNREFUSED` if nobody listens).
pub fn connect(name: &str) -> Result<OwnedFd> {
    let fd = socket()?;
    connect_fd(&fd, name)?;
    Ok(fd)
}

/// Connects an existing (possibly bound) socket, and only to a listener whose owner this
/// process accepts (`access`): `ECONNREFUSED` otherwise. A listener whose queue is full
/// (`EAGAIN` on a non-blocking unix socket) is retried for up to a second on an application
/// thread; the progress thread never waits for a peer.
pub fn connect_fd(fd: &OwnedFd, name: &str) -> Result<()> {
    let (a, len) = sockaddr(name)?;
    let mut tries = if super::engine::on_progress_thread() { 0 } else { 100 };
    loop {
        // SAFETY: a is a valid sockaddr_un of length len.
        let r =
            unsafe { libc::connect(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) };
        match check(r) {
            Err(e) if e == Errno::ENOENT => return Err(Errno::ECONNREFUSED),
            Err(e) if e.0 == libc::EINTR => continue,
            Err(e) if e == Errno::EAGAIN && tries > 0 => {
                tries -= 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e == Errno::EAGAIN => return Err(Errno::ECONNREFUSED),
            Err(e) => return Err(e),
            Ok(_) => break,
        }
    }
    match peer_uid(fd.as_raw_fd()) {
        Ok(uid) if super::access::allowed(uid) => Ok(()),
        _ => Err(Errno::ECONNREFUSED),
    }
}

/// The user id of the process at the other end of a connected unix socket (`SO_PEERCRED`:
/// taken by the kernel when the peer connected or listened, so the peer cannot forge it).
pub fn peer_uid(fd: RawFd) -> Result<u32> {
    // SAFETY: all-zero is a valid ucred.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: c is a valid out-buffer of len bytes.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(c.uid)
}

/// Accepts one pending connection, non-blocking, `None` if there is none.
pub fn accept(listener: RawFd) -> Result<Option<OwnedFd>> {
    // SAFETY: accept4 with NULL address pointers is valid.
    let r = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    match check(r) {
        // SAFETY: r is a new descriptor owned here.
        Ok(fd) => Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(e) if e == Errno::EAGAIN => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let fl = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: fcntl on a descriptor we own; F_SETFL only changes its status flags.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    Ok(())
}

const MAX_FDS: usize = 4;

/// Attaches `fds` (at most `MAX_FDS`) to `msg` as one `SCM_RIGHTS` message in `cbuf`.
fn attach_fds(msg: &mut libc::msghdr, cbuf: &mut [u64; 8], fds: &[RawFd]) {
    if fds.is_empty() {
        return;
    }
    let bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(bytes) } as usize;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: msg_control points at cbuf, large enough for one cmsg with MAX_FDS fds (the
    // callers check the count).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
    }
}

/// Sends one message with up to four descriptors attached, without waiting: `EAGAIN` means the
/// peer has let hundreds of our messages pile up unread (the protocols send a handful); the
/// message is then not sent, which only harms that peer's own connection, instead of our
/// waiting for a peer that may never read.
pub fn send(fd: RawFd, data: &[u8], fds: &[RawFd]) -> Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    attach_fds(&mut msg, &mut cbuf, fds);
    loop {
        // SAFETY: msg describes valid buffers for the duration of the call.
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        match check_size(r) {
            Err(e) if e.0 == libc::EINTR => continue,
            r => return r.map(|_| ()),
        }
    }
}

/// Receives one message and the descriptors attached. `Ok(None)` means the peer closed, and
/// `Err(EAGAIN)` that nothing is pending on a non-blocking socket.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    let n = loop {
        // SAFETY: msg describes valid buffers for the duration of the call.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        match check_size(r) {
            Err(e) if e.0 == libc::EINTR => continue,
            Err(e) if e == Errno::ECONNRESET => return Ok(None),
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control; the CMSG macros walk it within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_len = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                let count = data_len / std::mem::size_of::<RawFd>();
                let p: *const RawFd = libc::CMSG_DATA(c).cast();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((n, fds)))
}

/// A plain-old-data message type that may be sent as raw bytes.
///
/// # Safety
/// Implementors are `repr(C)`, contain no pointers, and every bit pattern is valid.
pub unsafe trait Pod: Copy {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Self is Pod: reading its bytes is fine.
        unsafe {
            std::slice::from_raw_parts((self as *const Self).cast(), std::mem::size_of::<Self>())
        }
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: the buffer holds enough bytes and every bit pattern is a valid Self.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) })
    }
}

/// Binds a non-blocking datagram socket to an abstract name; `EADDRINUSE` if taken. The
/// socket asks for the sender's credentials with every datagram (`SO_PASSCRED`).
pub fn bind_dgram(name: &str) -> Result<OwnedFd> {
    let fd = kernel_socket(
        libc::AF_UNIX,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0,
    )?;
    let one: libc::c_int = 1;
    // SAFETY: setting an int option from a valid int.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    let (a, len) = sockaddr(name)?;
    // SAFETY: a is a valid sockaddr_un of length len.
    check(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// A non-blocking datagram socket bound to no name: it only sends (the receiver still learns
/// our credentials when it asks for them).
pub fn unbound_dgram() -> Result<OwnedFd> {
    kernel_socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0)
}

/// Sends one datagram made of `parts` to the socket bound to `name`.
pub fn send_dgram(fd: RawFd, name: &str, parts: &[&[u8]]) -> Result<()> {
    send_dgram_fds(fd, name, parts, &[])
}

/// [`send_dgram`] with descriptors attached (at most `MAX_FDS`).
pub fn send_dgram_fds(fd: RawFd, name: &str, parts: &[&[u8]], fds: &[RawFd]) -> Result<()> {
    if fds.len() > MAX_FDS {
        return Err(Errno::EINVAL);
    }
    let (mut a, len) = sockaddr(name)?;
    let mut iov: Vec<libc::iovec> = parts
        .iter()
        .map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() })
        .collect();
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut a as *mut libc::sockaddr_un).cast();
    msg.msg_namelen = len;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    let mut cbuf = [0u64; 8];
    attach_fds(&mut msg, &mut cbuf, fds);
    // SAFETY: msg describes valid buffers for the duration of the call.
    check_size(unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) })
        .map(|_| ())
}

/// Receives one datagram without blocking; `Ok(None)` when none is pending. Also returns the
/// sender's user id as the kernel recorded it (`None` if the credentials are missing).
pub fn recv_dgram(fd: RawFd, buf: &mut [u8]) -> Result<Option<(usize, Option<u32>)>> {
    Ok(recv_dgram_fds(fd, buf)?.map(|(n, uid, _fds)| (n, uid)))
}

/// A received datagram: its length, the sender's user id as the kernel recorded it, and the
/// descriptors attached.
pub type Dgram = (usize, Option<u32>, Vec<OwnedFd>);

/// [`recv_dgram`], keeping the descriptors attached (the caller closes those it does not use,
/// by dropping them).
pub fn recv_dgram_fds(fd: RawFd, buf: &mut [u8]) -> Result<Option<Dgram>> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // Room for the credentials and MAX_FDS descriptors; more are cut off (MSG_CTRUNC) and
    // closed by the kernel.
    let mut cbuf = [0u64; 16];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: msg describes valid buffers for the duration of the call.
    let r = unsafe {
        libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC | libc::MSG_CMSG_CLOEXEC)
    };
    let n = match check_size(r) {
        Ok(n) => n,
        Err(e) if e == Errno::EAGAIN => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut uid = None;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control; the CMSG macros walk it within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_CREDENTIALS
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as usize
            {
                let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                uid = Some(cred.uid);
            } else if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_len = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                let p: *const RawFd = libc::CMSG_DATA(c).cast();
                for i in 0..data_len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some((n, uid, fds)))
}

/// The abstract names of the unix sockets bound on this host (network namespace) that start
/// with `prefix`, from /proc/net/unix.
pub fn bound_names(prefix: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string("/proc/net/unix") else { return Vec::new() };
    let want = format!("@{prefix}");
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|n| n.starts_with(&want))
        .map(|n| n[1..].to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that never reads must not make us wait: once its queue is full, `send` says
    /// `EAGAIN` (the caller then drops the connection) instead of waiting for room.
    #[test]
    fn send_never_waits_for_a_reader() {
        let mut sv = [0; 2];
        // SAFETY: sv is a valid array of two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: both descriptors were just created and are owned here.
        let (a, _b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let msg = [0u8; 288];
        let sent = (0..100_000).take_while(|_| send(a.as_raw_fd(), &msg, &[]).is_ok()).count();
        assert!(sent < 100_000, "the queue of a peer that never reads never filled");
        assert_eq!(send(a.as_raw_fd(), &msg, &[]), Err(Errno::EAGAIN));
    }
}
