//! Moving a message's bytes between the rings (or a peer's mapping) and scatter/gather lists:
//! a send's payload out, a receive's or a READ's data in, piece by piece across the SGEs.
//! Every piece is looked up again and copied while its region cannot be deregistered
//! (`MemoryKeys::access`): a request's entries are checked before it starts, but another
//! thread may deregister (and unmap) a region before its bytes move, and then they do not.

use crate::provider::{AccessError, KeySpace, MemoryKeys, Payload, Sgl, ACCESS_LOCAL_WRITE};
use std::sync::atomic::{fence, Ordering};

/// Copies `n` bytes of a send's payload, starting at message offset `off`, to `dst`, where the
/// SGEs were checked earlier (when the request reached the front of the send queue): each piece
/// is looked up again in `keys` and read while it stays registered, so a region deregistered
/// (and perhaps unmapped) since the check is not read, and the caller fails the request with a
/// protection error. Inline data was copied when posted: it is always there.
///
/// # Safety
/// `dst` is valid for `n` bytes; `off + n` is at most the payload's length.
pub(super) unsafe fn take_out(
    keys: &dyn MemoryKeys,
    p: &Payload,
    off: u64,
    dst: *mut u8,
    n: usize,
) -> Result<(), AccessError> {
    let sgl = match p {
        Payload::Sges(sgl) => sgl,
        Payload::Inline(d) => {
            let v = &d.as_slice()[off as usize..off as usize + n];
            // SAFETY: dst is valid for n bytes, v holds n.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, n) };
            return Ok(());
        }
    };
    walk_registered(keys, sgl, off, n, 0, |local, at, len| {
        // SAFETY: [local, local + len) lies in a region that stays registered while the walk
        // hands it to us; dst holds at + len bytes.
        unsafe { std::ptr::copy_nonoverlapping(local as *const u8, dst.add(at), len) }
    })
}

/// [`take_out`] of a whole payload of `n > 0` bytes to `dst`, its last byte written last (after
/// a release fence): a reader polling that byte sees the rest once it changes.
///
/// # Safety
/// `dst` is valid for `n` bytes; `n` is the payload's length.
pub(super) unsafe fn take_out_last_byte_last(
    keys: &dyn MemoryKeys,
    p: &Payload,
    dst: *mut u8,
    n: usize,
) -> Result<(), AccessError> {
    // SAFETY: (both copies) dst + at holds len bytes; the source piece is in a region that
    // stays registered while the walk hands it to us (or is inline data).
    let copy = |src: *const u8, at: usize, len: usize| unsafe {
        if at + len == n {
            std::ptr::copy_nonoverlapping(src, dst.add(at), len - 1);
            fence(Ordering::Release);
            std::ptr::copy_nonoverlapping(src.add(len - 1), dst.add(at + len - 1), 1);
        } else {
            std::ptr::copy_nonoverlapping(src, dst.add(at), len);
        }
    };
    match p {
        Payload::Inline(d) => {
            copy(d.as_slice().as_ptr(), 0, n);
            Ok(())
        }
        Payload::Sges(sgl) => {
            walk_registered(keys, sgl, 0, n, 0, |local, at, len| copy(local as *const u8, at, len))
        }
    }
}

/// Copies `n` bytes from `src` into a scatter list at message offset `off`, where the SGEs were
/// checked earlier (when the request was posted, or at a message's first segment). Each piece
/// is looked up again in `keys` (local write) and written while it stays registered: a region
/// deregistered since the check (a program tearing down while a message lands) is not written,
/// and the caller fails the request with a protection error, as hardware would.
///
/// # Safety
/// `src` is valid for `n` bytes.
pub(super) unsafe fn place_in(
    keys: &dyn MemoryKeys,
    sgl: &Sgl,
    off: u64,
    src: *const u8,
    n: usize,
) -> Result<(), AccessError> {
    walk_registered(keys, sgl, off, n, ACCESS_LOCAL_WRITE, |local, at, len| {
        // SAFETY: [local, local + len) lies in a region with local write (looked up just now),
        // that stays registered while the walk hands it to us; src holds at + len bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), local as *mut u8, len) }
    })
}

/// Copies the first `out.len()` bytes a scatter list describes into `out`, each piece read
/// while its region stays registered (see [`take_out`]).
pub(super) fn gather(keys: &dyn MemoryKeys, sgl: &Sgl, out: &mut [u8]) -> Result<(), AccessError> {
    let dst = out.as_mut_ptr();
    walk_registered(keys, sgl, 0, out.len(), 0, |local, at, len| {
        // SAFETY: the piece lies in a region that stays registered while the walk hands it to
        // us; `out` has room for `at + len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(local as *const u8, dst.add(at), len) }
    })
}

/// The most a copy moves under one access (`MemoryKeys::access`): a deregistration waits
/// for at most this much.
const CHUNK: usize = 64 << 10;

/// [`walk`], each piece looked up again in `keys` (local space, rights `need`) and handed to
/// `f` as its local address, in chunks of at most [`CHUNK`] bytes, while its region cannot be
/// deregistered; stops at the first piece refused or whose region was deregistered since.
/// The network path's local copies (`net/rc_mem.rs`) go through it too.
pub(super) fn walk_registered(
    keys: &dyn MemoryKeys,
    sgl: &Sgl,
    off: u64,
    n: usize,
    need: u32,
    mut f: impl FnMut(u64, usize, usize),
) -> Result<(), AccessError> {
    let mut r = Ok(());
    walk(sgl, off, n, |lkey, addr, at, len| {
        let mut done = 0;
        while r.is_ok() && done < len {
            let l = (len - done).min(CHUNK);
            let (piece, piece_at) = (addr + done as u64, at + done);
            r = keys
                .access(lkey, piece, l, need, KeySpace::Local, &mut |local| f(local, piece_at, l));
            done += l;
        }
    });
    r
}

/// Walks bytes `[off, off+n)` of the message a scatter/gather list describes: `f(lkey, address,
/// offset within those n bytes, length)` for each contiguous piece.
fn walk(sgl: &Sgl, off: u64, n: usize, mut f: impl FnMut(u32, u64, usize, usize)) {
    let mut skip = off;
    let mut done = 0usize;
    for s in sgl.as_slice() {
        if done == n {
            break;
        }
        let l = s.length as u64;
        if skip >= l {
            skip -= l;
            continue;
        }
        let take = ((l - skip) as usize).min(n - done);
        f(s.lkey, s.addr.wrapping_add(skip), done, take); // a wrapped address is refused
        done += take;
        skip = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::soft::test_keys::Regions;
    use crate::provider::{InlineData, Sge};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn a_long_piece_is_copied_in_bounded_chunks_each_checked() {
        let src: Vec<u8> = (0..150_000u32).map(|i| (i * 7) as u8).collect();
        let keys = Regions::new(&[&src]);
        // Two entries: the first 70,000 bytes, then the rest.
        let sge = |from: usize, to: usize| Sge {
            addr: src.as_ptr() as u64 + from as u64,
            length: (to - from) as u32,
            lkey: 0,
        };
        let p = Payload::Sges(Sgl::Many(vec![sge(0, 70_000), sge(70_000, src.len())]));
        let mut dst = vec![0u8; src.len()];
        // SAFETY: dst holds the payload's length.
        unsafe { take_out(&keys, &p, 0, dst.as_mut_ptr(), dst.len()) }.unwrap();
        assert_eq!(dst, src);
        assert!(keys.longest.load(Relaxed) <= CHUNK, "a copy longer than a chunk");

        let mut last = vec![0u8; src.len()];
        // SAFETY: last holds the payload's length.
        unsafe { take_out_last_byte_last(&keys, &p, last.as_mut_ptr(), last.len()) }.unwrap();
        assert_eq!(last, src);
    }

    #[test]
    fn a_closed_region_is_neither_read_nor_written() {
        let mut buf = vec![5u8; 64];
        let keys = Regions::new(&[&buf]);
        let sgl = Sgl::One(Sge { addr: buf.as_mut_ptr() as u64, length: 64, lkey: 0 });
        keys.gate.close();
        let mut out = [0u8; 64];
        // SAFETY: out holds 64 bytes; the source holds 64.
        let taken =
            unsafe { take_out(&keys, &Payload::Sges(sgl.clone()), 0, out.as_mut_ptr(), 64) };
        assert_eq!(taken, Err(AccessError::Protection));
        assert_eq!(out, [0u8; 64]);
        // SAFETY: the source holds 64 bytes.
        let placed = unsafe { place_in(&keys, &sgl, 0, [9u8; 64].as_ptr(), 64) };
        assert_eq!(placed, Err(AccessError::Protection));
        assert!(buf.iter().all(|&b| b == 5));
        // Inline data was copied when posted: it needs no region.
        // SAFETY: the inline payload holds 3 bytes.
        let d = unsafe { InlineData::gather([(out.as_ptr(), 3)].into_iter()) }.unwrap();
        let mut three = [1u8; 3];
        // SAFETY: `three` holds the payload's 3 bytes.
        unsafe { take_out(&keys, &Payload::Inline(d), 0, three.as_mut_ptr(), 3) }.unwrap();
        assert_eq!(three, [0u8; 3]);
    }
}
