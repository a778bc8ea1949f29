//! PDs shared across processes: the owner holds a PD for each process that imported it, asks
//! them before destroying it and tells them after; a holder keeps one domain per PD.

use super::*;

// ---- the owner's side ----

/// A process holding one of our PDs: its server, and the connection it keeps open.
struct Holder {
    pd: Weak<Pd>,
    server: String,
    conn: Arc<OwnedFd>,
}

static HOLDERS: PerProcess<Mutex<Vec<Holder>>> = PerProcess::new(|| Mutex::new(Vec::new()));

pub(super) fn original_pd(ns: u64, handle: u32) -> Option<Arc<Pd>> {
    objects().pds.values().into_iter().find(|p| {
        p.ctx.ucontext == ns && p.parent.is_none() && p.remote.is_none() && p.handle() == handle
    })
}

pub(super) fn hold(pd: Arc<Pd>, server: String, conn: OwnedFd) {
    let conn = Arc::new(conn);
    let fd = conn.as_raw_fd();
    let Ok(e) = engine() else { return reply(&conn, Errno::ENOMEM.0 as u32, false) };
    lock(HOLDERS.get()).push(Holder { pd: Arc::downgrade(&pd), server, conn: conn.clone() });
    // The holder only ever hangs up on this connection (it lets go, or dies).
    let released = e.watch(fd, Arc::new(move |_| release(fd)));
    // Destroyed meanwhile (before `destroyed` could see this holder): refused, not held.
    let released = released.and_then(|()| {
        if objects().pds.contains(pd.raw.as_ptr()) {
            return Ok(());
        }
        e.unwatch(fd);
        Err(Errno::EINVAL)
    });
    match released {
        Ok(()) => reply(&conn, 0, false),
        Err(err) => {
            lock(HOLDERS.get()).retain(|h| h.conn.as_raw_fd() != fd);
            reply(&conn, err.0 as u32, false);
        }
    }
}

fn release(fd: RawFd) {
    let gone = take_where(HOLDERS.get(), |h| h.conn.as_raw_fd() == fd);
    if !gone.is_empty() {
        if let Ok(e) = engine() {
            e.unwatch(fd);
        }
    }
    // A holder that lets go of a PD (or dies) has no MR left in it for us to import.
    for h in gone {
        if let Some(pd) = h.pd.upgrade() {
            Mr::forget_imports_in(&h.server, &pd);
        }
    }
}

pub(super) fn holders_of(pd: &Arc<Pd>) -> Vec<(String, RawFd)> {
    let l = lock(HOLDERS.get());
    l.iter()
        .filter(|h| h.pd.upgrade().is_some_and(|p| Arc::ptr_eq(&p, pd)))
        .map(|h| (h.server.clone(), cmd_fd(&pd.ctx)))
        .collect()
}

/// Whether another process holding `pd` uses it (asked at `ibv_dealloc_pd`).
pub fn busy_elsewhere(pd: &Arc<Pd>) -> bool {
    let handle = pd.handle();
    holders_of(pd).iter().any(|(server, cap)| {
        matches!(call(server, BUSY_PD, handle, *cap), Ok((r, _)) if r.errno == 0 && r.busy != 0)
    })
}

/// `pd` was destroyed: every holder is told (and answers) before `ibv_dealloc_pd` returns.
pub fn destroyed(pd: &Arc<Pd>) {
    let handle = pd.handle();
    let gone = take_where(HOLDERS.get(), |h| h.pd.upgrade().is_none_or(|p| Arc::ptr_eq(&p, pd)));
    let e = engine().ok();
    for h in gone {
        if let Some(e) = e {
            e.unwatch(h.conn.as_raw_fd());
        }
        let _ = call(&h.server, DESTROYED_PD, handle, cmd_fd(&pd.ctx));
    }
}

// ---- the holder's side ----

/// Our hold on another process's PD: the connection its owner watches. Dropped with the
/// domain, which lets go of the PD.
pub struct Held {
    conn: OwnedFd,
    pub(super) owner: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(e) = engine() {
            e.unwatch(self.conn.as_raw_fd());
        }
    }
}

/// Our domains standing for other processes' PDs.
static DOMAINS: PerProcess<Mutex<Vec<Weak<Pd>>>> = PerProcess::new(|| Mutex::new(Vec::new()));
/// One import of another process's PD at a time, so two threads make one domain.
static IMPORTING: Mutex<()> = Mutex::new(());

pub(super) fn held_domain(ns: u64, handle: u32) -> Option<Arc<Pd>> {
    let mut l = lock(DOMAINS.get());
    l.retain(|w| w.strong_count() > 0);
    l.iter().filter_map(Weak::upgrade).find(|d| d.ctx.ucontext == ns && d.handle() == handle)
}

/// `ibv_import_device` of a descriptor whose namespace another process owns: `EOPNOTSUPP`
/// unless its owner answers for it, or does not serve yet (it serves from its first PD or DM
/// on, which is all there is to import).
pub fn hello(fd: RawFd) -> Result<()> {
    let owner = owner_of(fd)?;
    if owner == server_name() {
        return Err(Errno::EOPNOTSUPP); // ours, but its contexts are gone
    }
    match call(&owner, HELLO, 0, fd) {
        Ok((r, _)) if r.errno == 0 => Ok(()),
        Ok((r, _)) => Err(Errno(r.errno as i32)),
        Err(e) if e == Errno::ECONNREFUSED => Ok(()),
        Err(_) => Err(Errno::EOPNOTSUPP),
    }
}

/// `ibv_import_pd` of a PD that another process owns: a PD struct of `ctx` in our domain
/// standing for it (`EINVAL` if the owner has no such PD).
pub fn import_pd(ctx: Arc<Context>, handle: u32) -> Result<*mut crate::sys::ibv_pd> {
    let _one = lock(&IMPORTING);
    let domain = match held_domain(ctx.ucontext, handle) {
        Some(d) => d,
        None => {
            let owner = owner_of(cmd_fd(&ctx)).map_err(|_| Errno::EINVAL)?;
            if owner == server_name() {
                return Err(Errno::EINVAL);
            }
            let (r, conn) = call(&owner, HOLD_PD, handle, cmd_fd(&ctx))?;
            if r.errno != 0 {
                return Err(Errno(r.errno as i32));
            }
            let (ns, fd) = (ctx.ucontext, conn.as_raw_fd());
            let d = Pd::remote_domain(ctx.clone(), handle, Held { conn, owner });
            engine()?.watch(fd, Arc::new(move |_| owner_gone(ns, handle)))?;
            lock(DOMAINS.get()).push(Arc::downgrade(&d));
            d
        }
    };
    Pd::import(ctx, domain)
}

/// The owner destroyed the PD or died: our handles are refused from now on.
fn owner_gone(ns: u64, handle: u32) {
    let Some(d) = held_domain(ns, handle) else { return };
    let Some(h) = &d.remote else { return };
    if let Ok(e) = engine() {
        e.unwatch(h.conn.as_raw_fd());
    }
    Pd::forget(&d);
    Mr::forget_imports_in(&h.owner, &d); // it has no MR left in the PD's domain
}

/// Asks the owner to destroy the PD our domain stands for (our own handles are not in use).
pub fn destroy(held: &Held, ctx: &Context, handle: u32) -> Result<()> {
    let (r, _) = call(&held.owner, DESTROY_PD, handle, cmd_fd(ctx))?;
    match r.errno {
        0 => Ok(()),
        e => Err(Errno(e as i32)),
    }
}
