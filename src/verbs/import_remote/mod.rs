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
//! * MRs and DMs (`mem.rs`): the exporter moves the pages onto a memfd and passes it
//!   (`EXPORT_MR`, `EXPORT_DM`); an MR's end is told to each importer (`DEREGED_MR`), and an
//!   importer's `ibv_dereg_mr` asks the exporter to end it (`DEREG_MR`). The PDs' side of all
//!   this is in `pd.rs`.
//!
//! A process that does not answer within [`REPLY_WITHIN`] counts as holding nothing: a
//! stopped or dying holder cannot keep the owner from destroying its own objects.

use super::device::Context;
use super::mr::Mr;
use super::objects;
use super::pd::Pd;
use crate::errno::{check, Errno, Result};
use crate::runtime::accept::Acceptor;
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::lock;
use crate::runtime::{shm, unix};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

mod mem;
mod pd;
pub use mem::{dereg_mr, import_dm, import_mr, mr_gone};
use mem::{export_dm, export_mr};
pub use pd::{busy_elsewhere, destroy, destroyed, hello, import_pd, Held};
use pd::{held_domain, hold, original_pd};

const MAGIC: u32 = 0x7273_6e73;
/// How long a request waits for its answer.
pub const REPLY_WITHIN: Duration = Duration::from_secs(2);
const NAME_MAX: usize = 64;

const HELLO: u32 = 1;
const HOLD_PD: u32 = 2;
const BUSY_PD: u32 = 3;
const DESTROY_PD: u32 = 4;
const DESTROYED_PD: u32 = 5;
const EXPORT_MR: u32 = 6;
const DEREG_MR: u32 = 7;
const DEREGED_MR: u32 = 8;
const EXPORT_DM: u32 = 9;

#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Request {
    magic: u32,
    op: u32,
    handle: u32,
    /// The PD's handle, for requests on an MR.
    pd: u32,
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
    /// `EXPORT_MR`, `EXPORT_DM`: the region (its file is attached).
    key: u32,
    rkey: u32,
    access: u32,
    len: u64,
    iova: u64,
    offset: u64,
    map_len: u64,
}

impl Reply {
    fn new(errno: u32) -> Reply {
        Reply { magic: MAGIC, errno, ..FromZeros::new_zeroed() }
    }
}

/// Takes the entries `f` picks out of the list `m` (holders, importers), keeping the rest.
fn take_where<T>(m: &Mutex<Vec<T>>, f: impl FnMut(&T) -> bool) -> Vec<T> {
    let mut l = lock(m);
    let (gone, kept) = std::mem::take(&mut *l).into_iter().partition(f);
    *l = kept;
    gone
}

/// This process's server: its name, chosen once per process (a forked child has its own), and
/// the acceptor once it serves.
struct Server {
    name: String,
    acceptor: Option<Acceptor>,
}

static SERVER: PerProcess<Mutex<Server>> = PerProcess::new(|| {
    let mut nonce: u32 = 0;
    // SAFETY: getrandom into a valid 4-byte buffer.
    unsafe { libc::getrandom((&mut nonce as *mut u32).cast(), 4, 0) };
    // The nonce keeps two processes with one pid (pid namespaces sharing a network
    // namespace) apart.
    Mutex::new(Server {
        name: format!("rdmashim-ns-{}-{nonce:08x}", std::process::id()),
        acceptor: None,
    })
});

/// The name of this process's server (it may not serve yet).
pub fn server_name() -> String {
    lock(SERVER.get()).name.clone()
}

/// Starts serving, once: at the first PD or DM (what other processes import; a program that
/// only opens a device, such as `ibv_devinfo`, starts no thread), and before we ask another
/// process anything it may ask back. A copy of us loaded into another link-map namespace (a
/// stand-in for the native library, in tests) does not serve: two C libraries in one process
/// do not bear threads started behind the application's back.
pub fn start_serving() -> Result<()> {
    if crate::provider::native::inside_another_namespace() {
        return Ok(());
    }
    let mut s = lock(SERVER.get());
    if s.acceptor.is_none() {
        let listener = Arc::new(unix::listen(&s.name)?);
        s.acceptor = Some(Acceptor::start(listener, Box::new(serve))?);
    }
    Ok(())
}

/// The content of a new context's `cmd_fd`: our server's name.
pub fn owner_token() -> Vec<u8> {
    server_name().into_bytes()
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

/// Whether two descriptors are of one file (device and inode).
fn same_file(a: RawFd, b: RawFd) -> bool {
    matches!((shm::file_id(a), shm::file_id(b)), (Ok(x), Ok(y)) if x == y)
}

fn cmd_fd(ctx: &Context) -> RawFd {
    ctx.vctx.read().context.cmd_fd
}

/// Sends `op` on `handle` to the server `to`, proving the right with `cap` (a `cmd_fd`), and
/// waits for the answer; the connection comes back with it (kept open by `HOLD_PD`).
fn call(to: &str, op: u32, handle: u32, cap: RawFd) -> Result<(Reply, OwnedFd)> {
    call_on(to, (op, handle, 0), cap).map(|(r, conn, _)| (r, conn))
}

/// [`call`] of `(op, handle, pd)`, with the descriptors the answer carries.
fn call_on(to: &str, (op, handle, pd): (u32, u32, u32), cap: RawFd) -> Result<Answer> {
    start_serving()?; // the process we ask may ask us back
    let me = server_name();
    let mut req = Request { magic: MAGIC, op, handle, pd, from_len: 0, from: [0; NAME_MAX] };
    req.from_len = me.len().min(NAME_MAX) as u32;
    req.from[..req.from_len as usize].copy_from_slice(&me.as_bytes()[..req.from_len as usize]);
    let conn = unix::connect(to)?;
    unix::send(conn.as_raw_fd(), req.as_bytes(), &[cap])?;
    let deadline = Instant::now() + REPLY_WITHIN;
    let mut buf = [0u8; 128];
    loop {
        match unix::recv(conn.as_raw_fd(), &mut buf) {
            Ok(Some((n, fds))) => {
                let r = Reply::read_from_prefix(&buf[..n]).map_err(|_| Errno(libc::EPROTO))?.0;
                if r.magic != MAGIC {
                    return Err(Errno(libc::EPROTO));
                }
                return Ok((r, conn, fds));
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

/// An answer, its connection and the descriptors it carried.
type Answer = (Reply, OwnedFd, Vec<OwnedFd>);

fn reply(conn: &OwnedFd, errno: u32, busy: bool) {
    send_reply(conn, &Reply { busy: busy as u32, ..Reply::new(errno) }, &[]);
}

fn send_reply(conn: &OwnedFd, r: &Reply, fds: &[RawFd]) {
    // A requester that went away needs no answer.
    let _ = unix::send(conn.as_raw_fd(), r.as_bytes(), fds);
}

/// Runs `f` on a thread of its own (it asks other processes, or copies a region), which
/// answers on `conn`.
fn answer_later(conn: OwnedFd, f: impl FnOnce(&OwnedFd) + Send + 'static) {
    let spawned = std::thread::Builder::new().name("rdmashim-ns".into()).spawn(move || f(&conn));
    drop(spawned);
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
        HOLD_PD => match (original_pd(ns, handle), sender(&req)) {
            (Some(pd), Some(from)) => hold(pd, from, conn),
            _ => reply(&conn, Errno::EINVAL.0 as u32, false),
        },
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
        DESTROY_PD => answer_later(conn, move |conn| {
            let r = match original_pd(ns, handle) {
                Some(pd) => Pd::dealloc(pd.raw.as_ptr()),
                None => Err(Errno::EINVAL),
            };
            reply(conn, errno_of(r), false);
        }),
        EXPORT_MR | DEREG_MR => {
            let Some(from) = sender(&req) else {
                return reply(&conn, Errno::EINVAL.0 as u32, false);
            };
            let pd = req.pd;
            match req.op {
                EXPORT_MR => {
                    answer_later(conn, move |conn| export_mr(conn, (ns, pd), handle, from))
                }
                _ => answer_later(conn, move |conn| {
                    let r = domain_of(ns, pd)
                        .ok_or(Errno::EINVAL)
                        .and_then(|d| Mr::exportable(&d, handle))
                        .and_then(|m| Mr::end_for_importer(&m));
                    reply(conn, errno_of(r), false);
                }),
            }
        }
        EXPORT_DM => answer_later(conn, move |conn| export_dm(conn, ns, handle)),
        DEREGED_MR => {
            if let Some(from) = sender(&req) {
                Mr::forget_import(&from, handle);
            }
            reply(&conn, 0, false);
        }
        _ => reply(&conn, Errno::EINVAL.0 as u32, false),
    }
}

/// The server of the process that sent `req`.
fn sender(req: &Request) -> Option<String> {
    let name = req.from.get(..req.from_len as usize)?;
    std::str::from_utf8(name).ok().map(str::to_owned)
}

/// Our PD `handle` of namespace `ns`: one we own, or our domain standing for another's.
fn domain_of(ns: u64, handle: u32) -> Option<Arc<Pd>> {
    original_pd(ns, handle).or_else(|| held_domain(ns, handle))
}
