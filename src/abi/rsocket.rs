//! The rsocket entry points of librdmacm (`rdma/rsocket.h`, node RDMACM_1.0): argument
//! conversion only; the sockets live in `crate::rsocket`.

use crate::abi::Value;
use crate::entry;
use crate::errno::{Errno, Result};
use crate::rsocket;
use libc::{
    c_int, c_long, c_void, fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr,
    socklen_t, ssize_t, timeval,
};

/// Writes `a` to a caller's (addr, addrlen) as getsockname(2) does: truncated to the room
/// given, with the full length stored back.
///
/// # Safety
/// `addrlen` is NULL or valid; `addr` is NULL or writable for `*addrlen` bytes.
unsafe fn put_addr(
    a: &libc::sockaddr_storage,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> Result<()> {
    if addr.is_null() || addrlen.is_null() {
        return Err(Errno::EFAULT);
    }
    let full = rsocket::addr_len(a);
    // SAFETY: per the function's contract.
    unsafe {
        let n = full.min(*addrlen as usize);
        std::ptr::copy_nonoverlapping(std::ptr::addr_of!(*a).cast::<u8>(), addr.cast::<u8>(), n);
        *addrlen = full as socklen_t;
    }
    Ok(())
}

/// Borrows a C iovec array as (pointer, length) pairs.
///
/// # Safety
/// `iov` is NULL or valid for `cnt` entries.
unsafe fn iovs<T>(iov: *const iovec, cnt: c_int) -> Result<Vec<(*mut T, usize)>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) || (cnt > 0 && iov.is_null()) {
        return Err(Errno::EINVAL);
    }
    let v = if cnt == 0 {
        &[][..]
    } else {
        // SAFETY: per the function's contract.
        unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
    };
    if v.iter().any(|x| x.iov_base.is_null() && x.iov_len > 0) {
        return Err(Errno::EFAULT);
    }
    Ok(v.iter().map(|x| (x.iov_base.cast::<T>(), x.iov_len)).collect())
}

fn one<T>(buf: *mut T, len: size_t) -> Result<[(*mut T, usize); 1]> {
    if buf.is_null() && len > 0 {
        return Err(Errno::EFAULT);
    }
    Ok([(buf, len)])
}

fn send_iov(socket: c_int, v: &[(*mut u8, usize)], flags: c_int) -> Result<ssize_t> {
    let c: Vec<(*const u8, usize)> = v.iter().map(|&(p, l)| (p as *const u8, l)).collect();
    Ok(rsocket::send(socket, &c, flags)? as ssize_t)
}

entry! {
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> Value<c_int> {
        rsocket::socket(domain, type_, protocol)
    }

    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        // SAFETY: addr is readable for addrlen bytes per bind(2).
        let a = unsafe { rsocket::read_addr(addr, addrlen) }?;
        rsocket::bind(socket, a).map(|()| 0)
    }

    fn rlisten(socket: c_int, backlog: c_int) -> Value<c_int> {
        rsocket::listen(socket, backlog).map(|()| 0)
    }

    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int> {
        let (fd, peer) = rsocket::accept(socket)?;
        if !addr.is_null() && !addrlen.is_null() {
            // SAFETY: per accept(2), addr has *addrlen writable bytes.
            unsafe { put_addr(&peer, addr, addrlen) }?;
        }
        Ok(fd)
    }

    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        // SAFETY: addr is readable for addrlen bytes per connect(2).
        let a = unsafe { rsocket::read_addr(addr, addrlen) }?;
        rsocket::connect(socket, a).map(|()| 0)
    }

    fn rshutdown(socket: c_int, how: c_int) -> Value<c_int> {
        rsocket::shutdown(socket, how).map(|()| 0)
    }

    fn rclose(socket: c_int) -> Value<c_int> {
        rsocket::close(socket).map(|()| 0)
    }

    fn rrecv(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        Ok(rsocket::recv(socket, &one(buf.cast::<u8>(), len)?, flags)? as ssize_t)
    }

    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: size_t,
        flags: c_int,
        src_addr: *mut sockaddr,
        addrlen: *mut socklen_t,
    ) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        let (n, from) = rsocket::recvfrom(socket, &one(buf.cast::<u8>(), len)?, flags)?;
        if !src_addr.is_null() && !addrlen.is_null() {
            let from = match from {
                Some(a) => Some(a),
                None if n > 0 => Some(rsocket::name(socket, true)?),
                None => None,
            };
            if let Some(a) = from {
                // SAFETY: per recvfrom(2), src_addr has *addrlen writable bytes.
                unsafe { put_addr(&a, src_addr, addrlen) }?;
            }
        }
        Ok(n as ssize_t)
    }

    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        // SAFETY: msg is a valid msghdr per recvmsg(2).
        let m = unsafe { crate::abi::out(msg) }?;
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        // SAFETY: the msghdr's iovec array per recvmsg(2).
        let v = unsafe { iovs::<u8>(m.msg_iov, m.msg_iovlen as c_int) }?;
        m.msg_flags = 0;
        Ok(rsocket::recv(socket, &v, flags)? as ssize_t)
    }

    fn rsend(socket: c_int, buf: *const c_void, len: size_t, flags: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        send_iov(socket, &one(buf as *mut u8, len)?, flags)
    }

    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: size_t,
        flags: c_int,
        dest_addr: *const sockaddr,
        addrlen: socklen_t,
    ) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        let to = if dest_addr.is_null() {
            None
        } else {
            // SAFETY: dest_addr is readable for addrlen bytes per sendto(2).
            Some(unsafe { rsocket::read_addr(dest_addr, addrlen) }?)
        };
        let v = one(buf as *mut u8, len)?;
        Ok(rsocket::sendto(socket, &[(v[0].0 as *const u8, v[0].1)], to, flags)? as ssize_t)
    }

    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        // SAFETY: msg is a valid msghdr per sendmsg(2).
        let m = unsafe { crate::abi::arg(msg) }?;
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        // SAFETY: the msghdr's iovec array per sendmsg(2).
        let v = unsafe { iovs::<u8>(m.msg_iov, m.msg_iovlen as c_int) }?;
        send_iov(socket, &v, flags)
    }

    fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        Ok(rsocket::recv(socket, &one(buf.cast::<u8>(), count)?, 0)? as ssize_t)
    }

    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        // SAFETY: iov has iovcnt entries per readv(2).
        let v = unsafe { iovs::<u8>(iov, iovcnt) }?;
        Ok(rsocket::recv(socket, &v, 0)? as ssize_t)
    }

    fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        send_iov(socket, &one(buf as *mut u8, count)?, 0)
    }

    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> Value<ssize_t> {
        rsocket::check_fd(socket)?;
        // SAFETY: iov has iovcnt entries per writev(2).
        let v = unsafe { iovs::<u8>(iov, iovcnt) }?;
        send_iov(socket, &v, 0)
    }

    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        let a = rsocket::name(socket, true)?;
        // SAFETY: per getpeername(2).
        unsafe { put_addr(&a, addr, addrlen) }.map(|()| 0)
    }

    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        let a = rsocket::name(socket, false)?;
        // SAFETY: per getsockname(2).
        unsafe { put_addr(&a, addr, addrlen) }.map(|()| 0)
    }

    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        if optval.is_null() && optlen > 0 {
            return Err(Errno::EFAULT);
        }
        let v = if optlen == 0 {
            &[][..]
        } else {
            // SAFETY: optval holds optlen bytes per setsockopt(2).
            unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen as usize) }
        };
        rsocket::setsockopt(socket, level, optname, v).map(|()| 0)
    }

    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        // SAFETY: optlen is valid per getsockopt(2).
        let len = unsafe { crate::abi::out(optlen) }?;
        if optval.is_null() {
            return Err(Errno::EFAULT);
        }
        // SAFETY: optval has *optlen writable bytes per getsockopt(2).
        let out = unsafe { std::slice::from_raw_parts_mut(optval.cast::<u8>(), *len as usize) };
        *len = rsocket::getsockopt(socket, level, optname, out)? as socklen_t;
        Ok(0)
    }

    // C declares `int rfcntl(int socket, int cmd, ... /* arg */)`, and stable Rust cannot
    // define a variadic function. A fixed third parameter is what variadic callers pass on the
    // targets we build for: on x86-64 (System V) variadic integer and pointer arguments travel
    // in the same registers as named ones (the extra %al vector count is ignored by a
    // non-variadic callee), and on Linux aarch64 (AAPCS64) they are passed exactly like named
    // arguments. `c_long` covers both an `int` and a pointer argument; when the caller passes
    // no argument (F_GETFL) or an `int`, the register holds garbage, so only F_SETFL reads it,
    // and only its low 32 bits.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> Value<c_int> {
        rsocket::fcntl(socket, cmd, arg as c_int as i64)
    }

    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> Value<off_t> {
        rsocket::check_fd(socket)?;
        let _ = flags; // no flags are defined
        rsocket::riomap(socket, buf.cast(), len, prot, offset)
    }

    fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> Value<c_int> {
        rsocket::check_fd(socket)?;
        rsocket::riounmap(socket, buf.cast(), len).map(|()| 0)
    }

    // Fails with `(size_t)-1` and errno when nothing was written, as rdma-core's riowrite.
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: size_t,
        offset: off_t,
        flags: c_int,
    ) -> Value<size_t> {
        rsocket::check_fd(socket)?;
        // SAFETY: buf holds count bytes per riowrite(3).
        unsafe { rsocket::riowrite(socket, buf.cast(), count, offset, flags) }
    }

    /// `poll(2)` over rsockets and ordinary descriptors.
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> Value<c_int> {
        if nfds > 0 && fds.is_null() {
            return Err(Errno::EFAULT);
        }
        // poll(2)'s own limit, checked before the array is touched.
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `rl` is a valid out-parameter.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 && nfds > rl.rlim_cur {
            return Err(Errno::EINVAL);
        }
        let v = if nfds == 0 {
            &mut [][..]
        } else {
            // SAFETY: fds holds nfds pollfds per poll(2).
            unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
        };
        rsocket::rpoll(v, timeout)
    }

    /// `select(2)` over rsockets and ordinary descriptors.
    fn rselect(
        nfds: c_int,
        readfds: *mut fd_set,
        writefds: *mut fd_set,
        exceptfds: *mut fd_set,
        timeout: *mut timeval,
    ) -> Value<c_int> {
        // SAFETY: each set and the timeout is NULL or valid caller memory per select(2).
        unsafe { rsocket::rselect(nfds, readfds.as_mut(), writefds.as_mut(), exceptfds.as_mut(), timeout.as_ref()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        Errno::last().0
    }

    #[test]
    fn unimplemented_and_unknown_rsockets_fail_cleanly() {
        // SAFETY: these stubs never touch their arguments.
        unsafe {
            assert_eq!(rsocket(libc::AF_UNIX, libc::SOCK_DGRAM, 0), -1);
            assert_eq!(errno(), libc::EAFNOSUPPORT);
            assert_eq!(rsend(3, std::ptr::null(), 0, 0), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(riomap(3, std::ptr::null_mut(), 0, 0, 0, -1), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rfcntl(3, libc::F_GETFL, 0), -1);
            assert_eq!(errno(), libc::EBADF);
            Errno(0).set();
            assert_eq!(riowrite(3, std::ptr::null(), 1, 0, 0), usize::MAX);
            assert_eq!(errno(), libc::EBADF);
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
        // SAFETY: `p` is one valid pollfd.
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
