//! What every provider shares: device, context, PD, the MR key table, CQ and completion channel,
//! the QP state machine and send-queue accounting, the one send-request builder, SRQ queueing,
//! AH. The data path is the provider's (`crate::provider`), reached through the seam's traits.

pub mod ah;
pub mod async_event;
pub mod cq;
pub mod cq_ex;
pub mod cq_mod;
pub mod device;
pub mod device_ex;
pub mod dm;
pub mod ece;
pub mod import;
pub mod import_remote;
pub mod mr;
pub mod mw;
pub mod pages;
pub mod pd;
pub mod ptr_list;
pub mod qp;
pub mod qp_ex;
pub mod qp_state;
pub mod send_wr;
pub mod srq;
pub mod ud;
pub mod xrcd;

use crate::handle::Registry;
use once_cell::sync::Lazy;

/// The live objects of this process, by the address of the C struct handed out.
pub struct Objects {
    pub contexts: Registry<device::Context>,
    pub pds: Registry<pd::Pd>,
    pub tds: Registry<pd::Td>,
    pub mrs: Registry<mr::Mr>,
    pub dms: Registry<dm::Dm>,
    pub mws: Registry<mw::Mw>,
    pub channels: Registry<cq::CompChannel>,
    pub cqs: Registry<cq::Cq>,
    pub qps: Registry<qp::Qp>,
    pub srqs: Registry<srq::Srq>,
    pub ahs: Registry<ah::Ah>,
    pub xrcds: Registry<xrcd::Xrcd>,
}

pub static OBJECTS: Lazy<Objects> = Lazy::new(|| Objects {
    contexts: Registry::default(),
    pds: Registry::default(),
    tds: Registry::default(),
    mrs: Registry::default(),
    dms: Registry::default(),
    mws: Registry::default(),
    channels: Registry::default(),
    cqs: Registry::default(),
    qps: Registry::default(),
    srqs: Registry::default(),
    ahs: Registry::default(),
    xrcds: Registry::default(),
});

pub fn objects() -> &'static Objects {
    &OBJECTS
}

/// A random object handle, nonzero, that `taken` does not refuse. Random, not an address or a
/// count, because processes that import one another's context (`import_remote/`) make objects
/// in one namespace, where the kernel's handles would be unique: two processes' counters (or
/// heap addresses, which the same program's ranks often share in their low bits) would meet.
pub fn fresh_handle(taken: impl Fn(u32) -> bool) -> u32 {
    let mut h: u32 = 0;
    while h == 0 || taken(h) {
        // SAFETY: getrandom into a valid 4-byte buffer.
        unsafe { libc::getrandom((&mut h as *mut u32).cast(), 4, 0) };
    }
    h
}
