//! The rsocket entry points of librdmacm (`rdma/rsocket.h`, node RDMACM_1.0).
//!
//! rsockets are not implemented yet (a future issue): every call that takes or makes an
//! rsocket fails cleanly with `ENOSYS` in its own convention (−1 with errno; `(size_t)-1` with
//! errno for `riowrite`, as rdma-core). They exist because programs
//! link against them: every rdma-core example imports `rpoll`, since their shared
//! `examples/common.c` references it, so a missing symbol would stop even the non-rsocket
//! programs from loading.
//!
//! `rpoll` and `rselect` are real: rsocket's versions accept ordinary fds mixed with rsockets
//! and treat them as `poll`/`select` would, and as there are no rsockets yet every fd is an
//! ordinary one, so they are exactly `poll` and `select`.

use crate::abi::Value;
use crate::errno::{check, Errno};
use crate::{entry, unimplemented_entry};
use libc::{
    c_int, c_long, c_void, fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr,
    socklen_t, ssize_t, timeval,
};

unimplemented_entry! { Errno::ENOSYS =>
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> Value<c_int>;
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> Value<c_int>;
    fn rlisten(socket: c_int, backlog: c_int) -> Value<c_int>;
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int>;
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> Value<c_int>;
    fn rshutdown(socket: c_int, how: c_int) -> Value<c_int>;
    fn rclose(socket: c_int) -> Value<c_int>;

    fn rrecv(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> Value<ssize_t>;
    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: size_t,
        flags: c_int,
        src_addr: *mut sockaddr,
        addrlen: *mut socklen_t,
    ) -> Value<ssize_t>;
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> Value<ssize_t>;
    fn rsend(socket: c_int, buf: *const c_void, len: size_t, flags: c_int) -> Value<ssize_t>;
    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: size_t,
        flags: c_int,
        dest_addr: *const sockaddr,
        addrlen: socklen_t,
    ) -> Value<ssize_t>;
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> Value<ssize_t>;
    fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> Value<ssize_t>;
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> Value<ssize_t>;
    fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> Value<ssize_t>;
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> Value<ssize_t>;

    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int>;
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int>;
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> Value<c_int>;
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> Value<c_int>;

    // C declares `int rfcntl(int socket, int cmd, ... /* arg */)`, and stable Rust cannot
    // define a variadic function. A fixed third parameter is what variadic callers pass on the
    // targets we build for: on x86-64 (System V) variadic integer and pointer arguments travel
    // in the same registers as named ones (the extra %al vector count is ignored by a
    // non-variadic callee), and on Linux aarch64 (AAPCS64) they are passed exactly like named
    // arguments. `c_long` covers both an `int` and a pointer argument; when the caller passes
    // no argument (F_GETFL) or an `int`, the register holds garbage, so an implementation may
    // only read as many bits as `cmd` implies.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> Value<c_int>;

    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> Value<off_t>;
    fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> Value<c_int>;
    // Fails with `(size_t)-1` and errno, as rdma-core's riowrite does before writing anything.
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: size_t,
        offset: off_t,
        flags: c_int,
    ) -> Value<size_t>;
}

entry! {
    /// `poll(2)`: with no rsockets in existence every fd is an ordinary one.
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> Value<c_int> {
        // SAFETY: the arguments go to poll unchanged; the kernel checks the array and fails
        // with EFAULT if it is not readable and writable for `nfds` entries.
        check(unsafe { libc::poll(fds, nfds, timeout) })
    }

    /// `select(2)`: with no rsockets in existence every fd is an ordinary one.
    fn rselect(
        nfds: c_int,
        readfds: *mut fd_set,
        writefds: *mut fd_set,
        exceptfds: *mut fd_set,
        timeout: *mut timeval,
    ) -> Value<c_int> {
        // SAFETY: the arguments go to select unchanged; each set and the timeout is NULL or
        // caller memory, which the kernel checks (EFAULT).
        check(unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        Errno::last().0
    }

    #[test]
    fn rsocket_calls_fail_with_enosys() {
        // SAFETY: these stubs never touch their arguments.
        unsafe {
            assert_eq!(rsocket(libc::AF_INET, libc::SOCK_STREAM, 0), -1);
            assert_eq!(errno(), libc::ENOSYS);
            assert_eq!(rsend(3, std::ptr::null(), 0, 0), -1);
            assert_eq!(errno(), libc::ENOSYS);
            assert_eq!(riomap(3, std::ptr::null_mut(), 0, 0, 0, -1), -1);
            assert_eq!(errno(), libc::ENOSYS);
            assert_eq!(rfcntl(3, libc::F_GETFL, 0), -1);
            assert_eq!(errno(), libc::ENOSYS);
            Errno(0).set();
            assert_eq!(riowrite(3, std::ptr::null(), 1, 0, 0), usize::MAX);
            assert_eq!(errno(), libc::ENOSYS);
        }
    }

    #[test]
    fn rpoll_polls_ordinary_fds() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut p = [pollfd { fd: fds[0], events: libc::POLLIN, revents: 0 }];
        // SAFETY: `p` is one valid pollfd.
        assert_eq!(unsafe { rpoll(p.as_mut_ptr(), 1, 0) }, 0);
        // SAFETY: writes one byte from a live buffer to our pipe.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        // SAFETY: as above.
        assert_eq!(unsafe { rpoll(p.as_mut_ptr(), 1, 1000) }, 1);
        assert_eq!(p[0].revents & libc::POLLIN, libc::POLLIN);
        let mut tv = timeval { tv_sec: 0, tv_usec: 0 };
        let none = std::ptr::null_mut();
        // SAFETY: all sets NULL, `tv` is live.
        assert_eq!(unsafe { rselect(0, none, none, none, &mut tv) }, 0);
        // SAFETY: closing the pipe we opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
