//! An RC QP's network path: the memory the transport engine reads and writes, each access
//! checked piece by piece against the PD's MR table (remote ones also against the QP's access
//! flags) before it is touched. Local lists are the SGLs (or inline data) that `rc.rs` keeps
//! in its `Book` under a handle.

use super::rc::{Book, List};
use crate::provider::gate::{self, Inside};
use crate::provider::soft::transport as t;
use crate::provider::{
    KeySpace, MemoryKeys, Payload, Region, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) struct Mem<'a> {
    pub(super) keys: &'a dyn MemoryKeys,
    pub(super) book: &'a RefCell<Book>,
    /// The QP's `qp_access_flags`: remote accesses it does not allow are refused first.
    pub(super) access: u32,
}

impl Mem<'_> {
    /// Runs `f(address, offset within the n bytes, piece length)` over bytes `[off, off+n)` of
    /// list `sgl`, each piece checked against the MR table with rights `need` and handed to `f`
    /// while its region stays registered (`sgl_copy::walk_registered`).
    fn walk(
        &self,
        sgl: t::Sgl,
        off: u64,
        n: usize,
        need: u32,
        mut f: impl FnMut(u64, usize, usize),
    ) -> Result<(), t::MemError> {
        let book = self.book.borrow();
        let sges = match book.lists.get(&sgl.0) {
            Some(List::Send(Payload::Sges(s))) | Some(List::Recv(s)) => s,
            Some(List::Send(Payload::Inline(d))) if need == 0 => {
                let v = d.as_slice();
                let end = off.checked_add(n as u64).ok_or(t::MemError::Access)?;
                if end > v.len() as u64 {
                    return Err(t::MemError::Access);
                }
                f(v.as_ptr() as u64 + off, 0, n);
                return Ok(());
            }
            _ => return Err(t::MemError::Access),
        };
        if off.checked_add(n as u64).is_none_or(|e| e > sges.total()) {
            return Err(t::MemError::Access);
        }
        super::super::sgl_copy::walk_registered(self.keys, sges, off, n, need, f)
            .map_err(|_| t::MemError::Access)
    }

    /// Checks `[va, va+len)` of `rkey` (in the region's iova space) and translates it: the
    /// region's gate (`None` for an empty range) and the local address to touch.
    fn remote(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(Option<Region>, u64), t::MemError> {
        if self.access & need != need {
            return Err(t::MemError::Access);
        }
        if len == 0 {
            return Ok((None, va));
        }
        let len = usize::try_from(len).map_err(|_| t::MemError::Access)?;
        let c = self
            .keys
            .lookup(rkey, va, len, need, KeySpace::Remote)
            .map_err(|_| t::MemError::Access)?;
        Ok((Some(c.region), c.addr))
    }
}

/// Enters a checked region's gate for one copy: refused if the region was deregistered since.
fn enter(region: &Option<Region>) -> Result<Option<Inside<'_>>, t::MemError> {
    gate::enter_if(region.as_deref()).map_err(|_| t::MemError::Access)
}

fn need_of(a: t::Access) -> u32 {
    match a {
        t::Access::RemoteRead => ACCESS_REMOTE_READ,
        t::Access::RemoteWrite => ACCESS_REMOTE_WRITE,
        t::Access::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
    }
}

impl t::Memory for Mem<'_> {
    fn read_local(&mut self, sgl: t::Sgl, off: u64, dst: &mut [u8]) -> Result<(), t::MemError> {
        let d = dst.as_mut_ptr();
        self.walk(sgl, off, dst.len(), 0, |addr, at, len| {
            // SAFETY: the piece lies in a registered region checked by `walk` (or in the inline
            // data it bounds); dst has room for `at + len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, d.add(at), len) }
        })
    }

    fn write_local(&mut self, sgl: t::Sgl, off: u64, src: &[u8]) -> Result<(), t::MemError> {
        self.walk(sgl, off, src.len(), ACCESS_LOCAL_WRITE, |addr, at, len| {
            // SAFETY: the piece lies in a region checked for local write by `walk`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(at), addr as *mut u8, len) }
        })
    }

    fn check_remote(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: t::Access,
    ) -> Result<(), t::MemError> {
        self.remote(rkey, va, len, need_of(access)).map(|_| ())
    }

    fn read_remote(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), t::MemError> {
        let (r, va) = self.remote(rkey, va, dst.len() as u64, ACCESS_REMOTE_READ)?;
        let _inside = enter(&r)?;
        if !dst.is_empty() {
            // SAFETY: [va, va + len) (translated) lies in a region with remote read (checked
            // above), registered until we leave its gate.
            unsafe { std::ptr::copy_nonoverlapping(va as *const u8, dst.as_mut_ptr(), dst.len()) }
        }
        Ok(())
    }

    fn write_remote(&mut self, rkey: u32, va: u64, src: &[u8]) -> Result<(), t::MemError> {
        let (r, va) = self.remote(rkey, va, src.len() as u64, ACCESS_REMOTE_WRITE)?;
        let _inside = enter(&r)?;
        if let Some((last, head)) = src.split_last() {
            // SAFETY: [va, va + len) (translated) lies in a region with remote write (checked
            // above), registered until we leave its gate.
            // The last byte lands last: a target spinning on it then sees the whole payload.
            unsafe {
                std::ptr::copy_nonoverlapping(head.as_ptr(), va as *mut u8, head.len());
                std::sync::atomic::fence(Ordering::Release);
                std::ptr::write_volatile((va as *mut u8).add(head.len()), *last);
            }
        }
        Ok(())
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: t::AtomicOp) -> Result<u64, t::MemError> {
        if va % 8 != 0 {
            return Err(t::MemError::Access);
        }
        let (r, va) = self.remote(rkey, va, 8, ACCESS_REMOTE_ATOMIC)?;
        if va % 8 != 0 {
            return Err(t::MemError::Access); // an iova aligned, its local address not
        }
        let _inside = enter(&r)?;
        // SAFETY: 8 aligned bytes inside a region with atomic access (checked above),
        // registered until we leave its gate.
        let cell = unsafe { AtomicU64::from_ptr(va as *mut u64) };
        Ok(match op {
            t::AtomicOp::CmpSwap { compare, swap } => {
                match cell.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
            t::AtomicOp::FetchAdd { add } => cell.fetch_add(add, Ordering::SeqCst),
        })
    }

    fn invalidate(&mut self, rkey: u32) -> Result<(), t::MemError> {
        self.keys.invalidate(rkey).map_err(|_| t::MemError::Access)
    }
}

#[cfg(test)]
#[path = "tests_rc_mem.rs"]
mod tests;
