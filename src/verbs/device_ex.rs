//! Extended device queries: `ibv_query_device_ex` and the full `ibv_port_attr` of the
//! `query_port` context op (the exported `ibv_query_port` fills only the legacy prefix).

use super::cq_ex;
use super::cq_mod;
use super::device;
use crate::errno::{Errno, Result};
use crate::sys::*;

/// `ibv_is_qpt_supported`: whether bit `qpt` is set in a `supported_qpts` mask (a type beyond
/// the mask's 32 bits is not supported, where C's shift would be undefined).
pub fn qpt_supported(caps: u32, qpt: u32) -> bool {
    1u32.checked_shl(qpt).is_some_and(|bit| caps & bit != 0)
}

/// `ibv_query_device_ex` answers: the legacy attributes plus completion timestamps (see
/// `cq_ex`), CQ moderation (`cq_mod`), device memory (`dm`) and on-demand paging (`pages`). No
/// TSO, RSS, packet pacing or tag matching.
pub fn device_attr_ex() -> ibv_device_attr_ex {
    // SAFETY: all-zero is a valid ibv_device_attr_ex.
    let mut a: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    device::device_attr(&mut a.orig_attr);
    a.comp_mask = 0;
    a.completion_timestamp_mask = cq_ex::TIMESTAMP_MASK;
    a.hca_core_clock = cq_ex::CORE_CLOCK_KHZ;
    a.cq_mod_caps.max_cq_count = cq_mod::MAX_CQ_COUNT;
    a.cq_mod_caps.max_cq_period = cq_mod::MAX_CQ_PERIOD;
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags as u64;
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt as u32;
    a.max_dm_size = super::dm::MAX_DM_SIZE as u64;
    a.odp_caps = super::pages::odp_caps();
    a.xrc_odp_caps = super::pages::xrc_odp_caps();
    a
}

/// `ibv_query_rt_values_ex`: the raw clock, the completion timestamps' clock (`hca_core_clock`
/// cycles, which are nanoseconds), in `tv_nsec` with `tv_sec` 0 as mlx5 reports its cycle
/// counter, so that `tv_sec * 10^9 + tv_nsec` and `tv_nsec` alone both read the cycle count.
/// `EINVAL` for an unknown `comp_mask` bit (as mlx5); the bits filled come back in `comp_mask`.
pub fn rt_values(v: &mut ibv_values_ex) -> Result<()> {
    let raw_clock = ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
    if v.comp_mask & !raw_clock != 0 {
        return Err(Errno::EINVAL);
    }
    if v.comp_mask & raw_clock != 0 {
        v.raw_clock = cycles_timespec(cq_ex::now_ns());
    }
    Ok(())
}

fn cycles_timespec(ns: u64) -> libc::timespec {
    match libc::c_long::try_from(ns) {
        Ok(n) => libc::timespec { tv_sec: 0, tv_nsec: n },
        // A 32-bit tv_nsec: a normalised timespec of the same count.
        Err(_) => libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        },
    }
}

/// Copies `src` into a caller struct of `len` bytes that starts with the same layout (an older
/// or newer build of the struct): the common prefix is copied, a longer tail is zeroed.
/// `EINVAL` if the caller's struct is shorter than `min`.
///
/// # Safety
/// `dst` is valid for writes of `len` bytes.
pub unsafe fn copy_sized<T>(src: &T, dst: *mut u8, len: usize, min: usize) -> Result<()> {
    if dst.is_null() || len < min {
        return Err(Errno::EINVAL);
    }
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: src is a plain C struct of size_of::<T>() >= n bytes; dst holds len >= n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst, n);
        std::ptr::write_bytes(dst.add(n), 0, len - n);
    }
    Ok(())
}

/// The full `ibv_port_attr` of port `port`, `EINVAL` for another port.
pub fn port_attr_full(port: u8) -> Result<ibv_port_attr> {
    if port != device::PORT {
        return Err(Errno::EINVAL);
    }
    // SAFETY: all-zero is a valid ibv_port_attr.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    device::port_attr(&mut a);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpt_bits() {
        let rc_ud = (1 << ibv_qp_type::IBV_QPT_RC) | (1 << ibv_qp_type::IBV_QPT_UD);
        assert!(qpt_supported(rc_ud, ibv_qp_type::IBV_QPT_UD));
        assert!(!qpt_supported(rc_ud, ibv_qp_type::IBV_QPT_UC));
        assert!(qpt_supported(u32::MAX, 31));
        assert!(!qpt_supported(u32::MAX, 32), "beyond the mask");
    }

    #[test]
    fn attr_ex() {
        let a = device_attr_ex();
        assert_eq!(a.orig_attr.phys_port_cnt, 1);
        assert_ne!(a.completion_timestamp_mask, 0);
        assert_eq!(a.hca_core_clock, cq_ex::CORE_CLOCK_KHZ);
        assert!(a.cq_mod_caps.max_cq_count >= 4 && a.cq_mod_caps.max_cq_period > 0);
        assert_eq!(a.max_dm_size, super::super::dm::MAX_DM_SIZE as u64);
    }

    fn clock_ns(v: &ibv_values_ex) -> u64 {
        v.raw_clock.tv_sec as u64 * 1_000_000_000 + v.raw_clock.tv_nsec as u64
    }

    #[test]
    fn raw_clock() {
        // SAFETY: all-zero is a valid ibv_values_ex.
        let mut v: ibv_values_ex = unsafe { std::mem::zeroed() };
        v.comp_mask = ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
        let before = cq_ex::now_ns();
        rt_values(&mut v).unwrap();
        let after = cq_ex::now_ns();
        assert_eq!(v.comp_mask, ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0);
        // The completion timestamps' clock, in hca_core_clock cycles.
        assert!(before <= clock_ns(&v) && clock_ns(&v) <= after);
        assert_eq!(v.raw_clock.tv_nsec as u64, clock_ns(&v));
        v.comp_mask = 0;
        rt_values(&mut v).unwrap();
        assert_eq!(v.comp_mask, 0);
        v.comp_mask = ibv_values_mask::IBV_VALUES_MASK_RESERVED.0;
        assert_eq!(rt_values(&mut v), Err(Errno::EINVAL));
        let big = cycles_timespec(3_000_000_001);
        assert_eq!(big.tv_sec as u64 * 1_000_000_000 + big.tv_nsec as u64, 3_000_000_001);
    }

    #[test]
    fn sized_copy() {
        let src: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut dst = [0xffu8; 12];
        // SAFETY: dst holds 12 bytes.
        unsafe { copy_sized(&src, dst.as_mut_ptr(), 12, 4) }.unwrap();
        assert_eq!(dst, [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]);
        let mut short = [0u8; 6];
        // SAFETY: short holds 6 bytes.
        unsafe { copy_sized(&src, short.as_mut_ptr(), 6, 4) }.unwrap();
        assert_eq!(short, [1, 2, 3, 4, 5, 6]);
        // SAFETY: short holds 6 bytes, more than the 3 asked for (refused before any write).
        assert_eq!(unsafe { copy_sized(&src, short.as_mut_ptr(), 3, 4) }, Err(Errno::EINVAL));
    }
}
