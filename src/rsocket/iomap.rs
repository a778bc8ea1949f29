//! riomap / riounmap / riowrite: direct placement into a peer's registered buffer.
//!
//! As librdmacm: `riomap(PROT_WRITE)` registers the buffer and announces it by writing an
//! `rs_iomap` entry (offset, addr, rkey, length) into the peer's iomap table, slot `index`,
//! with immediate `IOMAP_SGL | index` (one credit). `riowrite` finds the entry that covers an
//! offset in *our* table (written by the peer) and RDMA-WRITEs there without immediate: the
//! peer's application learns of the data through its own protocol (riostream sends a message).
//! Unlike librdmacm, which sends pending announcements on the next rsend/riowrite, riomap
//! announces at once when a credit is there, so a peer that only writes sees the mapping.

use super::capi;
use super::ep::{Ep, SNDLOWAT};
use super::stream::{Phase, State, Stream};
use super::wire::{self, IOMAP_LEN};
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use crate::sys::*;
use std::sync::MutexGuard;

/// One of our mappings.
pub struct IoMap {
    pub mr: *mut ibv_mr,
    pub addr: usize,
    pub len: usize,
    pub offset: u64,
    /// Slot in the peer's table (PROT_WRITE mappings), and whether it was announced.
    pub index: Option<u32>,
    pub sent: bool,
}

/// An entry of our table, as the peer wrote it.
#[derive(Clone, Copy)]
struct Entry {
    offset: u64,
    addr: u64,
    key: u32,
    length: u32,
}

/// Takes in entry `index` of our table, which the peer has just written (an IOMAP_SGL
/// message with its 24 bytes, whose completion was polled). An index past the table is the
/// peer's mistake and changes nothing.
pub fn take_write(ep: &mut Ep, index: u32) {
    let i = index as usize;
    if i >= ep.peer_iomap.len() {
        return;
    }
    let base = wire::SGE_LEN * wire::SGL_SIZE + i * IOMAP_LEN;
    let mut b = [0u8; IOMAP_LEN];
    // SAFETY: i < iomap_size, so the entry lies inside `tgt`; volatile: the peer's memory to
    // write (a misbehaving peer may write it at any time: we only get its bytes).
    unsafe {
        for (k, x) in b.iter_mut().enumerate() {
            *x = std::ptr::read_volatile(ep.tgt.ptr.add(base + k));
        }
    }
    ep.peer_iomap[i] = b;
}

fn entry_at(ep: &Ep, i: usize) -> Entry {
    let b = ep.peer_iomap[i];
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let e = Entry { offset: u64_at(0), addr: u64_at(8), key: u32_at(16), length: u32_at(20) };
    if ep.swap {
        Entry {
            offset: e.offset.swap_bytes(),
            addr: e.addr.swap_bytes(),
            key: e.key.swap_bytes(),
            length: e.length.swap_bytes(),
        }
    } else {
        e
    }
}

fn find(ep: &Ep, offset: u64) -> Option<Entry> {
    (0..ep.peer_iomap.len())
        .map(|i| entry_at(ep, i))
        .find(|e| e.length > 0 && offset >= e.offset && offset - e.offset < e.length as u64)
}

/// An announcement needs a credit (it consumes a receive at the peer), a send queue entry and
/// its 24 bytes of send buffer; not the peer's data buffer.
fn can_announce(st: &State) -> bool {
    let Some(ep) = st.ep.as_ref() else { return false };
    st.phase == Phase::Connected
        && st.writable
        && ep.sqe_avail > 0
        && ep.sbuf_bytes_avail >= IOMAP_LEN as u32
        && ep.sseq_no != ep.sseq_comp
}

fn announce_or_down(st: &State) -> bool {
    can_announce(st) || st.phase != Phase::Connected || !st.writable
}

/// A direct write consumes no credit (no immediate): a send queue entry and send buffer.
fn can_write(st: &State) -> bool {
    let Some(ep) = st.ep.as_ref() else { return false };
    st.phase == Phase::Connected
        && st.writable
        && ep.sqe_avail > 0
        && ep.sbuf_bytes_avail >= SNDLOWAT
}

fn write_or_down(st: &State) -> bool {
    can_write(st) || st.phase != Phase::Connected || !st.writable
}

impl Stream {
    pub fn riomap(&self, buf: *mut u8, len: usize, prot: i32, offset: i64) -> Result<i64> {
        if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 || buf.is_null() || len == 0 {
            return Err(Errno::EINVAL);
        }
        let _s = lock(&self.slock);
        let mut st = lock(&self.st);
        let ep = st.ep.as_mut().ok_or(Errno::EINVAL)?;
        let write = prot & libc::PROT_WRITE != 0;
        let index = if write {
            let used: Vec<u32> = ep.iomaps.iter().filter_map(|m| m.index).collect();
            Some((0..ep.remote_iomap.length).find(|i| !used.contains(i)).ok_or(Errno::ENOMEM)?)
        } else {
            None
        };
        let mut access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        if write {
            access |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 as i32;
        }
        // SAFETY: our id's PD; the buffer is the caller's, valid for `len` bytes per riomap(3).
        let mr = unsafe { capi::ibv_reg_mr((*ep.id).pd, buf.cast(), len, access) };
        if mr.is_null() {
            return Err(Errno::last());
        }
        let offset = if offset == -1 { buf as i64 } else { offset };
        ep.iomaps.push(IoMap {
            mr,
            addr: buf as usize,
            len,
            offset: offset as u64,
            index,
            sent: false,
        });
        if write {
            drop(self.flush_iomaps(st, true)?);
        }
        Ok(offset)
    }

    pub fn riounmap(&self, buf: *mut u8, len: usize) -> Result<()> {
        let _s = lock(&self.slock);
        let mut st = lock(&self.st);
        let ep = st.ep.as_mut().ok_or(Errno::EINVAL)?;
        let i = ep
            .iomaps
            .iter()
            .position(|m| m.addr == buf as usize && m.len == len)
            .ok_or(Errno::EINVAL)?;
        let m = ep.iomaps.remove(i);
        // SAFETY: our MR, deregistered once (removed from the list).
        unsafe { capi::ibv_dereg_mr(m.mr) };
        Ok(())
    }

    /// Announces the mappings not announced yet, waiting for a credit unless `nonblock`
    /// (then what cannot go now stays pending for the next rsend/riowrite).
    pub fn flush_iomaps<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        nonblock: bool,
    ) -> Result<MutexGuard<'a, State>> {
        loop {
            let Some(ep) = st.ep.as_ref() else { return Ok(st) };
            let Some(i) = ep.iomaps.iter().position(|m| m.index.is_some() && !m.sent) else {
                return Ok(st);
            };
            if !can_announce(&st) {
                if nonblock {
                    return Ok(st);
                }
                st = self.wait(st, false, announce_or_down)?;
                if st.phase != Phase::Connected || !st.writable {
                    return Err(st.err.unwrap_or(Errno::ECONNRESET));
                }
                continue;
            }
            let ep = st.ep.as_mut().expect("checked");
            let m = &ep.iomaps[i];
            let index = m.index.expect("checked");
            // SAFETY: reading the rkey of our live MR.
            let rkey = unsafe { (*m.mr).rkey };
            let mut b = [0u8; IOMAP_LEN];
            let (o, a, k, l) = (m.offset, m.addr as u64, rkey, m.len as u32);
            let (o, a, k, l) = if ep.swap {
                (o.swap_bytes(), a.swap_bytes(), k.swap_bytes(), l.swap_bytes())
            } else {
                (o, a, k, l)
            };
            b[..8].copy_from_slice(&o.to_ne_bytes());
            b[8..16].copy_from_slice(&a.to_ne_bytes());
            b[16..20].copy_from_slice(&k.to_ne_bytes());
            b[20..].copy_from_slice(&l.to_ne_bytes());
            let raddr = ep.remote_iomap.addr.wrapping_add(index as u64 * IOMAP_LEN as u64);
            // Through the send ring (its bytes stay valid until the completion).
            let mut ring = [ibv_sge { addr: 0, length: 0, lkey: 0 }; 2];
            let nsge = ep.stage(&b, &mut ring);
            let inline = ep.sz.sq_inline as usize >= IOMAP_LEN;
            ep.sseq_no = ep.sseq_no.wrapping_add(1);
            ep.sqe_avail -= 1;
            ep.sbuf_bytes_avail -= IOMAP_LEN as u32;
            ep.post_write_msg(
                &mut ring[..nsge],
                wire::msg(wire::OP_IOMAP_SGL, index),
                inline,
                raddr,
                ep.remote_iomap.key,
            )?;
            ep.iomaps[i].sent = true;
        }
    }

    pub fn riowrite(&self, buf: *const u8, count: usize, offset: i64, flags: i32) -> Result<usize> {
        let _s = lock(&self.slock);
        let mut st = lock(&self.st);
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        if st.phase != Phase::Connected {
            return Err(Errno::ENOTCONN);
        }
        st = self.flush_iomaps(st, nonblock)?;
        // Take the peer's latest announcements (IOMAP_SGL) before looking up the table.
        self.progress(&mut st);
        let mut off = offset as u64;
        let mut done = 0usize;
        while done < count {
            let Some(e) = st.ep.as_ref().and_then(|ep| find(ep, off)) else {
                break;
            };
            if !can_write(&st) {
                st = match self.wait(st, nonblock, write_or_down) {
                    Ok(s) => s,
                    Err(e) if done > 0 => {
                        let _ = e;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if !st.writable || st.phase != Phase::Connected {
                    if done > 0 {
                        break;
                    }
                    return Err(st.err.unwrap_or(Errno::ECONNRESET));
                }
            }
            let ep = st.ep.as_mut().expect("connected");
            let room = (e.offset + e.length as u64 - off).min(u32::MAX as u64) as u32;
            let xfer = ((count - done).min(65536) as u32).min(ep.sbuf_bytes_avail).min(room);
            // SAFETY: the caller's buffer holds `count` bytes per riowrite(3).
            let src = unsafe { std::slice::from_raw_parts(buf.add(done), xfer as usize) };
            let mut ring = [ibv_sge { addr: 0, length: 0, lkey: 0 }; 2];
            let nsge = ep.stage(src, &mut ring);
            ep.sqe_avail -= 1;
            ep.sbuf_bytes_avail -= xfer;
            let raddr = e.addr.wrapping_add(off - e.offset);
            let inline = xfer <= ep.sz.sq_inline;
            if let Err(err) = ep.post_write(
                &mut ring[..nsge],
                wire::msg(wire::OP_WRITE, xfer),
                inline,
                raddr,
                e.key,
            ) {
                if done > 0 {
                    break;
                }
                return Err(err);
            }
            done += xfer as usize;
            off += xfer as u64;
        }
        Ok(done)
    }
}

impl Ep {
    /// Copies `src` into the send ring at its current position and returns the SGEs (one, or
    /// two when it wraps). The caller has checked that `src.len()` bytes are free.
    pub fn stage(&mut self, src: &[u8], sg: &mut [ibv_sge; 2]) -> usize {
        let size = self.sz.sbuf_size;
        let n = src.len() as u32;
        let first = n.min(size - self.spos);
        // SAFETY: reading the lkey of our live MR.
        let lkey = unsafe { (*self.smr).lkey };
        sg[0] = ibv_sge { addr: self.sbuf.ptr as u64 + self.spos as u64, length: first, lkey };
        sg[1] = ibv_sge { addr: self.sbuf.ptr as u64, length: n - first, lkey };
        // SAFETY: both ranges are inside sbuf and free (sbuf_bytes_avail was checked).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.sbuf.ptr.add(self.spos as usize),
                first as usize,
            );
            std::ptr::copy_nonoverlapping(
                src.as_ptr().add(first as usize),
                self.sbuf.ptr,
                (n - first) as usize,
            );
        }
        self.spos = (self.spos + n) % size;
        if n > first {
            2
        } else {
            1
        }
    }
}
