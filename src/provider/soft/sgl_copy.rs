//! Moving a message's bytes between the rings (or a peer's mapping) and scatter/gather lists:
//! a send's payload out, a receive's or a READ's data in, piece by piece across the SGEs.

use crate::provider::{AccessError, KeySpace, MemoryKeys, Payload, Sgl, ACCESS_LOCAL_WRITE};

/// Copies `n` bytes of a send's payload, starting at message offset `off`, to `dst`.
///
/// # Safety
/// `dst` is valid for `n` bytes; SGE ranges were checked against registered regions.
pub(super) unsafe fn copy_out(p: &Payload, off: u64, dst: *mut u8, n: usize) {
    match p {
        Payload::Inline(d) => {
            let v = d.as_slice();
            // SAFETY: off + n <= v.len() (the message length); dst valid per contract.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().add(off as usize), dst, n) }
        }
        Payload::Sges(sgl) => walk(sgl, off, n, |_, addr, at, len| {
            // SAFETY: the piece lies in a checked registered region; dst has n bytes.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.add(at), len) }
        }),
    }
}

/// Copies `n` bytes from `src` into a scatter list at message offset `off`, where the SGEs were
/// checked earlier (when the request was posted, or at a message's first segment). Each piece
/// is looked up again in `keys` (local write) and written inside its region's gate: a region
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
    let mut r = Ok(());
    walk(sgl, off, n, |lkey, addr, at, len| {
        if r.is_err() {
            return;
        }
        let c = match keys.lookup(lkey, addr, len, ACCESS_LOCAL_WRITE, KeySpace::Local) {
            Ok(c) => c,
            Err(e) => return r = Err(e),
        };
        let Some(_inside) = c.region.enter() else { return r = Err(AccessError::Protection) };
        // SAFETY: [addr, addr + len) lies in a region with local write (looked up just now),
        // registered until we leave its gate; src holds at + len bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), c.addr as *mut u8, len) }
    });
    r
}

/// Copies the first `out.len()` bytes a scatter list describes into `out`.
///
/// # Safety
/// The SGEs lie within registered regions (checked when posted).
pub(super) unsafe fn gather(sgl: &Sgl, out: &mut [u8]) {
    let dst = out.as_mut_ptr();
    walk(sgl, 0, out.len(), |_, addr, at, len| {
        // SAFETY: the piece lies in a checked region; `out` has room for `at + len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.add(at), len) }
    })
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
        f(s.lkey, s.addr + skip, done, take);
        done += take;
        skip = 0;
    }
}
