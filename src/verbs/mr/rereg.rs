//! `ibv_rereg_mr`: a new registration for an MR, keeping its keys.

use super::*;
use crate::runtime::write_lock;

const REREG_TRANSLATION: i32 = ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_TRANSLATION.0 as i32;
const REREG_PD: i32 = ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_PD.0 as i32;
const REREG_ACCESS: i32 = ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_ACCESS.0 as i32;
const REREG_SUPPORTED: i32 = ibv_rereg_mr_flags::IBV_REREG_MR_FLAGS_SUPPORTED.0 as i32;

impl Mr {
    /// `ibv_rereg_mr`: `Err` is an input error (the MR is unchanged: IBV_REREG_MR_ERR_INPUT),
    /// `Ok(Err)` a failure of the registration itself (IBV_REREG_MR_ERR_CMD; here too the old
    /// registration stays, which the man page allows). On success the keys stay the same, the
    /// old range is out of every peer's reach and `mr` describes the new registration.
    pub fn reregister(
        p: *mut ibv_mr,
        flags: i32,
        pd: *mut ibv_pd,
        addr: *mut libc::c_void,
        len: usize,
        access: i32,
    ) -> Result<Result<()>> {
        let mr = objects().mrs.get(p)?;
        if flags == 0 || flags & !REREG_SUPPORTED != 0 {
            return Err(Errno::EINVAL);
        }
        if flags & REREG_TRANSLATION != 0 && (addr.is_null() || len == 0) {
            return Err(Errno::EINVAL);
        }
        // A parent domain stands for its innermost PD, as at registration (`Pd::reg_mr`).
        let pd = if flags & REREG_PD != 0 { Some(objects().pds.get(pd)?.domain()) } else { None };
        let mut cur = write_lock(&mr.reg);
        if mr.windows.load(Ordering::Acquire) > 0 {
            return Ok(Err(Errno::EBUSY)); // a window is bound to the region
        }
        if cur.null.is_some() {
            return Err(Errno::EINVAL); // "the use of ibv_rereg_mr() with this MR is invalid"
        }
        if cur.dm.is_some() {
            return Err(Errno::EINVAL); // the kernel refuses to reregister a DM MR
        }
        if cur.import.is_some() || matches!(*cur.export_lock(), Export::To(_)) {
            return Err(Errno::EOPNOTSUPP); // shared with another process (remote.rs)
        }
        let new_pd = match pd {
            None => cur.pd.clone(),
            Some(pd) if Arc::ptr_eq(&pd.ctx, &cur.pd.ctx) => pd,
            Some(_) => return Err(Errno::EINVAL),
        };
        let (new_addr, new_len, new_iova) = if flags & REREG_TRANSLATION != 0 {
            (addr, len, addr as u64) // the kernel's rereg takes the address as the iova
        } else {
            (cur.addr as *mut libc::c_void, cur.len, cur.iova)
        };
        let new_access = if flags & REREG_ACCESS != 0 { access } else { cur.access as i32 };
        // Peers lose the old range before the new one is prepared (its pages may be the same).
        cur.revoke();
        let reg = match Reg::new(new_pd, new_addr, new_len, new_iova, new_access) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                // The old registration stays for the copy path (its share is revoked).
                return Ok(Err(e));
            }
        };
        {
            let mut keys = write_lock(KEYS.get());
            if !keys.contains_key(&mr.key) {
                drop(keys);
                reg.revoke(); // deregistered meanwhile: the key stays gone
                return Err(Errno::EINVAL);
            }
            count(&cur, false);
            count(&reg, true);
            keys.insert(mr.key, reg.clone());
        }
        // The old range is out of every peer's reach before the call returns.
        cur.retire();
        let raw = mr.raw.as_ptr();
        // SAFETY: raw is the live MR's struct, ours; single-field raw-pointer writes under the
        // MR's registration lock (CBox's rule), as libibverbs writes them after a rereg.
        unsafe {
            (*raw).pd = reg.pd.raw.as_ptr();
            (*raw).addr = new_addr;
            (*raw).length = new_len;
        }
        *cur = reg;
        Ok(Ok(()))
    }
}
