//! Importing across processes. A context's objects live in the process that created them, its
//! *owner*; another process given a duplicate of the `cmd_fd` reaches them through the owner,
//! as a process reaches the kernel's objects through the uverbs file.
//!
//! * Every process with a context serves requests on an abstract unix socket (one per
//!   process). The owner wrote that socket's name into each `cmd_fd` it created (the memfd's
//!   only content), so whoever holds the descriptor knows whom to ask.
//! * A request proves its right by carrying a duplicate of the namespace's `cmd_fd`: the same
//!   file (device and inode) as the context's own, which only holders of the descriptor have.
//!   Connections from users we do not accept are closed before they are read (`accept.rs`).
//! * `ibv_import_device` asks the owner whether the namespace lives (`HELLO`), then opens a
//!   context of its own on the descriptor.
//! * `ibv_import_pd` asks the owner to hold the PD for us (`HOLD_PD`). The connection stays
//!   open while we keep a handle of it, so each side sees when the other lets go or dies. All
//!   our handles of that PD wrap one *domain* of ours, so what we create on any of them is in
//!   one protection domain here.
//! * Destroying follows the kernel: `ibv_dealloc_pd` on any handle destroys the object for
//!   all, unless something made through any handle, in any process, uses it (`EBUSY`). The
//!   owner asks each holder whether its domain is in use (`BUSY_PD`); once the PD is destroyed
//!   it tells each (`DESTROYED_PD`) and waits for the answer, so when `ibv_dealloc_pd` returns,
//!   every other process's handles are refused. A holder's dealloc asks the owner to destroy
//!   the PD (`DESTROY_PD`).
//! * The owner's objects die with the owner (the kernel's would live while any descriptor
//!   does): the holders see the connection hang up and refuse their handles from then on.
//!
//! A process that does not answer within [`REPLY_WITHIN`] counts as holding nothing: a
//! stopped or dying holder cannot keep the owner from destroying its own objects.

use super::device::Context;
use super::objects;
use super::pd::Pd;
use crate::errno::{check, Errno, Result};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::{shm, unix};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const MAGIC: u32 = 0x7273_6e73;
/// How long a request waits for its answer.
pub const REPLY_WITHIN: Duration = Duration::from_secs(2);
const NAME_MAX: usize = 64;

const HELLO: u32 = 1;
const HOLD_PD: u32 = 2;
const BUSY_PD: u32 = 3;
const DESTROY_PD: u32 = 4;
const DESTROYED_PD: u32 = 5;

#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Request {
    magic: u32,
    op: u32,
    handle: u32,
    from_len: u32,
    /// The requester's server, which the owner asks later (`HOLD_PD`).
    from: [u8; NAME_MAX],
}

#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Reply {
    magic: u32,
    /// 0 or an errno value.
    errno: u32,
    /// `BUSY_PD`: 1 if the domain is in use.
    busy: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Server {
    name: String,
    _acceptor: Acceptor,
}

/// This process's server (a forked child starts its own).
static SERVER: PerProcess<Mutex<Option<Arc<Server>>>> = PerProcess::new(|| Mutex::new(None));

/// The name of this process's server, started on first use.
pub fn server_name() -> Result<String> {
    let mut s = lock(SERVER.get());
    if let Some(s) = &*s {
        return Ok(s.name.clone());
    }
    let mut nonce: u32 = 0;
    // SAFETY: getrandom into a valid 4-byte buffer.
    unsafe { libc::getrandom((&mut nonce as *mut u32).cast(), 4, 0) };
    // The nonce keeps two processes with one pid (pid namespaces sharing a network
    // namespace) apart.
    let name = format!("rdmashim-ns-{}-{nonce:08x}", std::process::id());
    let listener = Arc::new(unix::listen(&name)?);
    let acceptor = Acceptor::start(listener, Box::new(serve))?;
    *s = Some(Arc::new(Server { name: name.clone(), _acceptor: acceptor }));
    Ok(name)
}

/// The content of a new context's `cmd_fd`: our server's name, or nothing if it cannot start
/// (the context works; other processes cannot import from it).
pub fn owner_token() -> Vec<u8> {
    server_name().map(String::into_bytes).unwrap_or_default()
}

/// The owner's server named in a `cmd_fd`, or `EOPNOTSUPP` if it names none.
fn owner_of(cmd_fd: RawFd) -> Result<String> {
    let mut buf = [0u8; NAME_MAX];
    // SAFETY: pread into a valid buffer of its length.
    let n = check(unsafe { libc::pread(cmd_fd, buf.as_mut_ptr().cast(), buf.len(), 0) as i32 })?;
    let name = std::str::from_utf8(&buf[..n as usize]).map_err(|_| Errno::EOPNOTSUPP)?;
    match name.starts_with("rdmashim-ns-") {
        true => Ok(name.to_owned()),
        false => Err(Errno::EOPNOTSUPP),
    }
}

/// Whether `fd` is the file of namespace `ctx` (device and inode).
fn same_file(a: RawFd, b: RawFd) -> bool {
    matches!((shm::file_id(a), shm::file_id(b)), (Ok(x), Ok(y)) if x == y)
}

fn cmd_fd(ctx: &Context) -> RawFd {
    ctx.vctx.read().context.cmd_fd
}

/// Sends `op` on `handle` to the server `to`, proving the right with `cap` (a `cmd_fd`), and
/// waits for the answer; the connection comes back with it (kept open by `HOLD_PD`).
fn call(to: &str, op: u32, handle: u32, cap: RawFd) -> Result<(Reply, OwnedFd)> {
    let me = server_name()?;
    let mut req = Request { magic: MAGIC, op, handle, from_len: 0, from: [0; NAME_MAX] };
    req.from_len = me.len().min(NAME_MAX) as u32;
    req.from[..req.from_len as usize].copy_from_slice(&me.as_bytes()[..req.from_len as usize]);
    let conn = unix::connect(to)?;
    unix::send(conn.as_raw_fd(), req.as_bytes(), &[cap])?;
    let deadline = Instant::now() + REPLY_WITHIN;
    let mut buf = [0u8; 64];
    loop {
        match unix::recv(conn.as_raw_fd(), &mut buf) {
            Ok(Some((n, _))) => {
                let r = Reply::read_from_prefix(&buf[..n]).map_err(|_| Errno(libc::EPROTO))?.0;
                if r.magic != MAGIC {
                    return Err(Errno(libc::EPROTO));
                }
                return Ok((r, conn));
            }
            Ok(None) => return Err(Errno::ECONNRESET),
            Err(e) if e == Errno::EAGAIN => {}
            Err(e) => return Err(e),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Errno::ETIMEDOUT);
        }
        let mut p = libc::pollfd { fd: conn.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as i32) };
    }
}

fn reply(conn: &OwnedFd, errno: u32, busy: bool) {
    let r = Reply { magic: MAGIC, errno, busy: busy as u32 };
    // A requester that went away needs no answer.
    let _ = unix::send(conn.as_raw_fd(), r.as_bytes(), &[]);
}

fn errno_of(r: Result<()>) -> u32 {
    r.err().map_or(0, |e| e.0 as u32)
}

/// A request on our server (on the progress thread: nothing here waits for a peer).
fn serve(conn: OwnedFd, bytes: &[u8], fds: Vec<OwnedFd>) {
    let Some(req) = Request::read_from_prefix(bytes).ok().map(|r| r.0) else { return };
    let Some(cap) = fds.first() else { return };
    if req.magic != MAGIC {
        return;
    }
    let ctx =
        objects().contexts.values().into_iter().find(|c| same_file(cmd_fd(c), cap.as_raw_fd()));
    let Some(ctx) = ctx else {
        return reply(&conn, Errno::EOPNOTSUPP.0 as u32, false);
    };
    let (ns, handle) = (ctx.ucontext, req.handle);
    match req.op {
        HELLO => reply(&conn, 0, false),
        HOLD_PD => {
            let from = std::str::from_utf8(&req.from[..(req.from_len as usize).min(NAME_MAX)]);
            match (original_pd(ns, handle), from) {
                (Some(pd), Ok(from)) => hold(pd, from.to_owned(), conn),
                _ => reply(&conn, Errno::EINVAL.0 as u32, false),
            }
        }
        BUSY_PD => {
            let busy = held_domain(ns, handle).is_some_and(|d| Pd::in_use(&d));
            reply(&conn, 0, busy);
        }
        DESTROYED_PD => {
            if let Some(d) = held_domain(ns, handle) {
                Pd::forget(&d);
            }
            reply(&conn, 0, false);
        }
        DESTROY_PD => {
            // Destroying asks the other holders, so it runs on a thread of its own.
            let spawned = std::thread::Builder::new().name("rdmashim-ns".into()).spawn(move || {
                let r = match original_pd(ns, handle) {
                    Some(pd) => Pd::dealloc(pd.raw.as_ptr()),
                    None => Err(Errno::EINVAL),
                };
                reply(&conn, errno_of(r), false);
            });
            drop(spawned);
        }
        _ => reply(&conn, Errno::EINVAL.0 as u32, false),
    }
}

// ---- the owner's side ----

/// A process holding one of our PDs: its server, and the connection it keeps open.
struct Holder {
    pd: Weak<Pd>,
    server: String,
    conn: Arc<OwnedFd>,
}

static HOLDERS: PerProcess<Mutex<Vec<Holder>>> = PerProcess::new(|| Mutex::new(Vec::new()));

fn original_pd(ns: u64, handle: u32) -> Option<Arc<Pd>> {
    objects().pds.values().into_iter().find(|p| {
        p.ctx.ucontext == ns && p.parent.is_none() && p.remote.is_none() && p.handle() == handle
    })
}

fn hold(pd: Arc<Pd>, server: String, conn: OwnedFd) {
    let conn = Arc::new(conn);
    let fd = conn.as_raw_fd();
    let Ok(e) = engine() else { return reply(&conn, Errno::ENOMEM.0 as u32, false) };
    lock(HOLDERS.get()).push(Holder { pd: Arc::downgrade(&pd), server, conn: conn.clone() });
    // The holder only ever hangs up on this connection (it lets go, or dies).
    let released = e.watch(fd, Arc::new(move |_| release(fd)));
    match released {
        Ok(()) => reply(&conn, 0, false),
        Err(err) => {
            lock(HOLDERS.get()).retain(|h| h.conn.as_raw_fd() != fd);
            reply(&conn, err.0 as u32, false);
        }
    }
}

fn release(fd: RawFd) {
    let gone: Vec<Holder> = {
        let mut l = lock(HOLDERS.get());
        let (gone, kept) =
            std::mem::take(&mut *l).into_iter().partition(|h| h.conn.as_raw_fd() == fd);
        *l = kept;
        gone
    };
    if !gone.is_empty() {
        if let Ok(e) = engine() {
            e.unwatch(fd);
        }
    }
}

fn holders_of(pd: &Arc<Pd>) -> Vec<(String, RawFd)> {
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
    let gone: Vec<Holder> = {
        let mut l = lock(HOLDERS.get());
        let (gone, kept) = std::mem::take(&mut *l)
            .into_iter()
            .partition(|h| h.pd.upgrade().is_none_or(|p| Arc::ptr_eq(&p, pd)));
        *l = kept;
        gone
    };
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
    owner: String,
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

fn held_domain(ns: u64, handle: u32) -> Option<Arc<Pd>> {
    let mut l = lock(DOMAINS.get());
    l.retain(|w| w.strong_count() > 0);
    l.iter().filter_map(Weak::upgrade).find(|d| d.ctx.ucontext == ns && d.handle() == handle)
}

/// `ibv_import_device` of a descriptor whose namespace another process owns: `EOPNOTSUPP`
/// unless its owner answers for it.
pub fn hello(fd: RawFd) -> Result<()> {
    let owner = owner_of(fd)?;
    if owner == server_name()? {
        return Err(Errno::EOPNOTSUPP); // ours, but its contexts are gone
    }
    let (r, _) = call(&owner, HELLO, 0, fd).map_err(|_| Errno::EOPNOTSUPP)?;
    match r.errno {
        0 => Ok(()),
        e => Err(Errno(e as i32)),
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
            if owner == server_name()? {
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
    if let Some(d) = held_domain(ns, handle) {
        if let Some(h) = &d.remote {
            if let Ok(e) = engine() {
                e.unwatch(h.conn.as_raw_fd());
            }
        }
        Pd::forget(&d);
    }
}

/// Asks the owner to destroy the PD our domain stands for (our own handles are not in use).
pub fn destroy(held: &Held, ctx: &Context, handle: u32) -> Result<()> {
    let (r, _) = call(&held.owner, DESTROY_PD, handle, cmd_fd(ctx))?;
    match r.errno {
        0 => Ok(()),
        e => Err(Errno(e as i32)),
    }
}
