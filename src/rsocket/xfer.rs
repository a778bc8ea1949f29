//! The stream data path: completions, credits, sending, receiving, waiting and shutdown,
//! following librdmacm's protocol (RDMA WRITE with immediate into the peer's receive buffer,
//! credits returned as SGL messages).

use super::capi;
use super::ep::{Ep, RECV_FLAG, SNDLOWAT};
use super::stream::{Phase, State, Stream};
use super::wire::{self, Sge, SGE_LEN, SGL_SIZE};
use crate::errno::{Errno, Result};
use crate::runtime::{lock, wait_on};
use crate::sys::*;
use std::sync::MutexGuard;

/// librdmacm's `RS_OLAP_START_SIZE` and `RS_MAX_TRANSFER`: a send starts with a small write
/// (the peer sees data early) and doubles up to 64 KiB per write.
const OLAP_START: u32 = 2048;
const MAX_TRANSFER: u32 = 65536;
/// How long a waiter polls the CQ before it sleeps (librdmacm's polling_time, in µs).
pub static POLLING_TIME_US: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(10);

fn ctrl_avail(ep: &Ep) -> bool {
    ep.ctrl_seqno != ep.ctrl_max_seqno
}

pub fn can_send(st: &State) -> bool {
    let Some(ep) = st.ep.as_ref() else { return false };
    st.phase == Phase::Connected
        && st.writable
        && ep.sqe_avail > 0
        && ep.sbuf_bytes_avail >= SNDLOWAT
        && ep.sseq_no != ep.sseq_comp
        && ep.target(ep.target_sge).length != 0
}

pub fn have_rdata(st: &State) -> bool {
    st.ep.as_ref().is_some_and(|ep| !ep.rmsg.is_empty())
}

/// Readable in poll's sense: data, or nothing more will come.
pub fn conn_have_rdata(st: &State) -> bool {
    have_rdata(st) || !st.readable || st.err.is_some()
}

pub fn conn_can_send(st: &State) -> bool {
    can_send(st) || !st.writable || st.phase != Phase::Connected || st.err.is_some()
}

fn all_sends_done(st: &State) -> bool {
    let Some(ep) = st.ep.as_ref() else { return true };
    st.phase != Phase::Connected
        || (ep.ctrl_max_seqno as i64 - ep.ctrl_seqno as i64) + ep.sqe_avail == ep.sz.sq_size as i64
}

fn ctrl_or_down(st: &State) -> bool {
    st.phase != Phase::Connected || st.ep.as_ref().is_some_and(ctrl_avail)
}

impl Stream {
    /// Polls our CQ and applies every completion; then returns credits if due. True if
    /// anything happened.
    pub fn progress(&self, st: &mut State) -> bool {
        let mut any = false;
        let mut wc: [ibv_wc; 16] = {
            // SAFETY: ibv_wc is plain data; all-zero is valid.
            unsafe { std::mem::zeroed() }
        };
        loop {
            let Some(ep) = st.ep.as_mut() else { return any };
            // SAFETY: our live CQ; `wc` has room for 16 entries.
            let n = unsafe { capi::ibv_poll_cq(ep.cq, wc.len() as i32, wc.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            any = true;
            let mut reposts = 0;
            for w in &wc[..n as usize] {
                if w.wr_id & RECV_FLAG != 0 {
                    if w.status != ibv_wc_status::IBV_WC_SUCCESS {
                        // Our receives flush: the QP is in error (the peer is gone, or we
                        // shut down). Nothing more will arrive.
                        if st.phase == Phase::Connected {
                            st.phase = Phase::Disconnected;
                            st.readable = false;
                            st.writable = false;
                        }
                        continue;
                    }
                    reposts += 1;
                    // SAFETY: receive completions of RDMA WRITE with immediate carry imm_data.
                    let m = u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data });
                    Self::on_recv(st, m, w.byte_len);
                } else {
                    Self::on_send(st, w.wr_id as u32, w.status);
                }
            }
            if st.phase == Phase::Connected {
                if let Some(ep) = st.ep.as_ref() {
                    for _ in 0..reposts {
                        if ep.post_recv().is_err() {
                            st.err = Some(Errno::ECONNRESET);
                            break;
                        }
                    }
                }
            }
        }
        self.update_credits(st);
        any
    }

    fn on_recv(st: &mut State, m: u32, byte_len: u32) {
        let Some(ep) = st.ep.as_mut() else { return };
        let data = wire::msg_data(m);
        match wire::msg_op(m) {
            wire::OP_SGL => {
                ep.sseq_comp = data as u16;
                if byte_len as usize == SGE_LEN {
                    ep.take_target_write();
                }
            }
            wire::OP_IOMAP_SGL => {
                if byte_len as usize == wire::IOMAP_LEN {
                    super::iomap::take_write(ep, data);
                }
            }
            wire::OP_WRITE => {}
            wire::OP_CTRL => match data {
                wire::CTRL_DISCONNECT => {
                    st.phase = Phase::Disconnected;
                    st.readable = false;
                    st.writable = false;
                }
                wire::CTRL_SHUTDOWN => {
                    if st.writable {
                        st.readable = false;
                    } else {
                        st.phase = Phase::Disconnected;
                        st.readable = false;
                    }
                }
                wire::CTRL_KEEPALIVE => {}
                _ => {}
            },
            _ => {
                // Data: never more unread bytes than the buffer holds, whatever the peer says.
                if data > ep.sz.rbuf_size - ep.rbuf_pending
                    || ep.rmsg.len() > ep.sz.rq_size as usize
                {
                    st.err = Some(Errno::ECONNRESET);
                    st.phase = Phase::Disconnected;
                    st.readable = false;
                    st.writable = false;
                    return;
                }
                ep.rbuf_pending += data;
                ep.rmsg.push_back(data);
            }
        }
    }

    fn on_send(st: &mut State, d: u32, status: u32) {
        let Some(ep) = st.ep.as_mut() else { return };
        match wire::msg_op(d) {
            wire::OP_SGL => ep.ctrl_max_seqno += 1,
            wire::OP_CTRL => {
                ep.ctrl_max_seqno += 1;
                if wire::msg_data(d) == wire::CTRL_DISCONNECT {
                    st.phase = Phase::Disconnected;
                }
            }
            wire::OP_IOMAP_SGL => {
                ep.sqe_avail += 1;
                ep.sbuf_bytes_avail += wire::IOMAP_LEN as u32;
            }
            _ => {
                ep.sqe_avail += 1;
                ep.sbuf_bytes_avail += wire::msg_data(d);
            }
        }
        if status != ibv_wc_status::IBV_WC_SUCCESS && st.phase == Phase::Connected {
            st.err = Some(Errno::ECONNRESET);
            st.phase = Phase::Disconnected;
            st.readable = false;
            st.writable = false;
        }
    }

    fn update_credits(&self, st: &mut State) {
        if st.phase != Phase::Connected {
            return;
        }
        let Some(ep) = st.ep.as_mut() else { return };
        let half = ep.sz.rbuf_size >> 1;
        let due =
            ep.rbuf_bytes_avail >= half || (ep.rseq_no.wrapping_sub(ep.rseq_comp) as i16) >= 0;
        if !due || !ctrl_avail(ep) {
            return;
        }
        ep.ctrl_seqno += 1;
        ep.rseq_comp = ep.rseq_no.wrapping_add(ep.sz.rq_size >> 1);
        let m = wire::msg(wire::OP_SGL, ep.rseq_no.wrapping_add(ep.sz.rq_size) as u32);
        let r = if ep.rbuf_bytes_avail >= half {
            // SAFETY: reading the rkey of our live MR.
            let rkey = unsafe { (*ep.rmr).rkey };
            let sge = Sge {
                addr: ep.rbuf.ptr as u64 + ep.rbuf_free_offset as u64,
                key: rkey,
                length: half,
            };
            let bytes = sge.to_bytes(ep.swap);
            let (addr, lkey, inline) = if ep.sz.sq_inline as usize >= SGE_LEN {
                (bytes.as_ptr() as u64, 0, true)
            } else {
                // A slot of the control area after the send buffer (one per control message
                // in flight).
                let slot = (ep.ctrl_seqno % super::ep::CTRL_SIZE) as usize;
                // SAFETY: the control area is inside sbuf, SGE_LEN bytes per slot.
                let p = unsafe { ep.sbuf.ptr.add(ep.sz.sbuf_size as usize + slot * SGE_LEN) };
                // SAFETY: p is a SGE_LEN-byte slot of the control area inside sbuf (above);
                // the source is the 16 bytes of `bytes`.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, SGE_LEN) };
                // SAFETY: our live MR.
                (p as u64, unsafe { (*ep.smr).lkey }, false)
            };
            let mut sg = [ibv_sge { addr, length: SGE_LEN as u32, lkey }];
            let raddr = ep.remote_sgl.addr.wrapping_add(ep.remote_sge as u64 * SGE_LEN as u64);
            let r = ep.post_write_msg(&mut sg, m, inline, raddr, ep.remote_sgl.key);
            ep.rbuf_bytes_avail -= half;
            ep.rbuf_free_offset += half;
            if ep.rbuf_free_offset >= ep.sz.rbuf_size {
                ep.rbuf_free_offset = 0;
            }
            ep.remote_sge += 1;
            if ep.remote_sge >= ep.remote_sgl.length {
                ep.remote_sge = 0;
            }
            r
        } else {
            ep.post_write_msg(&mut [], m, false, 0, 0)
        };
        if r.is_err() {
            st.err = Some(Errno::ECONNRESET);
        }
    }

    /// Waits (with `st` released) until `cond` holds, or fails with `EAGAIN` if `nonblock`.
    /// One thread sleeps in poll() on the completion channel, the CM channel and the kick
    /// eventfd; the others wait on the condition variable and re-check after every wake-up.
    pub fn wait<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        nonblock: bool,
        cond: fn(&State) -> bool,
    ) -> Result<MutexGuard<'a, State>> {
        let spin = std::time::Duration::from_micros(
            POLLING_TIME_US.load(std::sync::atomic::Ordering::Relaxed) as u64,
        );
        let start = std::time::Instant::now();
        loop {
            if self.progress(&mut st) && st.poller {
                self.kick();
            }
            if cond(&st) {
                return Ok(st);
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            if start.elapsed() < spin {
                drop(st);
                std::hint::spin_loop();
                st = lock(&self.st);
                continue;
            }
            if st.poller {
                st = wait_on(&self.cv, st);
                continue;
            }
            let Some(cfd) = self.arm(&mut st) else {
                // No CQ (not connected): only CM events can change anything.
                drop(st);
                super::stream::poll_one(self.fd, libc::POLLIN, -1);
                st = lock(&self.st);
                let _ = self.cm_events(&mut st);
                continue;
            };
            self.progress(&mut st);
            if cond(&st) {
                return Ok(st);
            }
            st.poller = true;
            drop(st);
            let mut fds = [
                libc::pollfd { fd: cfd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.kick, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: three valid pollfds on the stack.
            unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
            st = lock(&self.st);
            st.poller = false;
            self.after_poll(&mut st, fds[1].revents != 0);
            self.cv.notify_all();
        }
    }

    /// Arms the CQ (once) and returns the completion channel's descriptor.
    pub fn arm(&self, st: &mut State) -> Option<i32> {
        let ep = st.ep.as_mut()?;
        if !ep.cq_armed {
            // SAFETY: our live CQ.
            unsafe { capi::ibv_req_notify_cq(ep.cq, 0) };
            ep.cq_armed = true;
        }
        Some(ep.comp_fd())
    }

    /// Takes the completion events and kicks that woke a poll, and the CM events if `cm`.
    pub fn after_poll(&self, st: &mut State, cm: bool) {
        let mut n = 0u64;
        // SAFETY: reading 8 bytes from our non-blocking eventfd into `n`.
        unsafe { libc::read(self.kick, std::ptr::addr_of_mut!(n).cast(), 8) };
        if let Some(ep) = st.ep.as_mut() {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: our live, non-blocking channel; each event is acknowledged at once.
            while unsafe { capi::ibv_get_cq_event(ep.comp, &mut cq, &mut ctx) } == 0 {
                // SAFETY: ep.cq is our live CQ, of the event just taken.
                unsafe { capi::ibv_ack_cq_events(ep.cq, 1) };
                ep.cq_armed = false;
            }
        }
        if cm {
            let _ = self.cm_events(st);
        }
        if self.progress(st) && st.poller {
            self.kick();
        }
    }

    pub fn kick(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes to our non-blocking eventfd.
        unsafe { libc::write(self.kick, std::ptr::addr_of!(one).cast(), 8) };
    }

    /// `rsend`/`rsendmsg`: sends the bytes of `iov` (a gather list), as much as fits when
    /// non-blocking.
    pub fn send(&self, iov: &[(*const u8, usize)], flags: i32) -> Result<usize> {
        let _s = lock(&self.slock);
        let mut st = lock(&self.st);
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        st = match self.advance_connect(st, nonblock) {
            Ok(st) => st,
            Err(e) if e.0 == libc::EINPROGRESS => return Err(Errno::EAGAIN),
            Err(e) => return Err(e),
        };
        st = self.flush_iomaps(st, nonblock)?;
        let len: usize = iov.iter().map(|v| v.1).sum();
        let (mut cur, mut off) = (0usize, 0usize);
        let mut left = len;
        let mut olen = OLAP_START;
        while left > 0 {
            if !can_send(&st) {
                st = match self.wait(st, nonblock, conn_can_send) {
                    Ok(s) => s,
                    Err(e) if left < len => {
                        let _ = e;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if !st.writable || st.phase != Phase::Connected || st.err.is_some() {
                    if left < len {
                        break;
                    }
                    let e = if st.phase == Phase::Connected && !st.writable {
                        libc::EPIPE
                    } else {
                        libc::ECONNRESET
                    };
                    return Err(st.err.unwrap_or(Errno(e)));
                }
            }
            let ep = st.ep.as_mut().expect("connected");
            let mut xfer = if (olen as usize) < left {
                let x = olen;
                if olen < MAX_TRANSFER {
                    olen <<= 1;
                }
                x
            } else {
                left as u32
            };
            let tsge = ep.target(ep.target_sge);
            xfer = xfer.min(ep.sbuf_bytes_avail).min(tsge.length);
            // Copy into the send ring (two pieces when it wraps).
            let size = ep.sz.sbuf_size;
            let first = xfer.min(size - ep.spos);
            // SAFETY: our live MR.
            let lkey = unsafe { (*ep.smr).lkey };
            let mut sg = [
                ibv_sge { addr: ep.sbuf.ptr as u64 + ep.spos as u64, length: first, lkey },
                ibv_sge { addr: ep.sbuf.ptr as u64, length: xfer - first, lkey },
            ];
            // SAFETY: the ranges are inside sbuf and free (sbuf_bytes_avail); the sources are
            // the caller's buffers, valid per the function's contract.
            unsafe {
                copy_iov(
                    iov,
                    &mut cur,
                    &mut off,
                    ep.sbuf.ptr.add(ep.spos as usize),
                    first as usize,
                );
                copy_iov(iov, &mut cur, &mut off, ep.sbuf.ptr, (xfer - first) as usize);
            }
            ep.spos = (ep.spos + xfer) % size;
            let nsge = if xfer > first { 2 } else { 1 };
            let inline = xfer <= ep.sz.sq_inline;
            ep.sseq_no = ep.sseq_no.wrapping_add(1);
            ep.sqe_avail -= 1;
            ep.sbuf_bytes_avail -= xfer;
            let mut t = tsge;
            t.addr += xfer as u64;
            t.length -= xfer;
            ep.set_target(ep.target_sge, t);
            let slot = ep.target_sge;
            if t.length == 0 {
                ep.target_sge = (ep.target_sge + 1) % SGL_SIZE;
            }
            let r = ep.post_write_msg(
                &mut sg[..nsge],
                wire::msg(wire::OP_DATA, xfer),
                inline,
                tsge.addr,
                tsge.key,
            );
            let _ = slot;
            if let Err(e) = r {
                if left < len {
                    break;
                }
                return Err(e);
            }
            left -= xfer as usize;
        }
        Ok(len - left)
    }

    /// `rrecv`/`rrecvmsg`: reads into the scatter list `iov`; 0 at end of stream.
    pub fn recv(&self, iov: &[(*mut u8, usize)], flags: i32) -> Result<usize> {
        let _r = lock(&self.rlock);
        let mut st = lock(&self.st);
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        st = match self.advance_connect(st, nonblock) {
            Ok(st) => st,
            Err(e) if e.0 == libc::EINPROGRESS => return Err(Errno::EAGAIN),
            Err(e) => return Err(e),
        };
        let len: usize = iov.iter().map(|v| v.1).sum();
        let mut done = 0usize;
        loop {
            if !have_rdata(&st) {
                st = match self.wait(st, nonblock, conn_have_rdata) {
                    Ok(s) => s,
                    Err(e) if done > 0 => {
                        let _ = e;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if !have_rdata(&st) {
                    if let Some(e) = st.err.take() {
                        if done == 0 {
                            return Err(e);
                        }
                    }
                    break; // end of stream
                }
            }
            let peek = flags & libc::MSG_PEEK != 0;
            let ep = st.ep.as_mut().expect("has data");
            let mut off = ep.rbuf_offset;
            let mut idx = 0usize;
            let (mut cur, mut coff) = (0usize, 0usize);
            while done < len && idx < ep.rmsg.len() {
                let avail = ep.rmsg[idx];
                let n = (len - done).min(avail as usize);
                // SAFETY: n ≤ the ring size (checked when the message arrived); the caller's
                // buffers are valid per the function's contract.
                unsafe { scatter(ep, off, iov, &mut cur, &mut coff, n) };
                off = (off + n as u32) % ep.sz.rbuf_size;
                done += n;
                if peek {
                    idx += 1;
                    continue;
                }
                ep.rbuf_bytes_avail += n as u32;
                ep.rbuf_pending -= n as u32;
                if n as u32 == avail {
                    ep.rmsg.pop_front();
                    ep.rseq_no = ep.rseq_no.wrapping_add(1);
                } else {
                    ep.rmsg[0] -= n as u32;
                }
            }
            if !peek {
                ep.rbuf_offset = off;
                self.update_credits(&mut st);
            }
            if peek || done == len || flags & libc::MSG_WAITALL == 0 || !st.readable {
                break;
            }
        }
        Ok(done)
    }

    /// `rshutdown`: tells the peer, waits for our sends to complete.
    pub fn shutdown(&self, how: i32) -> Result<()> {
        let mut st = lock(&self.st);
        if st.phase != Phase::Connected {
            if st.phase == Phase::Disconnected {
                if let Some(ep) = st.ep.as_ref() {
                    ep.to_error();
                }
                return Ok(());
            }
            return Err(Errno::ENOTCONN);
        }
        let ctrl = match how {
            libc::SHUT_RDWR => {
                st.readable = false;
                st.writable = false;
                wire::CTRL_DISCONNECT
            }
            libc::SHUT_WR => {
                st.writable = false;
                if st.readable {
                    wire::CTRL_SHUTDOWN
                } else {
                    wire::CTRL_DISCONNECT
                }
            }
            libc::SHUT_RD => {
                st.readable = false;
                if st.writable {
                    self.kick();
                    return Ok(());
                }
                wire::CTRL_DISCONNECT
            }
            _ => return Err(Errno::EINVAL),
        };
        if !st.ep.as_ref().is_some_and(ctrl_avail) {
            st = self.wait(st, false, ctrl_or_down)?;
        }
        if st.phase == Phase::Connected {
            if let Some(ep) = st.ep.as_mut() {
                if ctrl_avail(ep) {
                    ep.ctrl_seqno += 1;
                    ep.post_write_msg(&mut [], wire::msg(wire::OP_CTRL, ctrl), false, 0, 0)?;
                }
            }
        }
        if st.phase == Phase::Connected {
            st = self.wait(st, false, all_sends_done)?;
        }
        if st.phase == Phase::Disconnected {
            if let Some(ep) = st.ep.as_ref() {
                ep.to_error();
            }
        }
        self.kick();
        Ok(())
    }
}

/// Copies `n` bytes from the gather list (position `cur`/`off`) to `dst`.
///
/// # Safety
/// The list's buffers are readable for their lengths; `dst` is valid for `n` writes.
unsafe fn copy_iov(
    iov: &[(*const u8, usize)],
    cur: &mut usize,
    off: &mut usize,
    mut dst: *mut u8,
    mut n: usize,
) {
    while n > 0 && *cur < iov.len() {
        let (p, l) = iov[*cur];
        let k = (l - *off).min(n);
        // SAFETY: per the function's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(p.add(*off), dst, k);
            dst = dst.add(k);
        }
        n -= k;
        *off += k;
        if *off == l {
            *cur += 1;
            *off = 0;
        }
    }
}

/// Copies `n` bytes of the receive ring at `roff` into the scatter list.
///
/// # Safety
/// The list's buffers are writable for their lengths; `n` ≤ the ring size.
unsafe fn scatter(
    ep: &Ep,
    mut roff: u32,
    iov: &[(*mut u8, usize)],
    cur: &mut usize,
    off: &mut usize,
    mut n: usize,
) {
    while n > 0 && *cur < iov.len() {
        let (p, l) = iov[*cur];
        let k = (l - *off).min(n);
        // SAFETY: per the function's contract.
        unsafe { ep.ring_copy(roff, p.add(*off), k) };
        roff = (roff + k as u32) % ep.sz.rbuf_size;
        n -= k;
        *off += k;
        if *off == l {
            *cur += 1;
            *off = 0;
        }
    }
}
