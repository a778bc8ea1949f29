//! rsetsockopt / rgetsockopt / rfcntl on stream rsockets.
//!
//! `SOL_RDMA` and its option names come from `rdma/rsocket.h`, which rdma-sys does not bind;
//! the values are fixed by librdmacm's ABI (`c-tests` compile against the real header and use
//! them, so a mismatch fails the conformance clauses).

use super::capi;
use super::stream::{Phase, Stream};
use crate::errno::{Errno, Result};
use crate::runtime::lock;

pub const SOL_RDMA: i32 = 0x10000;
pub const RDMA_SQSIZE: i32 = 0;
pub const RDMA_RQSIZE: i32 = 1;
pub const RDMA_INLINE: i32 = 2;
pub const RDMA_IOMAPSIZE: i32 = 3;
pub const RDMA_ROUTE: i32 = 4;

/// librdmacm's `RDMA_OPTION_ID` level and its `REUSEADDR` / `AFONLY` names (rdma_cma.h).
const OPTION_ID: i32 = 0;
const OPTION_ID_REUSEADDR: i32 = 1;
const OPTION_ID_AFONLY: i32 = 2;

fn int_of(v: &[u8]) -> Result<i32> {
    let b: [u8; 4] = v.get(..4).ok_or(Errno::EINVAL)?.try_into().map_err(|_| Errno::EINVAL)?;
    Ok(i32::from_ne_bytes(b))
}

impl Stream {
    pub fn setsockopt(&self, level: i32, name: i32, v: &[u8]) -> Result<()> {
        let mut st = lock(&self.st);
        let before_conn = st.ep.is_none();
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
                let mut on = int_of(v)?;
                // SAFETY: our live id; `on` is an int.
                let r = unsafe {
                    capi::rdma_set_option(
                        self.id,
                        OPTION_ID,
                        OPTION_ID_REUSEADDR,
                        std::ptr::addr_of_mut!(on).cast(),
                        4,
                    )
                };
                if r != 0 && before_conn {
                    return Err(Errno::last());
                }
                st.opts.reuseaddr = on != 0;
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) if before_conn => {
                st.sizes.rbuf_size =
                    (int_of(v)?.max(0) as u32).saturating_mul(2).clamp(8192, 1 << 28)
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF) if before_conn => {
                st.sizes.sbuf_size =
                    (int_of(v)?.max(0) as u32).saturating_mul(2).clamp(8192, 1 << 28)
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {} // fixed once connected
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                if v.len() < std::mem::size_of::<libc::linger>() {
                    return Err(Errno::EINVAL);
                }
                let on = int_of(v)?;
                let secs = int_of(&v[4..])?;
                st.opts.linger = (on != 0).then_some(secs);
            }
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                st.opts.keepalive = int_of(v)? != 0;
                if st.opts.keepalive && st.opts.keepalive_time == 0 {
                    st.opts.keepalive_time = super::keepalive::default_time();
                }
            }
            (libc::SOL_SOCKET, libc::SO_OOBINLINE) => st.opts.oobinline = int_of(v)? != 0,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => st.opts.nodelay = int_of(v)? != 0,
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
                int_of(v)?;
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => match int_of(v)? {
                t if t <= 0 => return Err(Errno::EINVAL),
                t => st.opts.keepalive_time = t as u32,
            },
            // Retry counts and probe intervals have no meaning over a reliable connection
            // (librdmacm accepts and ignores them too).
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => {
                int_of(v)?;
            }
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                let mut on = int_of(v)?;
                // SAFETY: our live id; `on` is an int.
                let r = unsafe {
                    capi::rdma_set_option(
                        self.id,
                        OPTION_ID,
                        OPTION_ID_AFONLY,
                        std::ptr::addr_of_mut!(on).cast(),
                        4,
                    )
                };
                if r != 0 {
                    return Err(Errno::last());
                }
            }
            (SOL_RDMA, _) if !before_conn => return Err(Errno::EINVAL),
            (SOL_RDMA, RDMA_SQSIZE) => st.sizes.sq_size = int_of(v)?.clamp(0, 0xFFFF) as u16,
            (SOL_RDMA, RDMA_RQSIZE) => st.sizes.rq_size = int_of(v)?.clamp(0, 0xFFFF) as u16,
            (SOL_RDMA, RDMA_INLINE) => st.sizes.sq_inline = int_of(v)?.clamp(0, 0xFFFF) as u32,
            (SOL_RDMA, RDMA_IOMAPSIZE) => {
                let n = int_of(v)?.clamp(0, 0xFFFF) as u32;
                st.sizes.iomap_size =
                    super::wire::scale_to_value(super::wire::value_to_scale(n, 8), 8).min(255);
            }
            // A path record for the route: our CM resolves routes itself, so it is accepted
            // and unused (as librdmacm does when the route is already resolved).
            (SOL_RDMA, RDMA_ROUTE) => {}
            _ => return Err(Errno::EOPNOTSUPP),
        }
        Ok(())
    }

    /// Writes the option into `out` and returns its length.
    pub fn getsockopt(&self, level: i32, name: i32, out: &mut [u8]) -> Result<usize> {
        let mut st = lock(&self.st);
        let int = |v: i32, out: &mut [u8]| -> Result<usize> {
            let b = v.to_ne_bytes();
            let n = out.len().min(4);
            out[..n].copy_from_slice(&b[..n]);
            Ok(n)
        };
        let ep_sizes = st.ep.as_ref().map(|e| e.sz).unwrap_or(st.sizes);
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => int(st.opts.reuseaddr as i32, out),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => int(st.opts.keepalive as i32, out),
            (libc::SOL_SOCKET, libc::SO_OOBINLINE) => int(st.opts.oobinline as i32, out),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(ep_sizes.rbuf_size as i32, out),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(ep_sizes.sbuf_size as i32, out),
            (libc::SOL_SOCKET, libc::SO_TYPE) => int(libc::SOCK_STREAM, out),
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => int(self.domain, out),
            (libc::SOL_SOCKET, libc::SO_ERROR) => {
                let e = match st.phase {
                    Phase::ConnectError(e) => e,
                    _ => st.err.take().map_or(0, |e| e.0),
                };
                int(e, out)
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let (on, secs): (i32, i32) = st.opts.linger.map_or((0, 0), |s| (1, s));
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&on.to_ne_bytes());
                b[4..].copy_from_slice(&secs.to_ne_bytes());
                let n = out.len().min(8);
                out[..n].copy_from_slice(&b[..n]);
                Ok(n)
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int(st.opts.nodelay as i32, out),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => int(2048, out),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int(st.opts.keepalive_time as i32, out),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => int(1, out),
            (SOL_RDMA, RDMA_SQSIZE) => int(ep_sizes.sq_size as i32, out),
            (SOL_RDMA, RDMA_RQSIZE) => int(ep_sizes.rq_size as i32, out),
            (SOL_RDMA, RDMA_INLINE) => int(ep_sizes.sq_inline as i32, out),
            (SOL_RDMA, RDMA_IOMAPSIZE) => int(ep_sizes.iomap_size as i32, out),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    /// F_GETFL / F_SETFL (only O_NONBLOCK has a meaning).
    pub fn fcntl(&self, cmd: i32, arg: i64) -> Result<i32> {
        let mut st = lock(&self.st);
        match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if st.nonblock { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                st.nonblock = (arg as i32) & libc::O_NONBLOCK != 0;
                Ok(0)
            }
            // The number is our CM channel's descriptor: its descriptor flags are real.
            libc::F_GETFD | libc::F_SETFD => {
                // SAFETY: fcntl on our own descriptor with an int argument.
                crate::errno::check(unsafe { libc::fcntl(self.fd, cmd, arg as i32) })
            }
            _ => Err(Errno::EOPNOTSUPP),
        }
    }
}
