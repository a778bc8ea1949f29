//! XRC domains (`ibv_open_xrcd`): the XRC SRQs a domain's target QPs take receives from, named
//! by number, and its target QPs (`ibv_open_qp`).
//!
//! A domain opened on a file is the domain of that file's inode: every `ibv_open_xrcd` on the
//! same inode in this process gets its own `ibv_xrcd` handle on one shared [`Domain`]. Sharing
//! a domain with another process is not offered (each process has its own); a domain opened
//! with fd -1 is private to its handle. SRQ numbers are unique on the host all the same
//! ([`claim_srqn`]), so a number another process's SRQ has is never one of ours.

use super::device::Context;
use super::objects;
use super::qp::Qp;
use super::srq::Srq;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::provider::{XrcSrqs, XrcTarget};
use crate::runtime::fork::PerProcess;
use crate::runtime::{lock, unix};
use crate::sys::*;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What the handles on one domain share.
#[derive(Default)]
pub struct Domain {
    /// XRC SRQs by number.
    srqs: Mutex<HashMap<u32, Weak<Srq>>>,
    /// Target (XRC_RECV) QPs by number.
    qps: Mutex<HashMap<u32, Weak<Qp>>>,
}

pub struct Xrcd {
    pub raw: CBox<ibv_xrcd>,
    pub ctx: Arc<Context>,
    pub domain: Arc<Domain>,
    /// SRQs and QPs created through this handle and still alive: it cannot be closed before
    /// them (`EBUSY`), as with the kernel's handles.
    users: AtomicUsize,
}

/// A file's (device, inode number).
type Inode = (u64, u64);

/// Inode → its domain, for the domains opened on a file.
static BY_INODE: PerProcess<Mutex<HashMap<Inode, Weak<Domain>>>> =
    PerProcess::new(|| Mutex::new(HashMap::new()));

/// The next SRQ number this process tries (0: not chosen yet; see [`claim_srqn`]).
static NEXT_SRQN: AtomicU32 = AtomicU32::new(0);

/// How many numbers [`claim_srqn`] tries before it gives up (`ENOMEM`, as when a device runs
/// out of SRQs).
const SRQN_TRIES: u32 = 4096;

impl Xrcd {
    /// `ibv_open_xrcd`: with fd -1, a new private domain (`O_CREAT` required); with a file,
    /// the domain of its inode, created with `O_CREAT` (refused with `O_EXCL` if it exists),
    /// else it must exist (`ENOENT`).
    pub fn open(ctx: Arc<Context>, a: &ibv_xrcd_init_attr) -> Result<*mut ibv_xrcd> {
        use ibv_xrcd_init_attr_mask as m;
        let known = m::IBV_XRCD_INIT_ATTR_FD.0 | m::IBV_XRCD_INIT_ATTR_OFLAGS.0;
        if a.comp_mask & !known != 0 {
            return Err(Errno::EINVAL);
        }
        let fd = if a.comp_mask & m::IBV_XRCD_INIT_ATTR_FD.0 != 0 { a.fd } else { -1 };
        let oflags = if a.comp_mask & m::IBV_XRCD_INIT_ATTR_OFLAGS.0 != 0 { a.oflags } else { 0 };
        if oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
            return Err(Errno::EINVAL);
        }
        let create = oflags & libc::O_CREAT != 0;
        let domain = if fd == -1 {
            if !create {
                return Err(Errno::EINVAL);
            }
            Arc::new(Domain::default())
        } else {
            let key = inode_of(fd)?;
            let mut t = lock(BY_INODE.get());
            t.retain(|_, d| d.strong_count() > 0);
            match t.get(&key).and_then(Weak::upgrade) {
                Some(_) if oflags & libc::O_EXCL != 0 && create => return Err(Errno::EEXIST),
                Some(d) => d,
                None if !create => return Err(Errno::ENOENT),
                None => {
                    let d = Arc::new(Domain::default());
                    t.insert(key, Arc::downgrade(&d));
                    d
                }
            }
        };
        let mut raw: CBox<ibv_xrcd> = CBox::zeroed();
        raw.init().context = ctx.ptr();
        let p = raw.as_ptr();
        let x = Xrcd { raw, ctx, domain, users: AtomicUsize::new(0) };
        objects().xrcds.insert(p as usize, Arc::new(x));
        Ok(p)
    }

    /// `ibv_close_xrcd`: `EBUSY` while SRQs or QPs created through this handle live.
    pub fn close(p: *mut ibv_xrcd) -> Result<()> {
        let x = objects().xrcds.get(p)?;
        if x.users.load(Ordering::Acquire) > 0 {
            return Err(Errno::EBUSY);
        }
        objects().xrcds.remove(p).ok_or(Errno::EINVAL)?;
        Ok(())
    }

    /// A new SRQ number in this domain for `srq`, counted as a user of this handle. The
    /// domain's target QPs feed its CQ from now on: polling it runs them, as polling a QP's
    /// own CQ does.
    pub fn add_srq(&self, srq: &Arc<Srq>, srqn: u32) {
        lock(&self.domain.srqs).insert(srqn, Arc::downgrade(srq));
        self.users.fetch_add(1, Ordering::AcqRel);
        if let Some(x) = &srq.xrc {
            let qps: Vec<Weak<Qp>> = lock(&self.domain.qps).values().cloned().collect();
            for q in qps {
                x.cq.attach(q);
            }
        }
    }

    pub fn remove_srq(&self, srqn: u32) {
        lock(&self.domain.srqs).remove(&srqn);
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// A target QP of this domain, counted as a user of this handle; it feeds the CQs of the
    /// domain's SRQs (see `add_srq`).
    pub fn add_qp(&self, qp: &Arc<Qp>) {
        lock(&self.domain.qps).insert(qp.qpn, Arc::downgrade(qp));
        self.users.fetch_add(1, Ordering::AcqRel);
        let srqs: Vec<Arc<Srq>> =
            lock(&self.domain.srqs).values().filter_map(Weak::upgrade).collect();
        for s in srqs.iter().filter_map(|s| s.xrc.as_ref()) {
            s.cq.attach(Arc::downgrade(qp));
        }
    }

    pub fn remove_qp(&self, qpn: u32) {
        lock(&self.domain.qps).remove(&qpn);
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Counts an opened QP (`ibv_open_qp`) as a user of this handle.
    pub fn hold(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub fn release(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// The target QP `qpn` of this domain, if it lives.
    pub fn target_qp(&self, qpn: u32) -> Option<Arc<Qp>> {
        lock(&self.domain.qps).get(&qpn).and_then(Weak::upgrade)
    }
}

/// A new SRQ number, and the claim that keeps it ours: a socket bound to the abstract name
/// `rdmashim/srqn/<number>` for as long as the SRQ lives. The name makes the number unique
/// among all the processes of this host (network namespace), not only ours, as a device's SRQ
/// numbers are. So a request that names another process's SRQ (which a domain shared through
/// a file would reach on hardware) can never be taken for one of ours: it finds no SRQ here
/// and is refused (`IBV_WC_REM_INV_REQ_ERR` at the sender).
pub fn claim_srqn() -> Result<(u32, OwnedFd)> {
    // 24 bits, never 0 (the number of no SRQ). Each process starts at its own place, so
    // processes that create SRQs together rarely try the same numbers.
    let _ = NEXT_SRQN.compare_exchange(
        0,
        std::process::id().wrapping_mul(0x9e37_79b1) % 0xff_ffff + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SRQN_TRIES {
        let n = NEXT_SRQN.fetch_add(1, Ordering::Relaxed) % 0xff_ffff + 1;
        match unix::bind(&format!("rdmashim/srqn/{n:06x}")) {
            Ok(fd) => return Ok((n, fd)),
            Err(Errno::EADDRINUSE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::ENOMEM)
}

impl XrcSrqs for Domain {
    fn target(&self, srqn: u32) -> Option<XrcTarget> {
        let srq = lock(&self.srqs).get(&srqn).and_then(Weak::upgrade)?;
        let cq = srq.xrc.as_ref()?.cq.clone();
        Some(XrcTarget { keys: srq.pd.clone(), cq, srq })
    }
}

/// The (device, inode) of an open file.
fn inode_of(fd: libc::c_int) -> Result<Inode> {
    // SAFETY: all-zero is a valid stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into st; an invalid fd fails with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Errno::last());
    }
    Ok((st.st_dev, st.st_ino))
}

/// An XRC target's own CQs: it has none, so nothing completes there.
pub struct NoSink;

impl crate::provider::CompletionSink for NoSink {
    fn push(&self, _: crate::provider::Completion) {}
}

/// An XRC target's own memory keys: it has no PD, so every key is refused (its requests are
/// checked against the keys of the SRQ they name).
pub struct NoKeys;

impl crate::provider::MemoryKeys for NoKeys {
    fn lookup(
        &self,
        _: u32,
        _: u64,
        _: usize,
        _: u32,
        _: crate::provider::KeySpace,
    ) -> std::result::Result<crate::provider::Checked, crate::provider::AccessError> {
        Err(crate::provider::AccessError::Protection)
    }
}
