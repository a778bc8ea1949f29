//! MRs and DMs shared across processes: the exporter's answers (`EXPORT_MR`, `EXPORT_DM`),
//! the importer's requests, and an MR's end told to its importers (`DEREGED_MR`).

use super::pd::holders_of;
use super::*;
use crate::sys::ibv_dm;
use crate::verbs::dm::{DescribedDm, Dm};
use crate::verbs::mr::{Described, Reg};

/// An importer of one of our MRs: told when the registration ends.
struct Importer {
    reg: Weak<Reg>,
    server: String,
}

static IMPORTERS: PerProcess<Mutex<Vec<Importer>>> = PerProcess::new(|| Mutex::new(Vec::new()));

/// `EXPORT_MR`: the MR `key` in our PD `pd`, its pages on a file we attach.
pub(super) fn export_mr(conn: &OwnedFd, (ns, pd): (u64, u32), key: u32, from: String) {
    let found = domain_of(ns, pd).ok_or(Errno::EINVAL).and_then(|d| Mr::exportable(&d, key));
    let (mr, reg) = match found {
        Ok(m) => {
            let reg = m.reg();
            (m, reg)
        }
        Err(e) => return reply(conn, e.0 as u32, false),
    };
    // Listed before the pages move, so that a deregistration from now on tells the importer
    // (which then refuses the import if it comes after), never leaving it a dead key.
    {
        let mut l = lock(IMPORTERS.get());
        l.retain(|i| i.reg.strong_count() > 0);
        l.push(Importer { reg: Arc::downgrade(&reg), server: from.clone() });
    }
    let (file, offset) = match reg.export() {
        Ok(x) => x,
        Err(e) => {
            let mut l = lock(IMPORTERS.get());
            let mine =
                l.iter().rposition(|i| i.server == from && i.reg.ptr_eq(&Arc::downgrade(&reg)));
            if let Some(at) = mine {
                l.remove(at);
            }
            return reply(conn, e.0 as u32, false);
        }
    };
    let (fd, _, map_len) = file.file();
    let raw = mr.raw.read();
    let r = Reply {
        key,
        rkey: raw.rkey,
        access: reg.access,
        len: reg.len as u64,
        iova: reg.iova,
        offset: offset as u64,
        map_len: map_len as u64,
        ..Reply::new(0)
    };
    send_reply(conn, &r, &[fd]);
}

/// Our registration `reg` (key `key`) ended: every importer drops the key before
/// `ibv_dereg_mr` returns.
pub fn mr_gone(reg: &Arc<Reg>, key: u32) {
    // This registration's importers, and those of registrations gone since (dropped unasked).
    let gone =
        take_where(IMPORTERS.get(), |i| i.reg.upgrade().is_none_or(|r| Arc::ptr_eq(&r, reg)));
    let cap = cmd_fd(&reg.pd.ctx);
    for i in gone.iter().filter(|i| i.reg.strong_count() > 0) {
        let _ = call(&i.server, DEREGED_MR, key, cap);
    }
}

/// `ibv_import_mr` of an MR of `pd`'s that another process registered: asked of the PD's
/// owner, or, on a PD we own, of each process holding it. `EINVAL` if none has it.
pub fn import_mr(pd: Arc<Pd>, key: u32) -> Result<*mut crate::sys::ibv_mr> {
    let domain = pd.domain();
    let servers: Vec<String> = match &domain.remote {
        Some(h) => vec![h.owner.clone()],
        None => holders_of(&domain).into_iter().map(|(s, _)| s).collect(),
    };
    let mut err = Errno::EINVAL;
    for server in servers {
        let asked = call_on(&server, (EXPORT_MR, key, domain.handle()), cmd_fd(&domain.ctx));
        match asked {
            Ok((r, _, mut fds)) if r.errno == 0 && !fds.is_empty() => {
                let d = Described {
                    len: r.len as usize,
                    iova: r.iova,
                    access: r.access,
                    key: r.key,
                    rkey: r.rkey,
                    offset: r.offset as usize,
                    map_len: r.map_len as usize,
                };
                return Mr::import_from(&pd, d, fds.swap_remove(0), server);
            }
            Ok((r, _, _)) if r.errno != 0 && r.errno != Errno::EINVAL.0 as u32 => {
                err = Errno(r.errno as i32);
            }
            _ => {}
        }
    }
    Err(err)
}

/// `EXPORT_DM`: our DM `handle`, its pages on a file we attach.
pub(super) fn export_dm(conn: &OwnedFd, ns: u64, handle: u32) {
    let exported = Dm::exportable(ns, handle).and_then(|d| d.export().map(|x| (d, x)));
    let (dm, (file, offset)) = match exported {
        Ok(x) => x,
        Err(e) => return reply(conn, e.0 as u32, false),
    };
    let (fd, _, map_len) = file.file();
    let r = Reply {
        len: dm.mem_len() as u64,
        offset: offset as u64,
        map_len: map_len as u64,
        ..Reply::new(0)
    };
    send_reply(conn, &r, &[fd]);
}

/// `ibv_import_dm` of a DM of the process that owns `ctx`'s namespace (`EINVAL` if it has
/// none with `handle`, or if we are that process).
pub fn import_dm(ctx: Arc<Context>, handle: u32, fill: fn(&mut ibv_dm)) -> Result<*mut ibv_dm> {
    let owner = owner_of(cmd_fd(&ctx)).map_err(|_| Errno::EINVAL)?;
    if owner == server_name() {
        return Err(Errno::EINVAL);
    }
    let (r, _, mut fds) = call_on(&owner, (EXPORT_DM, handle, 0), cmd_fd(&ctx))?;
    if r.errno != 0 {
        return Err(Errno(r.errno as i32));
    }
    if fds.is_empty() {
        return Err(Errno(libc::EPROTO));
    }
    let d =
        DescribedDm { len: r.len as usize, offset: r.offset as usize, map_len: r.map_len as usize };
    Dm::import_from(ctx, handle, d, fds.swap_remove(0), fill)
}

/// Asks the exporter of an MR we imported to deregister it.
pub fn dereg_mr(exporter: &str, key: u32, domain: &Arc<Pd>) -> Result<()> {
    let (r, _, _) = call_on(exporter, (DEREG_MR, key, domain.handle()), cmd_fd(&domain.ctx))?;
    match r.errno {
        0 => Ok(()),
        e => Err(Errno(e as i32)),
    }
}
