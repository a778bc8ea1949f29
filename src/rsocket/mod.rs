//! rsockets (rsocket(7)): socket calls over RDMA, a layer above the CM. A stream rsocket is an
//! RC connection carrying librdmacm's protocol (`wire`), so either end may be librdmacm.
//!
//! The layer is a client of this library's public API (`capi`), as librdmacm's rsocket code
//! is of librdmacm's: the CM and verbs know nothing of it. `abi::rsocket` only converts
//! arguments and calls the functions here.

mod capi;
mod dgram;
mod ep;
mod iomap;
mod keepalive;
mod opts;
mod poll;
mod stream;
mod wire;
mod xfer;

pub use opts::SOL_RDMA;
pub use poll::{rpoll, rselect};

use crate::errno::{Errno, Result};
use crate::runtime::fork;
use crate::runtime::lock;
use dgram::Dgram;
use ep::Sizes;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use stream::Stream;

/// The process's rsockets by number, each stamped with the fork generation that made it. A
/// forked child sees its parent's sockets in these tables but may not use them (they share
/// rings and descriptors with the parent's live connections): `lookup` hides them and `close`
/// only lets go of the child's descriptors. The tables are used under `fork::shared()`, so
/// no thread holds them at the moment of fork.
static TABLE: Lazy<Table<Stream>> = Lazy::new(|| Mutex::new(HashMap::new()));
static DGRAMS: Lazy<Table<Dgram>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// Sockets by number, with the fork generation that made each.
type Table<T> = Mutex<HashMap<i32, (u64, Arc<T>)>>;

fn with<T, R>(t: &Table<T>, f: impl FnOnce(&mut HashMap<i32, (u64, Arc<T>)>) -> R) -> R {
    crate::runtime::fork::install();
    let _f = fork::shared();
    // The table's guard goes before `_f`: as a tail expression's temporary it would outlive
    // it, and a fork in between would leave the child this table locked.
    let mut g = lock(t);
    let r = f(&mut g);
    drop(g);
    r
}

/// A parent's sockets that a forked child let go of: never dropped (their ids, QPs and memory
/// are the parent's, and a parent thread may have held their locks at the moment of fork), but
/// kept reachable, so a leak checker does not report the child's copy-on-write pages of them.
static ABANDONED: Lazy<Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>> =
    Lazy::new(|| Mutex::new(Vec::new()));

fn abandon<T: Send + Sync + 'static>(s: Arc<T>) {
    let _f = fork::shared();
    lock(&ABANDONED).push(Box::new(s));
}

/// A parent's socket whose number a forked child reused (the child closed the descriptor
/// without rclose): left alone, as `close` leaves it.
fn forget_foreign<T: Send + Sync + 'static>(old: Option<(u64, Arc<T>)>) {
    if let Some((_, s)) = old {
        abandon(s);
    }
}

/// The entry numbered `fd` if this process (not a parent before fork) made it.
fn ours<T>(t: &Table<T>, fd: i32) -> Option<Arc<T>> {
    if fd < 0 {
        return None;
    }
    let g = fork::generation();
    with(t, |m| m.get(&fd).filter(|e| e.0 == g).map(|e| e.1.clone()))
}

/// The datagram rsocket numbered `fd`, if it is one.
pub fn lookup_dgram(fd: i32) -> Option<Arc<Dgram>> {
    ours(&DGRAMS, fd)
}

/// The rsocket numbered `fd`, if it is one.
pub fn lookup(fd: i32) -> Option<Arc<Stream>> {
    ours(&TABLE, fd)
}

fn get(fd: i32) -> Result<Arc<Stream>> {
    lookup(fd).ok_or(Errno::EBADF)
}

/// `EBADF` unless `fd` is an rsocket (stream or datagram). Checked before any other argument,
/// as librdmacm and the kernel do: a bad descriptor is reported as such, not as a bad buffer.
pub fn check_fd(fd: i32) -> Result<()> {
    if lookup(fd).is_some() || lookup_dgram(fd).is_some() {
        Ok(())
    } else {
        Err(Errno::EBADF)
    }
}

/// Defaults: librdmacm's, overridden by `/etc/rdma/rsocket/*` when present (read once).
static DEFAULTS: Lazy<Sizes> = Lazy::new(|| {
    let read = |name: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/etc/rdma/rsocket/{name}")).ok()?.trim().parse().ok()
    };
    if let Some(t) = read("polling_time") {
        xfer::POLLING_TIME_US.store(t, std::sync::atomic::Ordering::Relaxed);
    }
    let iomap = read("iomap_size").unwrap_or(0).min(0xFFFF);
    Sizes {
        sq_size: read("sqsize_default").unwrap_or(384).min(0xFFFF) as u16,
        rq_size: read("rqsize_default").unwrap_or(384).min(0xFFFF) as u16,
        sq_inline: read("inline_default").unwrap_or(64).min(0xFFFF),
        rbuf_size: read("mem_default").unwrap_or(1 << 17).clamp(1, 1 << 28),
        sbuf_size: read("wmem_default").map_or(1 << 17, |v| {
            if v < ep::SNDLOWAT {
                ep::SNDLOWAT << 1
            } else {
                v.min(1 << 28)
            }
        }),
        iomap_size: wire::scale_to_value(wire::value_to_scale(iomap, 8), 8).min(255),
    }
});

fn insert(s: Stream) -> i32 {
    let fd = s.fd;
    let old = with(&TABLE, |m| m.insert(fd, (fork::generation(), Arc::new(s))));
    forget_foreign(old);
    fd
}

pub fn socket(domain: i32, ty: i32, protocol: i32) -> Result<i32> {
    let ty = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(Errno::EAFNOSUPPORT);
    }
    match ty {
        libc::SOCK_STREAM if protocol == 0 || protocol == libc::IPPROTO_TCP => {}
        libc::SOCK_DGRAM if protocol == 0 || protocol == libc::IPPROTO_UDP => {
            let d = Dgram::create(domain)?;
            let fd = d.fd;
            let old = with(&DGRAMS, |m| m.insert(fd, (fork::generation(), Arc::new(d))));
            forget_foreign(old);
            return Ok(fd);
        }
        _ => return Err(Errno::EOPNOTSUPP),
    }
    Ok(insert(Stream::create(domain, *DEFAULTS)?))
}

/// Checks a caller's address: a whole sockaddr_in or sockaddr_in6, copied out.
///
/// # Safety
/// `addr` is NULL or readable for `len` bytes.
pub unsafe fn read_addr(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<libc::sockaddr_storage> {
    if addr.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: at least the family field is readable when len ≥ 2 (checked next).
    if (len as usize) < 2 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: addr is non-NULL and len ≥ 2 (checked above), so its family field is readable.
    let fam = unsafe { (*addr).sa_family } as i32;
    let need = match fam {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(Errno::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(Errno::EINVAL);
    }
    // SAFETY: all-zero is a valid sockaddr_storage; `need` bytes are readable per the checks.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: `need` bytes of addr are readable (len ≥ need, checked above) and st holds at
    // least that many.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            std::ptr::addr_of_mut!(st).cast::<u8>(),
            need,
        )
    };
    Ok(st)
}

pub fn bind(fd: i32, a: libc::sockaddr_storage) -> Result<()> {
    if let Some(d) = lookup_dgram(fd) {
        return d.bind(&a);
    }
    get(fd)?.bind(std::ptr::addr_of!(a).cast())
}

pub fn listen(fd: i32, backlog: i32) -> Result<()> {
    get(fd)?.listen(backlog)
}

pub fn accept(fd: i32) -> Result<(i32, libc::sockaddr_storage)> {
    let s = get(fd)?;
    let child = s.accept(false)?;
    {
        let parent = lock(&s.st);
        let mut st = lock(&child.st);
        st.opts = parent.opts;
    }
    let peer = child.name(true);
    let keep = lock(&child.st).opts.keepalive;
    let fd = insert(child);
    if keep {
        if let Some(s) = lookup(fd) {
            keepalive::update(&s);
        }
    }
    Ok((fd, peer))
}

pub fn connect(fd: i32, a: libc::sockaddr_storage) -> Result<()> {
    if let Some(d) = lookup_dgram(fd) {
        return d.connect(&a);
    }
    get(fd)?.connect(a)
}

pub fn shutdown(fd: i32, how: i32) -> Result<()> {
    if lookup_dgram(fd).is_some() {
        return Ok(());
    }
    let s = get(fd)?;
    keepalive::remove(&s);
    s.shutdown(how)
}

pub fn close(fd: i32) -> Result<()> {
    let g = fork::generation();
    if let Some((gen, d)) = with(&DGRAMS, |m| m.remove(&fd)) {
        if gen != g {
            // SAFETY: the child's copy of the parent's socket descriptor, closed once here.
            unsafe { libc::close(fd) };
            abandon(d);
        }
        return Ok(());
    }
    let (gen, s) = with(&TABLE, |m| m.remove(&fd)).ok_or(Errno::EBADF)?;
    if gen != g {
        // A parent's socket in a forked child: its id, QP and memory are the parent's, so
        // nothing is destroyed or sent (the parent's connection lives on); only the child's
        // copies of the descriptors go. The rest is the child's copy-on-write memory, left as
        // it is (a parent thread may have held its locks at the moment of fork).
        // SAFETY: the child's copies of the descriptors, closed once here.
        unsafe {
            libc::close(s.fd);
            libc::close(s.kick);
        }
        abandon(s);
        return Ok(());
    }
    keepalive::remove(&s);
    let connected = lock(&s.st).phase == stream::Phase::Connected;
    if connected {
        let _ = s.shutdown(libc::SHUT_RDWR);
    }
    Ok(())
}

pub fn send(fd: i32, iov: &[(*const u8, usize)], flags: i32) -> Result<usize> {
    sendto(fd, iov, None, flags)
}

/// One datagram's bytes gathered from `iov`.
fn gather(iov: &[(*const u8, usize)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(iov.iter().map(|x| x.1).sum());
    for &(p, l) in iov {
        if l > 0 {
            // SAFETY: the caller's buffers are readable for their lengths (checked non-NULL).
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, l) });
        }
    }
    v
}

pub fn sendto(
    fd: i32,
    iov: &[(*const u8, usize)],
    to: Option<libc::sockaddr_storage>,
    flags: i32,
) -> Result<usize> {
    if let Some(d) = lookup_dgram(fd) {
        return d.sendto(&gather(iov), to, flags);
    }
    if to.is_some() {
        return Err(Errno::EISCONN);
    }
    get(fd)?.send(iov, flags)
}

pub fn recv(fd: i32, iov: &[(*mut u8, usize)], flags: i32) -> Result<usize> {
    recvfrom(fd, iov, flags).map(|(n, _)| n)
}

/// Reads into `iov`; the source address for datagram sockets (stream sockets: None).
pub fn recvfrom(
    fd: i32,
    iov: &[(*mut u8, usize)],
    flags: i32,
) -> Result<(usize, Option<libc::sockaddr_storage>)> {
    if let Some(d) = lookup_dgram(fd) {
        let total: usize = iov.iter().map(|x| x.1).sum();
        let mut buf = vec![0u8; total];
        let (n, from) = d.recvfrom(&mut buf, flags)?;
        let mut off = 0;
        for &(p, l) in iov {
            let k = l.min(n - off);
            // SAFETY: the caller's buffers are writable for their lengths.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(off), p, k) };
            off += k;
        }
        return Ok((n, Some(from)));
    }
    Ok((get(fd)?.recv(iov, flags)?, None))
}

/// The local (`peer` false) or remote address.
pub fn name(fd: i32, peer: bool) -> Result<libc::sockaddr_storage> {
    if let Some(d) = lookup_dgram(fd) {
        return d.name(peer);
    }
    let s = get(fd)?;
    if peer {
        let st = lock(&s.st);
        if !matches!(st.phase, stream::Phase::Connected | stream::Phase::Disconnected) {
            return Err(Errno::ENOTCONN);
        }
    }
    Ok(s.name(peer))
}

pub fn setsockopt(fd: i32, level: i32, name: i32, v: &[u8]) -> Result<()> {
    if let Some(d) = lookup_dgram(fd) {
        if level == SOL_RDMA {
            return Ok(()); // queue and inline sizes are fixed for datagram sockets
        }
        // SAFETY: our UDP socket; `v` is the caller's option buffer.
        let r = unsafe { libc::setsockopt(d.fd, level, name, v.as_ptr().cast(), v.len() as u32) };
        return crate::errno::check(r).map(drop);
    }
    let s = get(fd)?;
    s.setsockopt(level, name, v)?;
    if matches!(
        (level, name),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) | (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)
    ) {
        keepalive::update(&s);
    }
    Ok(())
}

pub fn getsockopt(fd: i32, level: i32, name: i32, out: &mut [u8]) -> Result<usize> {
    if let Some(d) = lookup_dgram(fd) {
        let mut len = out.len() as u32;
        // SAFETY: our UDP socket; `out` has `len` writable bytes.
        let r = unsafe { libc::getsockopt(d.fd, level, name, out.as_mut_ptr().cast(), &mut len) };
        return crate::errno::check(r).map(|_| len as usize);
    }
    get(fd)?.getsockopt(level, name, out)
}

pub fn fcntl(fd: i32, cmd: i32, arg: i64) -> Result<i32> {
    if let Some(d) = lookup_dgram(fd) {
        return match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if d.nonblock() { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                d.set_nonblock((arg as i32) & libc::O_NONBLOCK != 0);
                Ok(0)
            }
            _ => Err(Errno::EOPNOTSUPP),
        };
    }
    get(fd)?.fcntl(cmd, arg)
}

pub fn riomap(fd: i32, buf: *mut u8, len: usize, prot: i32, offset: i64) -> Result<i64> {
    get(fd)?.riomap(buf, len, prot, offset)
}

pub fn riounmap(fd: i32, buf: *mut u8, len: usize) -> Result<()> {
    get(fd)?.riounmap(buf, len)
}

/// # Safety
/// `buf` is readable for `count` bytes.
pub unsafe fn riowrite(
    fd: i32,
    buf: *const u8,
    count: usize,
    offset: i64,
    flags: i32,
) -> Result<usize> {
    if buf.is_null() && count > 0 {
        return Err(Errno::EFAULT);
    }
    get(fd)?.riowrite(buf, count, offset, flags)
}

/// Bytes of a socket address of `family` (what getsockname reports).
pub fn addr_len(a: &libc::sockaddr_storage) -> usize {
    if a.ss_family as i32 == libc::AF_INET6 {
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        std::mem::size_of::<libc::sockaddr_in>()
    }
}
