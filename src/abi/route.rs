//! Which library serves a call when both are in use (`RDMASHIM_PROVIDER=both`, see
//! [`crate::provider::native`]): the one whose object the call's first argument is.
//!
//! A verbs object of ours is registered (`verbs::objects`) or is our device; any other
//! non-NULL object is the native library's, and the call is forwarded to it. Everything else
//! stays here: NULL (our errors), calls whose first argument is no verbs object (integers,
//! strings, device lists, the CM's ids and channels: librdmacm is ours in that mode).
//!
//! [`route_first!`] picks the check at compile time by the argument's type, with the autoref
//! rule of method resolution (as `trace::decode` does): an [`ObjectArg`] impl on `Probe<T>` wins
//! over the [`OtherArg`] one on `&Probe<T>`, which exists for every type.

use crate::sys::*;
use crate::verbs::{device, objects};

/// A verbs object type whose instances of ours can be told from the native library's.
pub trait Owned {
    /// `p` is one of ours.
    ///
    /// # Safety
    /// `p` is not NULL and, if it is not ours, a live object of the native library (the
    /// call's argument under its man page).
    unsafe fn ours(p: *const Self) -> bool;
}

macro_rules! registered {
    ($($ty:ident => $registry:ident),* $(,)?) => {$(
        impl Owned for $ty {
            unsafe fn ours(p: *const Self) -> bool {
                objects().$registry.contains(p)
            }
        }
    )*};
}

registered! {
    ibv_context => contexts,
    ibv_pd => pds,
    ibv_td => tds,
    ibv_mr => mrs,
    ibv_dm => dms,
    ibv_mw => mws,
    ibv_comp_channel => channels,
    ibv_cq => cqs,
    ibv_qp => qps,
    ibv_srq => srqs,
    ibv_ah => ahs,
    ibv_xrcd => xrcds,
}

/// Objects the soft provider never makes: any non-NULL one is the native library's.
macro_rules! never_ours {
    ($($ty:ident),* $(,)?) => {$(
        impl Owned for $ty {
            unsafe fn ours(_: *const Self) -> bool {
                false
            }
        }
    )*};
}

never_ours!(ibv_wq, ibv_rwq_ind_table, ibv_flow, ibv_flow_action, ibv_counters);

impl Owned for ibv_device {
    unsafe fn ours(p: *const Self) -> bool {
        device::is_device(p)
    }
}

/// An event goes back to the library that handed it out: the one its object (named by the
/// event type) belongs to. Unaffiliated events (port, device) need nothing from either but a
/// WQ's, which only the native library makes.
impl Owned for ibv_async_event {
    unsafe fn ours(p: *const Self) -> bool {
        // SAFETY: per the contract, `p` is not NULL and, per the man page, an event that
        // ibv_get_async_event filled.
        let e = unsafe { &*p };
        match crate::verbs::async_event::object_of(e) {
            Some(obj) => {
                let o = objects();
                let a = obj as *const u8;
                o.qps.contains(a) || o.cqs.contains(a) || o.srqs.contains(a)
            }
            None => e.event_type != ibv_event_type::IBV_EVENT_WQ_FATAL,
        }
    }
}

/// The first argument of a call, probed.
pub struct Probe<T>(pub T);

/// A verbs object argument: forwarded when it is not NULL and not ours.
pub trait ObjectArg {
    fn native(&self) -> bool;
}

/// Any other argument: served here.
pub trait OtherArg {
    fn native(&self) -> bool {
        false
    }
}

impl<T: Owned> ObjectArg for Probe<*mut T> {
    fn native(&self) -> bool {
        // SAFETY: checked non-NULL; otherwise the C caller's argument, which its man page
        // makes a live object (ours, or the native library's).
        !self.0.is_null() && !unsafe { T::ours(self.0) }
    }
}

impl<T: Owned> ObjectArg for Probe<*const T> {
    fn native(&self) -> bool {
        // SAFETY: the pointer is non-NULL (checked first) and the caller's live object.
        !self.0.is_null() && !unsafe { T::ours(self.0) }
    }
}

impl<T> OtherArg for &Probe<T> {}

/// Whether a call with these arguments is forwarded to the native library: every call with
/// `native`, one whose first argument is not ours with `both` ([`route_first!`]), none otherwise.
#[macro_export]
macro_rules! forwarded {
    ($($arg:ident),*) => {
        $crate::provider::native::on()
            && ($crate::provider::native::forwards_all() || $crate::route_first!($($arg),*))
    };
}

/// Whether a call with these arguments goes to the native library under `both`: by its first
/// argument, as the module comment says; a call with none stays here.
#[macro_export]
macro_rules! route_first {
    () => {
        false
    };
    ($first:ident $(, $rest:ident)*) => {{
        #[allow(unused_imports)]
        use $crate::abi::route::{ObjectArg as _, OtherArg as _};
        (&$crate::abi::route::Probe($first)).native()
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_int;

    #[test]
    fn objects_not_ours_are_forwarded_and_everything_else_stays() {
        let foreign = 0x1000 as *mut ibv_qp;
        let null: *mut ibv_qp = std::ptr::null_mut();
        let count: *mut c_int = std::ptr::null_mut();
        let n: c_int = 3;
        assert!(route_first!(foreign), "a QP nobody registered is the native library's");
        assert!(!route_first!(null), "NULL stays here (our EINVAL)");
        assert!(!route_first!(count), "not a verbs object");
        assert!(!route_first!(n));
        let dev = device::device_ptr();
        assert!(!route_first!(dev), "our device");
        let other = 0x2000 as *mut ibv_device;
        assert!(route_first!(other));
        let wq = 0x3000 as *mut ibv_wq;
        assert!(route_first!(wq), "a WQ is never ours");
    }
}
