//! Protection domains, thread domains and parent domains.
//!
//! A **parent domain** (`ibv_alloc_parent_domain`) is an `ibv_pd` of its own, registered with
//! the PDs, that wraps a PD (and optionally a thread domain). It is interchangeable with that PD:
//! every object created on it (QP, SRQ, AH, MR) is created in its [`Pd::domain`], the innermost
//! plain PD, so the key table and the provider see one protection domain, while the object's C
//! struct names the parent domain as its `pd`, as libibverbs sets it. A parent domain is in use
//! (`ibv_dealloc_pd` gives `EBUSY`) while an object names it, a CQ was created on it or another
//! parent domain wraps it; its PD and thread domain are in use while it exists.
//!
//! A **thread domain** is a promise of single-threaded use. This provider is thread-safe
//! either way, so it only records the domain (the page leaves the behaviour to the provider).
//! Custom allocators are accepted and never called: the provider's buffers are its own shared
//! rings and queues, none of which an application allocator could provide.

use super::device::Context;
use super::import_remote::{self, Held};
use super::mr::Mr;
use super::objects;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::runtime::lock;
use crate::sys::*;
use std::sync::{Arc, Mutex, Weak};

pub struct Pd {
    pub raw: CBox<ibv_pd>,
    pub ctx: Arc<Context>,
    /// Set for a parent domain.
    pub parent: Option<Parent>,
    /// Set for our domain standing for another process's PD (`import_remote/`).
    pub remote: Option<Held>,
}

/// What a parent domain wraps.
pub struct Parent {
    /// The PD given (itself possibly a parent domain).
    pub pd: Arc<Pd>,
    pub td: Option<Arc<Td>>,
    /// The MRs registered on the parent domain (their `Mr` holds the domain).
    mrs: Mutex<Vec<Weak<Mr>>>,
    /// An `ibv_import_pd` struct: another handle of `pd`'s object, not a domain of its own.
    imported: bool,
}

/// The C structs of handles whose object another handle destroyed (an import, or the original
/// after its import was deallocated): out of the registry, so every verb refuses them, and
/// kept allocated, so that their address is not handed to a new PD while the application may
/// still pass them to `ibv_unimport_pd` (the only call the man page allows on them). Only the
/// struct is kept (not the context it names), unless another thread held the PD just then.
static DESTROYED: Mutex<Vec<Stale>> = Mutex::new(Vec::new());

enum Stale {
    Struct(CBox<ibv_pd>),
    Whole(Arc<Pd>),
}

impl Stale {
    fn of(h: Arc<Pd>) -> Stale {
        match Arc::try_unwrap(h) {
            Ok(pd) => Stale::Struct(pd.raw),
            Err(h) => Stale::Whole(h),
        }
    }

    fn ptr(&self) -> *mut ibv_pd {
        match self {
            Stale::Struct(raw) => raw.as_ptr(),
            Stale::Whole(h) => h.raw.as_ptr(),
        }
    }
}

/// A thread domain (`ibv_alloc_td`).
pub struct Td {
    pub raw: CBox<ibv_td>,
    pub ctx: Arc<Context>,
}

const ALLOCATORS: u32 = ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS.0;
const PD_CONTEXT: u32 = ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT.0;

impl Pd {
    pub fn alloc(ctx: Arc<Context>) -> Result<*mut ibv_pd> {
        // Other processes given the cmd_fd may import it from now on (best effort: the PD
        // works without).
        let _ = import_remote::start_serving();
        Self::publish(ctx, None)
    }

    fn publish(ctx: Arc<Context>, parent: Option<Parent>) -> Result<*mut ibv_pd> {
        let raw: CBox<ibv_pd> = CBox::zeroed();
        let handle =
            super::fresh_handle(|h| objects().pds.values().iter().any(|d| d.handle() == h));
        Self::publish_as(raw, handle, ctx, parent)
    }

    /// `ibv_import_pd`: a PD struct on `ctx` for `pd` (of a context sharing `ctx`'s objects),
    /// with `pd`'s handle. It wraps `pd` as a parent domain does, so that everything created on
    /// it is in `pd`'s domain. Both are handles of one object (`dealloc` destroys it for both).
    pub fn import(ctx: Arc<Context>, pd: Arc<Pd>) -> Result<*mut ibv_pd> {
        let handle = pd.handle();
        let parent = Parent { pd, td: None, mrs: Mutex::new(Vec::new()), imported: true };
        Self::publish_as(CBox::zeroed(), handle, ctx, Some(parent))
    }

    /// The handle the C struct carries.
    pub fn handle(&self) -> u32 {
        self.raw.read().handle
    }

    fn publish_as(
        mut raw: CBox<ibv_pd>,
        handle: u32,
        ctx: Arc<Context>,
        parent: Option<Parent>,
    ) -> Result<*mut ibv_pd> {
        let r = raw.init();
        r.context = ctx.ptr();
        r.handle = handle;
        let p = raw.as_ptr();
        objects().pds.insert(p as usize, Arc::new(Pd { raw, ctx, parent, remote: None }));
        Ok(p)
    }

    /// Our domain standing for the PD `handle` of another process (`import_remote/`): a
    /// plain PD with that handle, kept out of the registry (only its imports are handed out).
    pub fn remote_domain(ctx: Arc<Context>, handle: u32, held: Held) -> Arc<Pd> {
        let mut raw: CBox<ibv_pd> = CBox::zeroed();
        let r = raw.init();
        r.context = ctx.ptr();
        r.handle = handle;
        Arc::new(Pd { raw, ctx, parent: None, remote: Some(held) })
    }

    /// `ibv_alloc_parent_domain`: `EINVAL` without a PD, for a PD or thread domain of another
    /// context, or for an unknown `comp_mask` bit (as mlx5, the provider that has them).
    pub fn alloc_parent(ctx: Arc<Context>, a: &ibv_parent_domain_init_attr) -> Result<*mut ibv_pd> {
        if a.comp_mask & !(ALLOCATORS | PD_CONTEXT) != 0 {
            return Err(Errno::EINVAL);
        }
        let pd = objects().pds.get(a.pd)?;
        let td = if a.td.is_null() { None } else { Some(objects().tds.get(a.td)?) };
        if !Arc::ptr_eq(&pd.ctx, &ctx) || td.as_ref().is_some_and(|t| !Arc::ptr_eq(&t.ctx, &ctx)) {
            return Err(Errno::EINVAL);
        }
        Self::publish(ctx, Some(Parent { pd, td, mrs: Mutex::new(Vec::new()), imported: false }))
    }

    /// The protection domain objects created on this one belong to: itself, or the innermost
    /// PD of a parent domain.
    pub fn domain(self: &Arc<Self>) -> Arc<Pd> {
        let mut d = self;
        while let Some(p) = &d.parent {
            d = &p.pd;
        }
        d.clone()
    }

    /// Registers an MR (`register`: `Mr::register` or a sibling) in this PD's domain. On a
    /// parent domain the MR's C struct names the parent domain, as libibverbs sets `mr->pd`.
    pub fn reg_mr(
        self: &Arc<Self>,
        register: impl FnOnce(Arc<Pd>) -> Result<*mut ibv_mr>,
    ) -> Result<*mut ibv_mr> {
        let p = register(self.domain())?;
        if let Some(parent) = &self.parent {
            // SAFETY: p is the live MR just registered, not yet handed to C; Rust never reads
            // an MR's C `pd` (busy() uses the list below); a raw write of one field.
            unsafe { std::ptr::addr_of_mut!((*p).pd).write(self.raw.as_ptr()) };
            if let Ok(m) = objects().mrs.get(p) {
                let mut l = lock(&parent.mrs);
                l.retain(|w| w.strong_count() > 0);
                l.push(Arc::downgrade(&m));
            }
        }
        Ok(p)
    }

    /// `EBUSY` while MRs, QPs, SRQs, AHs or CQs still use the PD or parent domain, or a parent
    /// domain wraps it, as the kernel and mlx5 answer. A PD and its imports are handles of one
    /// object: deallocating any of them destroys it (ibv_import_pd(3): it "will go to the
    /// kernel to destroy the object"), if nothing made through any of them still uses it; the
    /// other handles are then good for `ibv_unimport_pd` only.
    pub fn dealloc(p: *mut ibv_pd) -> Result<()> {
        let pd = objects().pds.get(p)?;
        let object = match &pd.parent {
            Some(w) if w.imported => w.pd.clone(),
            _ => pd.clone(),
        };
        let imports: Vec<Arc<Pd>> =
            Self::handles_of(&object).into_iter().filter(|x| !Arc::ptr_eq(x, &object)).collect();
        if Self::in_use(&object) {
            return Err(Errno::EBUSY);
        }
        // Another process's PD is destroyed by its owner (who asks the other holders); ours
        // only if no other process holding it uses it.
        match &object.remote {
            Some(held) => import_remote::destroy(held, &object.ctx, object.handle())?,
            None if import_remote::busy_elsewhere(&object) => return Err(Errno::EBUSY),
            None => {}
        }
        // Imports first: each holds the object (ours; a domain standing for another
        // process's PD is no handle, and goes with the last import).
        let own = object.remote.is_none().then(|| object.clone());
        let others: Vec<Arc<Pd>> =
            imports.into_iter().chain(own).filter(|h| h.raw.as_ptr() != p).collect();
        drop(pd);
        objects().pds.remove(p);
        for h in &others {
            objects().pds.remove(h.raw.as_ptr());
        }
        {
            let mut destroyed = lock(&DESTROYED);
            // The owner's word that the object is gone may have put `p` there already.
            destroyed.retain(|h| h.ptr() != p);
            destroyed.extend(others.into_iter().map(Stale::of));
        }
        if object.remote.is_none() {
            import_remote::destroyed(&object);
        }
        Ok(())
    }

    /// The handles of `object` (a PD and its imports), some or all of it in other processes.
    fn handles_of(object: &Arc<Pd>) -> Vec<Arc<Pd>> {
        objects()
            .pds
            .values()
            .into_iter()
            .filter(|x| {
                Arc::ptr_eq(x, object)
                    || x.parent.as_ref().is_some_and(|w| w.imported && Arc::ptr_eq(&w.pd, object))
            })
            .collect()
    }

    /// Whether anything made through any of our handles of `object` uses it.
    pub fn in_use(object: &Arc<Pd>) -> bool {
        Self::busy(object) || Self::handles_of(object).iter().any(Self::busy)
    }

    /// `object` was destroyed elsewhere (by its owner, or with its owner): our handles of it
    /// are good for `ibv_unimport_pd` only from now on.
    pub fn forget(object: &Arc<Pd>) {
        let handles = Self::handles_of(object);
        for h in &handles {
            objects().pds.remove(h.raw.as_ptr());
        }
        let mut destroyed = lock(&DESTROYED);
        destroyed.extend(handles.into_iter().map(Stale::of));
    }

    /// `ibv_unimport_pd`: the struct goes, the object stays; a handle whose object was
    /// destroyed is released too.
    pub fn unimport(p: *mut ibv_pd) {
        objects().pds.remove(p);
        lock(&DESTROYED).retain(|h| h.ptr() != p);
    }

    fn busy(pd: &Arc<Pd>) -> bool {
        let o = objects();
        let me = pd.raw.as_ptr();
        // Objects hold their domain; their C struct names the PD or parent domain given.
        let holds = |d: &Arc<Pd>, named: *mut ibv_pd| Arc::ptr_eq(d, pd) || named == me;
        let parent_mrs = pd.parent.as_ref().is_some_and(|w| {
            let l = lock(&w.mrs);
            l.iter()
                .filter_map(Weak::upgrade)
                .any(|m| o.mrs.get(m.raw.as_ptr()).is_ok_and(|live| Arc::ptr_eq(&live, &m)))
        });
        parent_mrs
            || o.mrs.values().iter().any(|m| Arc::ptr_eq(&m.pd(), pd))
            || o.qps.values().iter().any(|q| q.pd.as_ref().is_some_and(|p| holds(p, q.public().pd)))
            || o.srqs.values().iter().any(|s| holds(&s.pd, s.raw.read().pd))
            || o.ahs.values().iter().any(|a| holds(&a.pd, a.raw.read().pd))
            || o.cqs.values().iter().any(|c| c.parent.as_ref().is_some_and(|d| Arc::ptr_eq(d, pd)))
            || o.pds
                .values()
                .iter()
                .any(|x| x.parent.as_ref().is_some_and(|w| !w.imported && Arc::ptr_eq(&w.pd, pd)))
    }
}

impl Td {
    /// `ibv_alloc_td`: `EINVAL` for a `comp_mask` (none is defined).
    pub fn alloc(ctx: Arc<Context>, a: &ibv_td_init_attr) -> Result<*mut ibv_td> {
        if a.comp_mask != 0 {
            return Err(Errno::EINVAL);
        }
        let mut raw: CBox<ibv_td> = CBox::zeroed();
        raw.init().context = ctx.ptr();
        let p = raw.as_ptr();
        objects().tds.insert(p as usize, Arc::new(Td { raw, ctx }));
        Ok(p)
    }

    /// `ibv_dealloc_td`: `EBUSY` while a parent domain holds the thread domain.
    pub fn dealloc(p: *mut ibv_td) -> Result<()> {
        let td = objects().tds.get(p)?;
        let held = objects().pds.values().iter().any(|d| {
            d.parent.as_ref().and_then(|w| w.td.as_ref()).is_some_and(|t| Arc::ptr_eq(t, &td))
        });
        if held {
            return Err(Errno::EBUSY);
        }
        objects().tds.remove(p);
        Ok(())
    }
}
