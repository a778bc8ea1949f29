//! MRs shared with another process (`ibv_import_mr` there; the requests are in
//! `verbs/import_remote/`). The exporter puts the region's pages on a memfd, which
//! the importer maps; the importer enters the exporter's key in its own key table, addressing
//! the mapping from the exporter's iova, so its SGEs and its peers' rkeys name the region as
//! the exporter's do. Both processes then reach the same pages.
//!
//! Destroying is the kernel's rule: `ibv_dereg_mr` on any handle ends the registration for all.
//! The exporter's revokes its file (its pages go back to private memory) and tells each
//! importer, which drops the key before the call returns; an importer's asks the exporter to
//! deregister. `ibv_unimport_mr` drops our struct, and the key with the last one.

use super::*;
use crate::runtime::shm::Shm;
use crate::runtime::{lock, read_lock, write_lock};
use std::os::fd::OwnedFd;

/// An MR of another process, imported here.
pub struct ImportedMem {
    /// The exporter's pages, mapped here (unmapped with the last reference to the `Reg`).
    _map: Shm,
    /// The exporter's server, and the MR's key there.
    pub exporter: String,
    pub key: u32,
}

/// What an exporter says about its region.
pub struct Described {
    pub len: usize,
    pub iova: u64,
    pub access: u32,
    pub key: u32,
    pub rkey: u32,
    /// Where the region starts in the file, and how much of the file holds pages.
    pub offset: usize,
    pub map_len: usize,
}

impl Reg {
    /// The file another process maps to reach this region, and where the region starts in it:
    /// the direct path's file if it holds the whole region, else a new file of its pages.
    /// `EOPNOTSUPP` for a region that does not start and end on page boundaries (unless the
    /// direct path's file holds it) or is not plain memory of ours; `EINVAL` once deregistered.
    pub fn export(&self) -> Result<(Arc<dyn SharedRegion>, usize)> {
        let plain = self.null.is_none() && self.window.is_none() && self.dm.is_none();
        if !plain || self.import.is_some() || self.len == 0 || self.access & ACCESS_ON_DEMAND != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let within = |s: &Arc<dyn SharedRegion>| {
            let (_, base, len) = s.file();
            (base <= self.addr && self.addr + self.len <= base + len)
                .then(|| (s.clone(), self.addr - base))
        };
        let mut e = self.export_lock();
        match &*e {
            Export::To(s) => return within(s).ok_or(Errno::EOPNOTSUPP),
            Export::Retired => return Err(Errno::EINVAL),
            Export::None => {}
        }
        if let Some(found) = self.share.as_ref().and_then(within) {
            *e = Export::To(found.0.clone());
            return Ok(found);
        }
        // Only whole pages: the bytes that share a page with the region are the program's, and
        // moving them would copy what a checker (AddressSanitizer) rightly calls out of bounds.
        if !(super::super::pages::is_page_aligned(self.addr)
            && super::super::pages::is_page_aligned(self.addr + self.len))
        {
            return Err(Errno::EOPNOTSUPP);
        }
        if let Some(s) = &self.share {
            s.revoke(); // its pages move again, with the rest
        }
        let s = self.pd.ctx.provider.export_memory(self.addr, self.len, self.access)?;
        let found = within(&s).ok_or(Errno::EOPNOTSUPP)?;
        *e = Export::To(s);
        Ok(found)
    }
}

impl Mr {
    /// Another process's `ibv_dereg_mr` of its import of `mr`: the registration ends here as
    /// by ours, and our struct stays the application's, for `ibv_dereg_mr`.
    pub fn end_for_importer(mr: &Arc<Mr>) -> Result<()> {
        Self::end(mr.raw.as_ptr(), mr, true)
    }

    /// The MR `key` registered in `domain` (not an import), for another process to import.
    pub fn exportable(domain: &Arc<Pd>, key: u32) -> Result<Arc<Mr>> {
        objects()
            .mrs
            .values()
            .into_iter()
            .find(|m| {
                let reg = m.reg();
                m.key == key && reg.import.is_none() && Arc::ptr_eq(&reg.pd, domain)
            })
            .ok_or(Errno::EINVAL)
    }

    /// `ibv_import_mr` of another process's MR on `pd`: its file `fd` mapped here, the key
    /// entered in our table (shared with earlier imports of the same MR). `ENOMEM` in the
    /// unlikely case that one of our own keys is the same number.
    pub fn import_from(
        pd: &Arc<Pd>,
        d: Described,
        fd: OwnedFd,
        exporter: String,
    ) -> Result<*mut ibv_mr> {
        // Every number comes from another process: checked before use.
        let end = d.offset.checked_add(d.len).ok_or(Errno::EINVAL)?;
        if end > d.map_len || d.len == 0 {
            return Err(Errno::EINVAL);
        }
        let map = Shm::map(fd, d.map_len)?;
        let addr = map.ptr() as usize + d.offset;
        let access = d.access & ACCESS_KNOWN;
        let import = Some(ImportedMem { _map: map, exporter, key: d.key });
        let fresh = Reg {
            exported: Mutex::new(Export::Retired), // never exported again from here
            import,
            ..Reg::plain(pd.domain(), (addr, d.len, d.iova, access))
        };
        let reg = {
            let mut keys = write_lock(KEYS.get());
            let mut ended = lock(&ENDED);
            if let Some(at) =
                ended.iter().position(|(e, k)| *k == d.key && *e == exporter_of(&fresh))
            {
                ended.remove(at);
                return Err(Errno::EINVAL); // deregistered while we were importing it
            }
            drop(ended);
            match keys.get(&d.key) {
                Some(r) if same_import(r, &fresh) => r.clone(),
                Some(_) => return Err(Errno::ENOMEM),
                None => {
                    let reg = Arc::new(fresh);
                    count(&reg, true);
                    keys.insert(d.key, reg.clone());
                    reg
                }
            }
        };
        let mut raw: CBox<ibv_mr> = CBox::zeroed();
        let r = raw.init();
        r.context = pd.ctx.ptr();
        r.pd = pd.raw.as_ptr();
        r.addr = std::ptr::null_mut(); // "not applicable" for an import, as the page says
        r.length = d.len;
        r.handle = d.key;
        r.lkey = d.key;
        r.rkey = d.rkey;
        let p = raw.as_ptr();
        let mr =
            Arc::new(Mr { raw, key: d.key, reg: RwLock::new(reg), windows: AtomicUsize::new(0) });
        objects().mrs.insert(p as usize, mr);
        Ok(p)
    }

    /// `ibv_unimport_mr`: the struct goes; an import of another process's MR takes its key
    /// with it when no other struct of ours holds it.
    pub fn unimport(p: *mut ibv_mr) {
        let Some(mr) = objects().mrs.remove(p) else { return };
        let reg = mr.reg();
        if reg.import.is_none() {
            return;
        }
        let others = objects().mrs.values().into_iter().any(|m| Arc::ptr_eq(&m.reg(), &reg));
        if !others {
            drop_key(&reg);
        }
    }

    /// The exporter ended its registration `key`: our imports of it are good for
    /// `ibv_unimport_mr` (or a failing `ibv_dereg_mr`) only from now on.
    pub fn forget_import(exporter: &str, key: u32) {
        {
            // Under the table's lock, as `import_from` checks: an import under way (its key not
            // in the table yet) finds the word and fails.
            let keys = write_lock(KEYS.get());
            let held =
                keys.values().any(|r| r.import.as_ref().is_some_and(|i| i.is(exporter, key)));
            if !held {
                let mut ended = lock(&ENDED);
                if ended.len() == ENDED_MAX {
                    ended.remove(0);
                }
                ended.push((exporter.to_owned(), key));
            }
        }
        forget_where(|i, _| i.is(exporter, key));
    }

    /// `exporter` let go of the PD `domain` stands for, or is gone: it has no registration in
    /// that domain any more (a PD is not released while an MR of the holder's uses it), so
    /// neither do our imports from it.
    pub fn forget_imports_in(exporter: &str, domain: &Arc<Pd>) {
        forget_where(|i, reg| i.exporter == exporter && Arc::ptr_eq(&reg.pd, domain));
    }
}

/// Drops the keys of our imports that `f` picks.
fn forget_where(f: impl Fn(&ImportedMem, &Reg) -> bool) {
    let gone: Vec<Arc<Reg>> = {
        let keys = read_lock(KEYS.get());
        keys.values().filter(|r| r.import.as_ref().is_some_and(|i| f(i, r))).cloned().collect()
    };
    for reg in gone {
        drop_key(&reg);
    }
}

/// Registrations that ended while no import of ours held their key: an import that was under
/// way when its exporter said so must not enter the key afterwards. The last few only (an
/// import is under way for one request's time; keys are random and not soon reused).
static ENDED: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());
const ENDED_MAX: usize = 64;

fn exporter_of(reg: &Reg) -> &str {
    reg.import.as_ref().map_or("", |i| i.exporter.as_str())
}

impl ImportedMem {
    fn is(&self, exporter: &str, key: u32) -> bool {
        self.exporter == exporter && self.key == key
    }
}

/// Whether two registrations are imports of one MR of one exporter.
fn same_import(a: &Reg, b: &Reg) -> bool {
    match (&a.import, &b.import) {
        (Some(x), Some(y)) => x.exporter == y.exporter && x.key == y.key,
        _ => false,
    }
}

/// Takes an import's key out of our table, if it is still there for this registration, and
/// waits for the accesses under way.
fn drop_key(reg: &Arc<Reg>) {
    let Some(im) = &reg.import else { return };
    let removed = {
        let mut keys = write_lock(KEYS.get());
        match keys.get(&im.key) {
            Some(r) if Arc::ptr_eq(r, reg) => keys.remove(&im.key).is_some(),
            _ => false,
        }
    };
    if removed {
        count(reg, false);
        reg.retire();
    }
}

/// `ibv_dereg_mr` of an import of another process's MR: the exporter deregisters it (and
/// tells us, so our key is gone when it answers); then our struct goes. An exporter that is
/// gone took its registration with it: our key goes, and the call fails with `EINVAL`.
pub(super) fn deregister(p: *mut ibv_mr, mr: &Arc<Mr>, im: &ImportedMem) -> Result<()> {
    let reg = mr.reg();
    let r = super::super::import_remote::dereg_mr(&im.exporter, im.key, &reg.pd);
    match r {
        Ok(()) => {
            drop_key(&reg);
            objects().mrs.remove(p);
            Ok(())
        }
        Err(e) if e == Errno::ECONNREFUSED || e == Errno::ECONNRESET => {
            drop_key(&reg);
            Err(Errno::EINVAL)
        }
        Err(e) => Err(e),
    }
}
