//! A SOCK_STREAM rsocket: its state, connection establishment (active and passive, blocking
//! or not) and teardown. The socket's number is its CM event channel's descriptor, so it never
//! collides with an ordinary descriptor and `poll` can wait on it while connecting.

use super::capi;
use super::ep::{Ep, Sizes};
use super::wire::{self, ConnData, ConnSge, Sge};
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use crate::sys::*;
use std::ptr;
use std::sync::{Condvar, Mutex, MutexGuard};
use zerocopy::IntoBytes;

/// Where a socket is in its life (librdmacm's `rs_state` without the bit tricks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Init,
    Bound,
    Listening,
    ResolvingAddr,
    ResolvingRoute,
    Connecting,
    Connected,
    /// The connection ended (both directions closed, by either side).
    Disconnected,
    /// Connecting failed with this errno (reported once by SO_ERROR or the next call).
    ConnectError(i32),
}

/// Options kept per socket (rsetsockopt before and after the connection).
#[derive(Clone, Copy, Debug, Default)]
pub struct SockOpts {
    pub reuseaddr: bool,
    pub keepalive: bool,
    pub nodelay: bool,
    pub linger: Option<i32>,
    pub oobinline: bool,
    pub keepalive_time: u32,
}

pub struct State {
    pub phase: Phase,
    pub readable: bool,
    pub writable: bool,
    /// Set when the connection failed after it was up (flush, error completion).
    pub err: Option<Errno>,
    pub nonblock: bool,
    pub sizes: Sizes,
    pub opts: SockOpts,
    pub ep: Option<Ep>,
    /// A thread is asleep in poll() on this socket's descriptors (see xfer::wait).
    pub poller: bool,
    pub dst: Option<libc::sockaddr_storage>,
}

pub struct Stream {
    /// The socket's number: our CM event channel's descriptor.
    pub fd: i32,
    pub ch: *mut rdma_event_channel,
    pub id: *mut rdma_cm_id,
    pub domain: i32,
    /// Serialise senders and receivers (rsocket(7) allows one of each at a time to proceed).
    pub slock: Mutex<()>,
    pub rlock: Mutex<()>,
    pub st: Mutex<State>,
    pub cv: Condvar,
    /// An eventfd that wakes a thread asleep in poll() when another thread made progress.
    pub kick: i32,
}

// SAFETY: `ch` and `id` are handles of this library, valid until Drop; the entry points they
// go to check and lock them. All mutable state is behind the mutexes.
unsafe impl Send for Stream {}
// SAFETY: shared across threads, `ch` and `id` are only passed to entry points that check and
// lock them, and all mutable state is behind the mutexes.
unsafe impl Sync for Stream {}

fn last_err() -> Errno {
    Errno::last()
}

/// What an rsocket needs of a CM event, copied out before the event is acknowledged.
struct Taken {
    kind: u32,
    status: i32,
    id: *mut rdma_cm_id,
    pdata: Vec<u8>,
}

/// Copies what an rsocket uses of `ev` (its kind, status, id and private data) and acks it.
///
/// # Safety
/// `ev` is a live event handed out by one of our channels and not acknowledged yet.
unsafe fn take_event(ev: *mut rdma_cm_event) -> Taken {
    // SAFETY: per the contract, ev is live; private_data holds private_data_len bytes.
    let t = unsafe {
        let c = (*ev).param.conn;
        let mut pdata = Vec::new();
        if !c.private_data.is_null() {
            pdata.extend_from_slice(std::slice::from_raw_parts(
                c.private_data.cast::<u8>(),
                c.private_data_len as usize,
            ));
        }
        Taken { kind: (*ev).event, status: (*ev).status, id: (*ev).id, pdata }
    };
    // SAFETY: acknowledging the event we were handed, once.
    unsafe { capi::rdma_ack_cm_event(ev) };
    t
}

/// `poll(2)` on one descriptor for `events`; returns its revents (0 on timeout).
pub fn poll_one(fd: i32, events: i16, timeout: i32) -> i16 {
    let mut p = libc::pollfd { fd, events, revents: 0 };
    // SAFETY: one valid pollfd on the stack.
    let r = unsafe { libc::poll(&mut p, 1, timeout) };
    if r > 0 {
        p.revents
    } else {
        0
    }
}

impl Stream {
    /// A new unconnected socket, or (with `id` Some) the socket of an accepted connection
    /// whose id has been moved to `ch`.
    pub fn new(
        domain: i32,
        sizes: Sizes,
        ch: *mut rdma_event_channel,
        id: *mut rdma_cm_id,
    ) -> Result<Stream> {
        // SAFETY: creates a descriptor we own; closed in Drop.
        let kick = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if kick < 0 {
            return Err(last_err());
        }
        // SAFETY: `ch` is a live channel of ours.
        let fd = unsafe { (*ch).fd };
        // SAFETY: our own descriptor; CM events are taken without blocking, waits use poll().
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
        Ok(Stream {
            fd,
            ch,
            id,
            domain,
            slock: Mutex::new(()),
            rlock: Mutex::new(()),
            st: Mutex::new(State {
                phase: Phase::Init,
                readable: false,
                writable: false,
                err: None,
                nonblock: false,
                sizes,
                opts: SockOpts::default(),
                ep: None,
                poller: false,
                dst: None,
            }),
            cv: Condvar::new(),
            kick,
        })
    }

    /// Creates a fresh socket with its own channel and id.
    pub fn create(domain: i32, sizes: Sizes) -> Result<Stream> {
        // SAFETY: plain constructor calls; results checked.
        unsafe {
            let ch = capi::rdma_create_event_channel();
            if ch.is_null() {
                return Err(last_err());
            }
            let mut id = ptr::null_mut();
            if capi::rdma_create_id(ch, &mut id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) != 0
            {
                let e = last_err();
                capi::rdma_destroy_event_channel(ch);
                return Err(e);
            }
            match Stream::new(domain, sizes, ch, id) {
                Ok(s) => Ok(s),
                Err(e) => {
                    capi::rdma_destroy_id(id);
                    capi::rdma_destroy_event_channel(ch);
                    Err(e)
                }
            }
        }
    }

    pub fn bind(&self, addr: *const libc::sockaddr) -> Result<()> {
        let mut st = lock(&self.st);
        if st.phase != Phase::Init {
            return Err(Errno::EINVAL);
        }
        // SAFETY: `addr` was checked by the caller to hold a sockaddr of its family.
        if unsafe { capi::rdma_bind_addr(self.id, addr as *mut _) } != 0 {
            return Err(last_err());
        }
        st.phase = Phase::Bound;
        Ok(())
    }

    pub fn listen(&self, backlog: i32) -> Result<()> {
        let mut st = lock(&self.st);
        match st.phase {
            Phase::Listening => return Ok(()),
            Phase::Init | Phase::Bound => {}
            _ => return Err(Errno::EINVAL),
        }
        // SAFETY: our live id.
        if unsafe { capi::rdma_listen(self.id, backlog.max(1)) } != 0 {
            return Err(last_err());
        }
        st.phase = Phase::Listening;
        Ok(())
    }

    /// Our half of the connection data.
    fn conn_data(ep: &Ep) -> ConnData {
        // SAFETY: reading the rkeys of our live MRs.
        let (tkey, rkey) = unsafe { ((*ep.tmr).rkey, (*ep.rmr).rkey) };
        let big_endian = cfg!(target_endian = "big");
        ConnData {
            version: wire::CONN_VERSION,
            flags: wire::CONN_FLAG_IOMAP | if big_endian { wire::CONN_FLAG_NET } else { 0 },
            credits: ep.sz.rq_size.into(),
            reserved: [0; 3],
            target_iomap_size: wire::value_to_scale(ep.sz.iomap_size, 8) as u8,
            target_sgl: ConnSge {
                addr: (ep.tgt.ptr as u64).into(),
                key: tkey.into(),
                length: (wire::SGL_SIZE as u32).into(),
            },
            data_buf: ConnSge {
                addr: (ep.rbuf.ptr as u64).into(),
                key: rkey.into(),
                length: (ep.sz.rbuf_size >> 1).into(),
            },
        }
    }

    /// Takes in the peer's half (every field is the peer's word: only used as remote
    /// addresses and counts, which the peer's own NIC checks).
    fn save_conn_data(ep: &mut Ep, c: &ConnData) {
        let host_net = cfg!(target_endian = "big");
        ep.swap = host_net != (c.flags & wire::CONN_FLAG_NET != 0);
        ep.remote_sgl = Sge {
            addr: c.target_sgl.addr.get(),
            key: c.target_sgl.key.get(),
            length: c.target_sgl.length.get().clamp(1, 64),
        };
        ep.remote_sge = 1 % ep.remote_sgl.length;
        if c.flags & wire::CONN_FLAG_IOMAP != 0 {
            ep.remote_iomap = Sge {
                addr: ep
                    .remote_sgl
                    .addr
                    .wrapping_add(wire::SGE_LEN as u64 * ep.remote_sgl.length as u64),
                key: ep.remote_sgl.key,
                length: wire::scale_to_value(c.target_iomap_size as u32, 8),
            };
        }
        // Slot 0 comes with the connection data (the peer writes slots 1, 0, 1, … later).
        let first = Sge {
            addr: c.data_buf.addr.get(),
            key: c.data_buf.key.get(),
            length: c.data_buf.length.get(),
        };
        ep.set_target(0, first);
        ep.sseq_comp = c.credits.get();
    }

    fn set_connected(st: &mut State) {
        st.phase = Phase::Connected;
        st.readable = true;
        st.writable = true;
    }

    /// Moves a connecting socket forward with the CM events that are there; waits for more
    /// unless `nonblock`. Ok once connected; `EINPROGRESS` while it is not and may not wait.
    pub fn advance_connect<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        nonblock: bool,
    ) -> Result<MutexGuard<'a, State>> {
        loop {
            match st.phase {
                Phase::Connected | Phase::Disconnected => return Ok(st),
                Phase::ConnectError(e) => return Err(Errno(e)),
                Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => {}
                _ => return Err(Errno::ENOTCONN),
            }
            if self.cm_events(&mut st)? {
                continue;
            }
            if nonblock {
                return Err(Errno(libc::EINPROGRESS));
            }
            drop(st);
            poll_one(self.fd, libc::POLLIN, -1);
            st = lock(&self.st);
        }
    }

    /// Starts an active connection to `dst`.
    pub fn connect(&self, dst: libc::sockaddr_storage) -> Result<()> {
        let mut st = lock(&self.st);
        match st.phase {
            Phase::Init | Phase::Bound => {}
            Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => {
                return Err(Errno(libc::EALREADY))
            }
            Phase::Connected | Phase::Disconnected => return Err(Errno::EISCONN),
            Phase::ConnectError(_) => return Err(Errno::ECONNREFUSED),
            Phase::Listening => return Err(Errno::EINVAL),
        }
        st.dst = Some(dst);
        let mut d = dst;
        // SAFETY: our id; `d` is a sockaddr_storage holding the destination.
        if unsafe {
            capi::rdma_resolve_addr(self.id, ptr::null_mut(), ptr::addr_of_mut!(d).cast(), 2000)
        } != 0
        {
            return Err(last_err());
        }
        st.phase = Phase::ResolvingAddr;
        let nb = st.nonblock;
        self.advance_connect(st, nb).map(drop)
    }

    /// Handles every CM event queued on our channel; true if any was.
    pub fn cm_events(&self, st: &mut State) -> Result<bool> {
        let mut any = false;
        loop {
            let mut ev = ptr::null_mut();
            // SAFETY: our live channel (non-blocking descriptor).
            if unsafe { capi::rdma_get_cm_event(self.ch, &mut ev) } != 0 {
                let e = last_err();
                return if e == Errno::EAGAIN || e.0 == libc::EINTR { Ok(any) } else { Err(e) };
            }
            any = true;
            // SAFETY: a live event handed out by the channel.
            let Taken { kind, status, pdata, .. } = unsafe { take_event(ev) };
            self.on_cm_event(st, kind, status, &pdata);
        }
    }

    fn on_cm_event(&self, st: &mut State, kind: u32, status: i32, pdata: &[u8]) {
        use rdma_cm_event_type::*;
        let fail = |st: &mut State, e: i32| st.phase = Phase::ConnectError(e);
        match (st.phase, kind) {
            (Phase::ResolvingAddr, RDMA_CM_EVENT_ADDR_RESOLVED) => {
                // SAFETY: our live id.
                if unsafe { capi::rdma_resolve_route(self.id, 2000) } != 0 {
                    fail(st, last_err().0);
                } else {
                    st.phase = Phase::ResolvingRoute;
                }
            }
            (Phase::ResolvingRoute, RDMA_CM_EVENT_ROUTE_RESOLVED) => {
                if let Err(e) = self.start_connect(st) {
                    fail(st, e.0);
                }
            }
            (Phase::Connecting, RDMA_CM_EVENT_ESTABLISHED) => {
                match (ConnData::parse(pdata), st.ep.as_mut()) {
                    (Some(c), Some(ep)) => {
                        Self::save_conn_data(ep, &c);
                        Self::set_connected(st);
                    }
                    _ => fail(st, libc::ECONNREFUSED),
                }
            }
            (Phase::ResolvingAddr | Phase::ResolvingRoute, _) => fail(st, libc::EHOSTUNREACH),
            (Phase::Connecting, RDMA_CM_EVENT_CONNECT_ERROR) if status == -libc::ETIMEDOUT => {
                fail(st, libc::ETIMEDOUT)
            }
            (Phase::Connecting, _) => fail(st, libc::ECONNREFUSED),
            (Phase::Connected, RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL) => {
                // Take what arrived before the peer left, then read end of stream.
                self.progress(st);
                if st.phase == Phase::Connected {
                    st.phase = Phase::Disconnected;
                    st.readable = false;
                    st.writable = false;
                }
            }
            _ => {}
        }
    }

    fn start_connect(&self, st: &mut State) -> Result<()> {
        let ep = Ep::create(self.id, st.sizes)?;
        let cd = Self::conn_data(&ep);
        st.ep = Some(ep);
        // SAFETY: all-zero is a valid rdma_conn_param.
        let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
        p.private_data = cd.as_bytes().as_ptr().cast();
        p.private_data_len = cd.as_bytes().len() as u8;
        p.flow_control = 1;
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        p.responder_resources = 1;
        p.initiator_depth = 1;
        // SAFETY: our id with its QP; `p` and the private data outlive the call.
        if unsafe { capi::rdma_connect(self.id, &mut p) } != 0 {
            return Err(last_err());
        }
        st.phase = Phase::Connecting;
        Ok(())
    }

    /// Accepts one connection request: Ok(None) if there is none and `nonblock`.
    pub fn accept(&self, nonblock: bool) -> Result<Stream> {
        loop {
            let (sizes, ev) = {
                let st = lock(&self.st);
                if st.phase != Phase::Listening {
                    return Err(Errno::EINVAL);
                }
                let mut ev = ptr::null_mut();
                // SAFETY: our live channel (non-blocking descriptor).
                let r = unsafe { capi::rdma_get_cm_event(self.ch, &mut ev) };
                (st.sizes, if r == 0 { Ok(ev) } else { Err(last_err()) })
            };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) if e == Errno::EAGAIN || e.0 == libc::EINTR => {
                    if nonblock || lock(&self.st).nonblock {
                        return Err(Errno::EAGAIN);
                    }
                    poll_one(self.fd, libc::POLLIN, -1);
                    continue;
                }
                Err(e) => return Err(e),
            };
            // SAFETY: a live event handed out by the channel.
            let Taken { kind, id: child, pdata, .. } = unsafe { take_event(ev) };
            if kind != rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                continue;
            }
            match Self::accept_child(self.domain, sizes, child, &pdata) {
                Ok(s) => return Ok(s),
                Err(_) if !nonblock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn accept_child(
        domain: i32,
        sizes: Sizes,
        child: *mut rdma_cm_id,
        pdata: &[u8],
    ) -> Result<Stream> {
        let Some(peer) = ConnData::parse(pdata) else {
            // SAFETY: the request's id is ours to reject and destroy.
            unsafe {
                capi::rdma_reject(child, ptr::null(), 0);
                capi::rdma_destroy_id(child);
            }
            return Err(Errno(libc::ECONNABORTED));
        };
        // SAFETY: constructor and migration of the request's id to its own channel.
        let ch = unsafe { capi::rdma_create_event_channel() };
        if ch.is_null() {
            let e = last_err();
            // SAFETY: child is the request's live id, ours to destroy (not handed out).
            unsafe { capi::rdma_destroy_id(child) };
            return Err(e);
        }
        // SAFETY: the child is live and its request event acknowledged.
        if unsafe { capi::rdma_migrate_id(child, ch) } != 0 {
            let e = last_err();
            // SAFETY: child and ch are live and ours (not handed out); each destroyed once.
            unsafe {
                capi::rdma_destroy_id(child);
                capi::rdma_destroy_event_channel(ch);
            }
            return Err(e);
        }
        // From here the Stream owns id and channel (its Drop destroys them).
        let s = Stream::new(domain, sizes, ch, child)?;
        {
            let mut st = lock(&s.st);
            let mut ep = Ep::create(child, sizes)?;
            Self::save_conn_data(&mut ep, &peer);
            let cd = Self::conn_data(&ep);
            st.ep = Some(ep);
            // SAFETY: all-zero is a valid rdma_conn_param.
            let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
            p.private_data = cd.as_bytes().as_ptr().cast();
            p.private_data_len = cd.as_bytes().len() as u8;
            p.flow_control = 1;
            p.rnr_retry_count = 7;
            p.responder_resources = 1;
            p.initiator_depth = 1;
            // SAFETY: the child id with its QP; `p` outlives the call.
            if unsafe { capi::rdma_accept(child, &mut p) } != 0 {
                return Err(last_err());
            }
            Self::set_connected(&mut st);
        }
        Ok(s)
    }

    /// The id's source or destination address.
    pub fn name(&self, peer: bool) -> libc::sockaddr_storage {
        // SAFETY: our live id; the address unions are plain data read by value.
        unsafe {
            if peer {
                ptr::addr_of!((*self.id).route.addr.dst_addr_union)
                    .cast::<libc::sockaddr_storage>()
                    .read()
            } else {
                ptr::addr_of!((*self.id).route.addr.src_addr_union)
                    .cast::<libc::sockaddr_storage>()
                    .read()
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let ep = lock(&self.st).ep.take();
        drop(ep);
        // SAFETY: the id, channel and eventfd are ours and destroyed once, the id first.
        unsafe {
            capi::rdma_destroy_id(self.id);
            capi::rdma_destroy_event_channel(self.ch);
            libc::close(self.kick);
        }
    }
}
