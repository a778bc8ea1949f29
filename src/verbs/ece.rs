//! Enhanced Connection Establishment (`ibv_query_ece`, `ibv_set_ece`): the options a QP offers
//! or uses, named by the device's vendor id. The soft provider has no vendor options yet
//! ([`SUPPORTED`] is empty): a QP reports none, and `ibv_set_ece` accepts a request of its own
//! vendor and hands back the options it took (none), as mlx5 hands back what its firmware
//! accepted. Another vendor's options are invalid (`EINVAL`).

use super::device::VENDOR_ID;
use super::qp::Qp;
use crate::errno::{Errno, Result};
use crate::sys::*;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The ECE options the soft provider's QPs support.
pub const SUPPORTED: u32 = 0;

/// A new QP's options: all it supports.
pub fn initial() -> AtomicU32 {
    AtomicU32::new(SUPPORTED)
}

impl Qp {
    /// `ibv_query_ece`: the QP's current options.
    pub fn query_ece(&self) -> ibv_ece {
        ibv_ece { vendor_id: VENDOR_ID, options: self.ece.load(Relaxed), comp_mask: 0 }
    }

    /// `ibv_set_ece`: `EOPNOTSUPP` for vendor 0 (libibverbs' own check), `EINVAL` for a
    /// `comp_mask` (none is defined) or another vendor's options; otherwise the options the QP
    /// supports are taken and written back.
    pub fn set_ece(&self, e: &mut ibv_ece) -> Result<()> {
        e.options = check_set(e)?;
        self.ece.store(e.options, Relaxed);
        Ok(())
    }
}

/// The options `ibv_set_ece` takes from `e`.
fn check_set(e: &ibv_ece) -> Result<u32> {
    if e.vendor_id == 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if e.comp_mask != 0 || e.vendor_id != VENDOR_ID {
        return Err(Errno::EINVAL);
    }
    Ok(e.options & SUPPORTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_checks() {
        let ok = ibv_ece { vendor_id: VENDOR_ID, options: 0, comp_mask: 0 };
        assert_eq!(check_set(&ok), Ok(0));
        assert_eq!(check_set(&ibv_ece { options: 0xff, ..ok }), Ok(SUPPORTED & 0xff));
        assert_eq!(check_set(&ibv_ece { vendor_id: 0, ..ok }), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            check_set(&ibv_ece { vendor_id: VENDOR_ID ^ 0x123456, ..ok }),
            Err(Errno::EINVAL)
        );
        assert_eq!(check_set(&ibv_ece { comp_mask: 1, ..ok }), Err(Errno::EINVAL));
    }
}
