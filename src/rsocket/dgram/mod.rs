//! SOCK_DGRAM rsockets over UD, with librdmacm's datagram scheme:
//! * the socket's number is an ordinary UDP socket bound to the rsocket's address;
//! * every UD message starts with a `ds_header` (version 4/6, its length, the sender's port and
//!   address, in network order), so the receiver knows the source address;
//! * a destination whose QP is not known yet gets the datagram over UDP, prefixed with a
//!   `ds_udp_header` (tag 0x55555555, version, op, length, the sender's QPN and address); the
//!   receiver answers with a header-only `CTRL` datagram carrying its own QPN, and both sides
//!   make an address handle for the other's QPN; later datagrams go over UD.
//!
//! librdmacm runs the UDP side in a service thread; here it runs inline whenever the socket is
//! used (send, receive, rpoll), which is when its answers matter. A datagram that came by UDP
//! is queued directly (librdmacm loops it back through its own QP); neither is visible on the
//! wire.

use super::capi;
use super::ep::Buf;
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use crate::sys::*;
use std::collections::{HashMap, VecDeque};
use std::ptr;
use std::sync::Mutex;

const SNDLOWAT: usize = 2048; // librdmacm's per-message buffer (header included)
const GRH: usize = 40;
const SLOT: usize = GRH + SNDLOWAT;
const UDP_TAG: u32 = 0x5555_5555;
const OP_DATA: u8 = 0;
const OP_CTRL: u8 = 7;
const QKEY: u32 = 0x0123_4567; // RDMA_UDP_QKEY
const QUEUE: usize = 64;
const MAX_DESTS: usize = 4096;

/// A socket address as a map key (family, port and address bytes).
type Key = Vec<u8>;

fn key_of(a: &libc::sockaddr_storage) -> Key {
    let p = ptr::addr_of!(*a).cast::<u8>();
    let n = super::addr_len(a);
    // SAFETY: `a` is a whole sockaddr_storage; n ≤ its size.
    let mut v = unsafe { std::slice::from_raw_parts(p, n) }.to_vec();
    if a.ss_family as i32 == libc::AF_INET6 {
        v[8..12].fill(0); // flowinfo is not part of the address
        v.truncate(24);
    }
    v
}

/// `ds_header` for `a` (8 bytes for IPv4, 24 for IPv6).
fn ds_header(a: &libc::sockaddr_storage) -> Vec<u8> {
    let b = key_raw(a);
    if a.ss_family as i32 == libc::AF_INET {
        let mut h = vec![4, 8, b[2], b[3]];
        h.extend_from_slice(&b[4..8]);
        h
    } else {
        let mut h = vec![6, 24, b[2], b[3]];
        h.extend_from_slice(&b[4..8]); // flowinfo
        h.extend_from_slice(&b[8..24]);
        h
    }
}

fn key_raw(a: &libc::sockaddr_storage) -> [u8; 28] {
    let mut b = [0u8; 28];
    // SAFETY: copying the first 28 bytes of a sockaddr_storage.
    unsafe { ptr::copy_nonoverlapping(ptr::addr_of!(*a).cast::<u8>(), b.as_mut_ptr(), 28) };
    b
}

/// The source address a `ds_header` names, if it is well formed.
fn addr_of_header(h: &[u8]) -> Option<(libc::sockaddr_storage, usize)> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let p = ptr::addr_of_mut!(st).cast::<u8>();
    match (h.first()?, h.get(1)?) {
        (4, 8) if h.len() >= 8 => {
            st.ss_family = libc::AF_INET as u16;
            // SAFETY: writing port and address inside the storage.
            unsafe {
                ptr::copy_nonoverlapping(h[2..4].as_ptr(), p.add(2), 2);
                ptr::copy_nonoverlapping(h[4..8].as_ptr(), p.add(4), 4);
            }
            Some((st, 8))
        }
        (6, 24) if h.len() >= 24 => {
            st.ss_family = libc::AF_INET6 as u16;
            // SAFETY: writing port, flowinfo and address inside the storage (a sockaddr_in6 fits).
            unsafe {
                ptr::copy_nonoverlapping(h[2..4].as_ptr(), p.add(2), 2);
                ptr::copy_nonoverlapping(h[4..24].as_ptr(), p.add(4), 20);
            }
            Some((st, 24))
        }
        _ => None,
    }
}

struct Dest {
    qpn: u32,
    ah: *mut ibv_ah,
}

/// The UD QP of the socket's local address.
struct Qp {
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
    comp: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    rbuf: Buf,
    rmr: *mut ibv_mr,
    sbuf: Buf,
    smr: *mut ibv_mr,
    free: Vec<usize>,
    hdr: Vec<u8>,
    local: libc::sockaddr_storage,
    armed: bool,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: our handles, destroyed once, MRs and QP before the CQ, the id last.
        unsafe {
            for mr in [self.rmr, self.smr] {
                if !mr.is_null() {
                    capi::ibv_dereg_mr(mr);
                }
            }
            if !self.qp.is_null() {
                capi::rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                capi::ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                capi::ibv_destroy_comp_channel(self.comp);
            }
            capi::rdma_destroy_id(self.id);
            capi::rdma_destroy_event_channel(self.ch);
        }
    }
}

enum Msg {
    /// A received UD message in slot `slot`: payload at `off`, `len` bytes.
    Slot { slot: usize, off: usize, len: usize, from: libc::sockaddr_storage },
    /// A datagram that came over UDP.
    Udp { data: Vec<u8>, from: libc::sockaddr_storage },
}

struct DState {
    nonblock: bool,
    qp: Option<Qp>,
    dests: HashMap<Key, Dest>,
    conn: Option<libc::sockaddr_storage>,
    rq: VecDeque<Msg>,
}

// SAFETY: the raw handles are this library's, used only under the socket's mutex.
unsafe impl Send for DState {}

pub struct Dgram {
    pub fd: i32,
    pub domain: i32,
    st: Mutex<DState>,
}

fn last() -> Errno {
    Errno::last()
}

/// A kernel UDP socket (by system call: librspreload interposes `socket`), as a raw descriptor
/// the caller owns; -1 with errno set on failure.
fn kernel_socket(domain: i32, ty: i32) -> i32 {
    use std::os::fd::IntoRawFd;
    crate::runtime::socket::kernel_socket(domain, ty, 0).map_or(-1, |fd| fd.into_raw_fd())
}

/// The GID index of the address `id` is bound to (its source GID), as the AV's sgid: the
/// network path sends from the sgid, so index 0 (loopback) would not reach another host.
/// 0 if the table does not list it.
///
/// # Safety
/// `id` is a live, bound CM id of ours.
unsafe fn sgid_index(id: *mut rdma_cm_id, port: u8) -> u8 {
    // SAFETY: the caller's id is live; a bound id's source GID was written at bind time.
    let (verbs, sgid) = unsafe { ((*id).verbs, (*id).route.addr.addr.ibaddr.sgid.raw) };
    for i in 0..=u8::MAX {
        // SAFETY: all-zero is a valid ibv_gid.
        let mut g: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: our context, a valid out pointer; past the table's end the call fails.
        if unsafe { capi::ibv_query_gid(verbs, port, i32::from(i), &mut g) } != 0 {
            break;
        }
        // SAFETY: raw is the byte view of the union.
        if unsafe { g.raw } == sgid {
            return i;
        }
    }
    0
}

impl Dgram {
    pub fn create(domain: i32) -> Result<Dgram> {
        let fd = kernel_socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC);
        if fd < 0 {
            return Err(last());
        }
        let st = DState {
            nonblock: false,
            qp: None,
            dests: HashMap::new(),
            conn: None,
            rq: VecDeque::new(),
        };
        Ok(Dgram { fd, domain, st: Mutex::new(st) })
    }

    pub fn bind(&self, a: &libc::sockaddr_storage) -> Result<()> {
        let _g = lock(&self.st);
        // SAFETY: our socket and a whole sockaddr of its length.
        let r = unsafe { libc::bind(self.fd, ptr::addr_of!(*a).cast(), super::addr_len(a) as u32) };
        crate::errno::check(r).map(drop)
    }

    pub fn name(&self, peer: bool) -> Result<libc::sockaddr_storage> {
        // SAFETY: all-zero is a valid sockaddr_storage; the kernel fills it.
        let mut a: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        let p = ptr::addr_of_mut!(a).cast();
        // SAFETY: our socket; `a` has room for `len` bytes.
        let r = unsafe {
            if peer {
                libc::getpeername(self.fd, p, &mut len)
            } else {
                libc::getsockname(self.fd, p, &mut len)
            }
        };
        crate::errno::check(r).map(|_| a)
    }

    pub fn connect(&self, a: &libc::sockaddr_storage) -> Result<()> {
        // SAFETY: our socket and a whole sockaddr.
        let r =
            unsafe { libc::connect(self.fd, ptr::addr_of!(*a).cast(), super::addr_len(a) as u32) };
        crate::errno::check(r)?;
        lock(&self.st).conn = Some(*a);
        Ok(())
    }

    pub fn set_nonblock(&self, on: bool) {
        lock(&self.st).nonblock = on;
    }

    pub fn nonblock(&self) -> bool {
        lock(&self.st).nonblock
    }

    /// The QP of our address, made on first use (the UDP socket is bound first if it is not).
    fn ensure_qp(&self, st: &mut DState, dst: &libc::sockaddr_storage) -> Result<()> {
        if st.qp.is_some() {
            return Ok(());
        }
        let mut local = self.name(false)?;
        let raw = key_raw(&local);
        if raw[2] == 0 && raw[3] == 0 {
            // Unbound: take an ephemeral port, as sendto(2) would.
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut any: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            any.ss_family = self.domain as u16;
            self.bind(&any)?;
            local = self.name(false)?;
        }
        // A wildcard or loopback address: the source address the route to `dst` takes.
        let r = key_raw(&local);
        let wildcard =
            if self.domain == libc::AF_INET { r[4..8] == [0; 4] } else { r[8..24] == [0; 16] };
        if wildcard {
            // SAFETY: a temporary socket, connected (no traffic) to learn the source address.
            unsafe {
                let s = kernel_socket(self.domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC);
                if s >= 0 {
                    let mut a: libc::sockaddr_storage = std::mem::zeroed();
                    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as u32;
                    if libc::connect(s, ptr::addr_of!(*dst).cast(), super::addr_len(dst) as u32)
                        == 0
                        && libc::getsockname(s, ptr::addr_of_mut!(a).cast(), &mut len) == 0
                    {
                        ptr::copy_nonoverlapping(
                            r[2..4].as_ptr(),
                            ptr::addr_of_mut!(a).cast::<u8>().add(2),
                            2,
                        );
                        local = a;
                    }
                    libc::close(s);
                }
            }
        }
        st.qp = Some(Self::make_qp(local)?);
        Ok(())
    }

    fn make_qp(local: libc::sockaddr_storage) -> Result<Qp> {
        // SAFETY: constructor calls with checked results; every handle lands in `q`, whose
        // Drop releases what was made if a later step fails.
        unsafe {
            let ch = capi::rdma_create_event_channel();
            if ch.is_null() {
                return Err(last());
            }
            let mut id = ptr::null_mut();
            if capi::rdma_create_id(ch, &mut id, ptr::null_mut(), rdma_port_space::RDMA_PS_UDP) != 0
            {
                let e = last();
                capi::rdma_destroy_event_channel(ch);
                return Err(e);
            }
            let mut q = Qp {
                id,
                ch,
                comp: ptr::null_mut(),
                cq: ptr::null_mut(),
                qp: ptr::null_mut(),
                rbuf: Buf::new(SLOT * QUEUE)?,
                rmr: ptr::null_mut(),
                sbuf: Buf::new(SNDLOWAT * QUEUE)?,
                smr: ptr::null_mut(),
                free: (0..QUEUE).rev().collect(),
                hdr: ds_header(&local),
                local,
                armed: false,
            };
            let mut l = local;
            if capi::rdma_bind_addr(id, ptr::addr_of_mut!(l).cast()) != 0 {
                return Err(last());
            }
            let verbs = (*id).verbs;
            q.comp = capi::ibv_create_comp_channel(verbs);
            if q.comp.is_null() {
                return Err(last());
            }
            libc::fcntl((*q.comp).fd, libc::F_SETFL, libc::O_NONBLOCK);
            q.cq = capi::ibv_create_cq(verbs, 2 * QUEUE as i32, ptr::null_mut(), q.comp, 0);
            if q.cq.is_null() {
                return Err(last());
            }
            let mut attr: ibv_qp_init_attr = std::mem::zeroed();
            attr.send_cq = q.cq;
            attr.recv_cq = q.cq;
            attr.qp_type = ibv_qp_type::IBV_QPT_UD;
            attr.sq_sig_all = 1;
            attr.cap.max_send_wr = QUEUE as u32;
            attr.cap.max_recv_wr = QUEUE as u32;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            if capi::rdma_create_qp(id, ptr::null_mut(), &mut attr) != 0 {
                return Err(last());
            }
            q.qp = (*id).qp;
            let pd = (*id).pd;
            let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
            q.rmr = capi::ibv_reg_mr(pd, q.rbuf.ptr.cast(), q.rbuf.len, access);
            q.smr = capi::ibv_reg_mr(pd, q.sbuf.ptr.cast(), q.sbuf.len, access);
            if q.rmr.is_null() || q.smr.is_null() {
                return Err(last());
            }
            for slot in 0..QUEUE {
                q.post_recv(slot)?;
            }
            Ok(q)
        }
    }

    /// An address handle for `qpn` at `addr` (made or replaced), as librdmacm's service does
    /// on a datagram from a new peer.
    fn learn(st: &mut DState, addr: &libc::sockaddr_storage, qpn: u32) {
        let Some(q) = st.qp.as_ref() else { return };
        let k = key_of(addr);
        if st.dests.get(&k).is_some_and(|d| d.qpn == qpn && !d.ah.is_null()) {
            return;
        }
        // Sources are the network's word: never more address handles than this.
        if !st.dests.contains_key(&k) && st.dests.len() >= MAX_DESTS {
            return;
        }
        // SAFETY: all-zero is a valid ibv_ah_attr; the GID is the peer's IP (IPv4-mapped).
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        let raw = key_raw(addr);
        let mut gid = [0u8; 16];
        if addr.ss_family as i32 == libc::AF_INET {
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&raw[4..8]);
        } else {
            gid.copy_from_slice(&raw[8..24]);
        }
        attr.is_global = 1;
        attr.grh.dgid.raw = gid;
        attr.grh.hop_limit = 64;
        // SAFETY: our id (its port and PD); the attribute is on the stack.
        let ah = unsafe {
            attr.port_num = (*q.id).port_num.max(1);
            attr.grh.sgid_index = sgid_index(q.id, attr.port_num);
            capi::ibv_create_ah((*q.id).pd, &mut attr)
        };
        if ah.is_null() {
            return;
        }
        if let Some(old) = st.dests.insert(k, Dest { qpn, ah }) {
            if !old.ah.is_null() {
                // SAFETY: the AH we made before, no send in flight refers to it by pointer
                // (a posted UD send resolved it at post time).
                unsafe { capi::ibv_destroy_ah(old.ah) };
            }
        }
    }

    /// librdmacm's UDP side: DATA datagrams are answered with our QPN and queued, CTRL ones
    /// teach us the peer's QPN.
    fn service_udp(&self, st: &mut DState) {
        let mut buf = [0u8; SNDLOWAT + 64];
        loop {
            // SAFETY: all-zero is a valid sockaddr_storage; recvfrom fills it.
            let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            // SAFETY: our socket, a buffer of its length.
            let n = unsafe {
                libc::recvfrom(
                    self.fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    ptr::addr_of_mut!(from).cast(),
                    &mut flen,
                )
            };
            if n < 16 {
                if n < 0 {
                    return;
                }
                continue;
            }
            let b = &buf[..n as usize];
            let (tag, ver, op, hlen) =
                (u32::from_be_bytes([b[0], b[1], b[2], b[3]]), b[4], b[5], b[6] as usize);
            let fam = from.ss_family as i32;
            let valid = tag == UDP_TAG
                && ((ver == 4 && fam == libc::AF_INET && hlen == 16)
                    || (ver == 6 && fam == libc::AF_INET6 && hlen == 28))
                && b.len() >= hlen;
            if !valid {
                continue;
            }
            let qpn = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) & 0xFF_FFFF;
            if self.ensure_qp(st, &from).is_err() {
                continue;
            }
            if op == OP_DATA {
                let _ = self.send_udp(st, &from, OP_CTRL, &[]);
            }
            Self::learn(st, &from, qpn);
            if op == OP_DATA && st.rq.len() < QUEUE * 2 {
                st.rq.push_back(Msg::Udp { data: b[hlen..].to_vec(), from });
            }
        }
    }

    fn send_udp(
        &self,
        st: &DState,
        to: &libc::sockaddr_storage,
        op: u8,
        data: &[u8],
    ) -> Result<usize> {
        let q = st.qp.as_ref().ok_or(Errno::EINVAL)?;
        // SAFETY: reading the QPN of our live QP.
        let qpn = unsafe { (*q.qp).qp_num } & 0xFF_FFFF;
        let v4 = q.local.ss_family as i32 == libc::AF_INET;
        let raw = key_raw(&q.local);
        let mut h = UDP_TAG.to_be_bytes().to_vec();
        h.extend_from_slice(&[if v4 { 4 } else { 6 }, op, if v4 { 16 } else { 28 }, 0]);
        h.extend_from_slice(&qpn.to_be_bytes());
        h.extend_from_slice(if v4 { &raw[4..8] } else { &raw[8..24] });
        let iov = [
            libc::iovec { iov_base: h.as_ptr() as *mut _, iov_len: h.len() },
            libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() },
        ];
        // SAFETY: all-zero is a valid msghdr; the fields point at live buffers.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_name = ptr::addr_of!(*to) as *mut _;
        m.msg_namelen = super::addr_len(to) as u32;
        m.msg_iov = iov.as_ptr() as *mut _;
        m.msg_iovlen = 2;
        // SAFETY: our socket and a valid msghdr.
        let r = unsafe { libc::sendmsg(self.fd, &m, libc::MSG_DONTWAIT) };
        crate::errno::check_size(r).map(|n| n.saturating_sub(h.len()))
    }

    /// Takes completions: received messages are queued, sent slots freed.
    fn poll_cq(st: &mut DState) {
        let Some(q) = st.qp.as_mut() else { return };
        // SAFETY: ibv_wc is plain data.
        let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: our CQ, room for 16.
            let n = unsafe { capi::ibv_poll_cq(q.cq, 16, wc.as_mut_ptr()) };
            if n <= 0 {
                return;
            }
            for w in &wc[..n as usize] {
                let slot = (w.wr_id & 0xFFFF) as usize;
                if w.wr_id & super::ep::RECV_FLAG == 0 {
                    q.free.push(slot);
                    continue;
                }
                let len = w.byte_len as usize;
                let ok = w.status == ibv_wc_status::IBV_WC_SUCCESS
                    && slot < QUEUE
                    && (GRH + 8..=SLOT).contains(&len);
                // SAFETY: the slot lies inside rbuf; its message is complete (the completion).
                let msg = ok.then(|| unsafe {
                    std::slice::from_raw_parts(q.rbuf.ptr.add(slot * SLOT + GRH), len - GRH)
                });
                match msg.and_then(addr_of_header) {
                    Some((from, hl)) if st.rq.len() < QUEUE * 2 => st.rq.push_back(Msg::Slot {
                        slot,
                        off: slot * SLOT + GRH + hl,
                        len: len - GRH - hl,
                        from,
                    }),
                    _ => {
                        if slot < QUEUE {
                            let _ = q.post_recv(slot);
                        }
                    }
                }
            }
        }
    }
}

impl Qp {
    fn post_recv(&self, slot: usize) -> Result<()> {
        // SAFETY: reading our MR's lkey.
        let lkey = unsafe { (*self.rmr).lkey };
        let mut sge = ibv_sge {
            addr: self.rbuf.ptr as u64 + (slot * SLOT) as u64,
            length: SLOT as u32,
            lkey,
        };
        // SAFETY: all-zero is a valid receive request.
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = super::ep::RECV_FLAG | slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = ptr::null_mut();
        // SAFETY: our QP; the request and its SGE are on the stack.
        match unsafe { capi::ibv_post_recv(self.qp, &mut wr, &mut bad) } {
            0 => Ok(()),
            e => Err(Errno(e)),
        }
    }
}

mod io;
