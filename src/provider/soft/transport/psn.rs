//! 24-bit packet sequence numbers: they wrap at 2^24, and two PSNs compare by their signed
//! distance (valid while the outstanding window stays under 2^23, which the engine's bounded
//! windows guarantee).

/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;
const HALF: i32 = 1 << 23;

/// `a + n`, wrapped to 24 bits.
pub fn add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// `a - 1`, wrapped.
pub fn prev(a: u32) -> u32 {
    a.wrapping_sub(1) & PSN_MASK
}

/// Signed distance `a - b` in [-2^23, 2^23): positive when `a` is after `b`.
pub fn diff(a: u32, b: u32) -> i32 {
    let d = (a.wrapping_sub(b) & PSN_MASK) as i32;
    if d >= HALF {
        d - (1 << 24)
    } else {
        d
    }
}

/// `a` comes strictly before `b`.
pub fn before(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

/// `p` lies in `[first, first + n)`.
pub fn in_range(p: u32, first: u32, n: u32) -> bool {
    let d = diff(p, first);
    d >= 0 && (d as u32) < n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(add(PSN_MASK, 1), 0);
        assert_eq!(add(PSN_MASK - 1, 5), 3);
        assert_eq!(prev(0), PSN_MASK);
        assert_eq!(add(7, 0), 7);
    }

    #[test]
    fn signed_distance_across_the_wrap() {
        assert_eq!(diff(2, PSN_MASK), 3);
        assert_eq!(diff(PSN_MASK, 2), -3);
        assert_eq!(diff(5, 5), 0);
        assert_eq!(diff(1 << 23, 0), -(1 << 23));
        assert_eq!(diff((1 << 23) - 1, 0), (1 << 23) - 1);
        assert!(before(PSN_MASK, 0));
        assert!(!before(0, PSN_MASK));
        assert!(!before(9, 9));
    }

    #[test]
    fn ranges_across_the_wrap() {
        assert!(in_range(0, PSN_MASK - 1, 3));
        assert!(in_range(PSN_MASK, PSN_MASK - 1, 3));
        assert!(!in_range(1, PSN_MASK - 1, 3));
        assert!(!in_range(PSN_MASK - 2, PSN_MASK - 1, 3));
        assert!(!in_range(4, 4, 0));
    }

    #[test]
    fn high_bits_of_inputs_are_ignored() {
        assert_eq!(diff(0xff00_0001, 0), 1);
        assert_eq!(add(0xff00_0000, 1), 1);
    }
}
