//! DMs shared with another process (`ibv_import_dm` there; the requests are in
//! `verbs/import_remote/`): the exporter moves the DM's pages onto a memfd, the importer maps
//! it. Both then reach the same bytes, through `ibv_memcpy_to_dm`/`_from_dm` and through MRs
//! registered over the DM in either process. As for an import in one process, the memory lives
//! while any handle does: `ibv_free_dm` on one lets go of that handle's mapping only.

use super::*;
use crate::provider::SharedRegion;
use crate::runtime::lock;
use crate::runtime::shm::Shm;
use std::os::fd::OwnedFd;

/// What an exporter says about its DM: its length, and where it starts in the file, of which
/// `map_len` bytes hold pages.
pub struct DescribedDm {
    pub len: usize,
    pub offset: usize,
    pub map_len: usize,
}

impl Dm {
    /// The DM `handle` of namespace `ns` that another process may import (not freed, not an
    /// import from yet another process).
    pub fn exportable(ns: u64, handle: u32) -> Result<Arc<Dm>> {
        objects()
            .dms
            .values()
            .into_iter()
            .find(|d| {
                d.ctx.ucontext == ns
                    && !d.is_freed()
                    && d.mem.file.is_none()
                    && d.raw.read().handle == handle
            })
            .ok_or(Errno::EINVAL)
    }

    /// The file another process maps to reach this DM, and where the DM starts in it. The
    /// direct path's files over its pages (MRs over the DM with remote rights) give way first:
    /// the DM's pages move to one file; those MRs keep the copy path.
    pub fn export(&self) -> Result<(Arc<dyn SharedRegion>, usize)> {
        let mem = &self.mem;
        let mut e = lock(&mem.exported);
        let s = match &*e {
            Some(s) => s.clone(),
            None => {
                for m in objects().mrs.values() {
                    let reg = m.reg();
                    if reg.holds(mem) {
                        reg.revoke();
                    }
                }
                let s = self.ctx.provider.export_memory(mem.addr, mem.len, 0)?;
                *e = Some(s.clone());
                s
            }
        };
        let (_, base, len) = s.file();
        match base <= mem.addr && mem.addr + mem.len <= base + len {
            true => Ok((s.clone(), mem.addr - base)),
            false => Err(Errno::EOPNOTSUPP),
        }
    }

    /// `ibv_import_dm` of another process's DM `handle`: its file `fd` mapped here, as a DM of
    /// `ctx` (`fill` installs the C struct's copy functions).
    pub fn import_from(
        ctx: Arc<Context>,
        handle: u32,
        d: DescribedDm,
        fd: OwnedFd,
        fill: fn(&mut ibv_dm),
    ) -> Result<*mut ibv_dm> {
        // Every number comes from another process: checked before use.
        let end = d.offset.checked_add(d.len).ok_or(Errno::EINVAL)?;
        if d.len == 0 || d.len > MAX_DM_SIZE || end > d.map_len {
            return Err(Errno::EINVAL);
        }
        let file = Shm::map(fd, d.map_len)?;
        let addr = file.ptr() as usize + d.offset;
        let mem = DmMem {
            map: 0,
            map_len: 0,
            addr,
            len: d.len,
            reserved: 0,
            file: Some(file),
            exported: Mutex::default(),
        };
        let mut raw: CBox<ibv_dm> = CBox::zeroed();
        let r = raw.init();
        r.context = ctx.ptr();
        r.handle = handle;
        r.comp_mask = MASK_HANDLE;
        fill(r);
        let p = raw.as_ptr();
        let dm = Dm { raw, ctx, mem: Arc::new(mem), freed: Mutex::new(false) };
        objects().dms.insert(p as usize, Arc::new(dm));
        Ok(p)
    }
}
