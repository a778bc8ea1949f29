//! libibverbs' helpers beside the verbs themselves (`infiniband/verbs.h`): fork control, sysfs
//! access, the enum-to-string and rate conversions, driver registration, and the calls the soft
//! provider does not offer (with the errno each gives).

use crate::abi::{Infallible, Nothing, NullOr, PositiveErrno, Value};
use crate::errno::Errno;
use crate::provider::native;
use crate::sys::*;
use crate::{entry, unimplemented_entry};
use libc::{c_char, c_int, c_uint, c_void};
use std::ffi::CStr;

/// A C string per value, or `default`.
macro_rules! cstr_table {
    ($v:expr, $default:expr, { $($k:pat => $s:expr),* $(,)? }) => {
        match $v { $($k => $s.as_ptr(),)* _ => $default.as_ptr() }
    };
}

entry! {
    // The soft provider pins nothing, so fork needs no preparation; with `both` the native
    // library's devices do, and it answers.
    fn ibv_fork_init() -> Value<c_int> {
        Ok(native::fork_init().unwrap_or(0))
    }

    fn ibv_is_fork_initialized() -> Infallible<c_uint> {
        Ok(native::fork_status().unwrap_or(2)) // IBV_FORK_UNNEEDED
    }

    fn ibv_dontfork_range(base: *mut c_void, size: usize) -> Value<c_int> {
        Ok(native::fork_range(true, base as usize, size).unwrap_or(0))
    }

    fn ibv_dofork_range(base: *mut c_void, size: usize) -> Value<c_int> {
        Ok(native::fork_range(false, base as usize, size).unwrap_or(0))
    }

    fn ibv_get_sysfs_path() -> NullOr<c_char> {
        Ok(c"/sys".as_ptr() as *mut c_char)
    }

    fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> Value<c_int> {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: dir and file are NUL-terminated strings per the API.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let data = std::fs::read(path).map_err(Errno::from)?;
        let n = data.len().min(size - 1);
        // SAFETY: buf holds size bytes; we write n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
            if n > 0 && *buf.add(n - 1) == b'\n' as c_char {
                *buf.add(n - 1) = 0;
            }
        }
        Ok(n as c_int)
    }

    fn ibv_wc_status_str(status: c_uint) -> Infallible<*const c_char> {
        use ibv_wc_status::*;
        Ok(cstr_table!(status, c"unknown", {
            IBV_WC_SUCCESS => c"success",
            IBV_WC_LOC_LEN_ERR => c"local length error",
            IBV_WC_LOC_QP_OP_ERR => c"local QP operation error",
            IBV_WC_LOC_EEC_OP_ERR => c"local EE context operation error",
            IBV_WC_LOC_PROT_ERR => c"local protection error",
            IBV_WC_WR_FLUSH_ERR => c"Work Request Flushed Error",
            IBV_WC_MW_BIND_ERR => c"memory management operation error",
            IBV_WC_BAD_RESP_ERR => c"bad response error",
            IBV_WC_LOC_ACCESS_ERR => c"local access error",
            IBV_WC_REM_INV_REQ_ERR => c"remote invalid request error",
            IBV_WC_REM_ACCESS_ERR => c"remote access error",
            IBV_WC_REM_OP_ERR => c"remote operation error",
            IBV_WC_RETRY_EXC_ERR => c"transport retry counter exceeded",
            IBV_WC_RNR_RETRY_EXC_ERR => c"RNR retry counter exceeded",
            IBV_WC_LOC_RDD_VIOL_ERR => c"local RDD violation error",
            IBV_WC_REM_INV_RD_REQ_ERR => c"remote invalid RD request",
            IBV_WC_REM_ABORT_ERR => c"aborted error",
            IBV_WC_INV_EECN_ERR => c"invalid EE context number",
            IBV_WC_INV_EEC_STATE_ERR => c"invalid EE context state",
            IBV_WC_FATAL_ERR => c"fatal error",
            IBV_WC_RESP_TIMEOUT_ERR => c"response timeout error",
            IBV_WC_GENERAL_ERR => c"general error",
            IBV_WC_TM_ERR => c"TM error",
            IBV_WC_TM_RNDV_INCOMPLETE => c"TM software rendezvous",
        }))
    }

    fn ibv_node_type_str(node_type: c_int) -> Infallible<*const c_char> {
        Ok(cstr_table!(node_type, c"unknown", {
            1 => c"InfiniBand channel adapter",
            2 => c"InfiniBand switch",
            3 => c"InfiniBand router",
            4 => c"iWARP NIC",
            5 => c"usNIC",
            6 => c"usNIC UDP",
            7 => c"unspecified",
        }))
    }

    fn ibv_port_state_str(state: c_uint) -> Infallible<*const c_char> {
        Ok(cstr_table!(state, c"unknown", {
            0 => c"no state change (NOP)",
            1 => c"down",
            2 => c"init",
            3 => c"armed",
            4 => c"active",
            5 => c"active defer",
        }))
    }

    fn ibv_event_type_str(event: c_uint) -> Infallible<*const c_char> {
        Ok(cstr_table!(event, c"unknown", {
            0 => c"CQ error",
            1 => c"local work queue catastrophic error",
            2 => c"invalid request local work queue error",
            3 => c"local access violation work queue error",
            4 => c"communication established",
            5 => c"send queue drained",
            6 => c"path migrated",
            7 => c"path migration request error",
            8 => c"local catastrophic error",
            9 => c"port active",
            10 => c"port error",
            11 => c"LID change",
            12 => c"P_Key change",
            13 => c"SM change",
            14 => c"SRQ catastrophic error",
            15 => c"SRQ limit reached",
            16 => c"last WQE reached",
            17 => c"client reregistration",
            18 => c"GID table change",
            19 => c"WQ fatal",
        }))
    }

    // The values are rdma-core 44's (enum ibv_rate is not in rate order: IBV_RATE_5_GBPS = 5
    // comes after IBV_RATE_30_GBPS = 4); the conformance pages ibv_rate_to_mult(3) and
    // ibv_rate_to_mbps(3) check every one of them.
    fn ibv_rate_to_mult(rate: c_uint) -> Infallible<c_int> {
        Ok(match rate {
            2 => 1, 5 => 2, 3 => 4, 6 => 8, 4 => 12, 7 => 16, 8 => 24, 9 => 32, 10 => 48,
            19 => 11, 20 => 20, 21 => 160, 22 => 240, 23 => 320, 24 => 480,
            _ => -1,
        })
    }

    fn mult_to_ibv_rate(mult: c_int) -> Infallible<c_uint> {
        Ok(match mult {
            1 => 2, 2 => 5, 4 => 3, 8 => 6, 12 => 4, 16 => 7, 24 => 8, 32 => 9, 48 => 10,
            11 => 19, 20 => 20, 160 => 21, 240 => 22, 320 => 23, 480 => 24,
            _ => 0,
        })
    }

    fn ibv_rate_to_mbps(rate: c_uint) -> Infallible<c_int> {
        Ok(match rate {
            2 => 2500, 5 => 5000, 3 => 10000, 6 => 20000, 4 => 30000, 7 => 40000, 8 => 60000,
            9 => 80000, 10 => 120000, 11 => 14062, 12 => 56250, 13 => 112500, 14 => 168750,
            15 => 25781, 16 => 103125, 17 => 206250, 18 => 309375, 19 => 28125, 20 => 53125,
            21 => 425000, 22 => 637500, 23 => 850000, 24 => 1275000,
            _ => -1,
        })
    }

    fn mbps_to_ibv_rate(mbps: c_int) -> Infallible<c_uint> {
        Ok(match mbps {
            2500 => 2, 5000 => 5, 10000 => 3, 20000 => 6, 30000 => 4, 40000 => 7, 60000 => 8,
            80000 => 9, 120000 => 10, 14062 => 11, 56250 => 12, 112500 => 13, 168750 => 14,
            25781 => 15, 103125 => 16, 206250 => 17, 309375 => 18, 28125 => 19, 53125 => 20,
            425000 => 21, 637500 => 22, 850000 => 23, 1275000 => 24,
            _ => 0,
        })
    }

    fn ibv_register_driver(name: *const c_char, init: *mut c_void) -> Nothing {
        // Providers are built in; a legacy driver registering itself is ignored.
        let _ = (name, init);
        Ok(())
    }
}

// Owned by later work: see docs/CONFORMANCE.md.
unimplemented_entry! { Errno::EOPNOTSUPP =>
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> NullOr<ibv_mr>;
    fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> PositiveErrno;
}

// Kernel-ABI conversion helpers of the uverbs command interface, which the soft provider does not
// use: they do nothing and set errno.
unimplemented_entry! { Errno::ENOSYS =>
    fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut c_void) -> Nothing;
    fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut c_void) -> Nothing;
    fn ibv_copy_path_rec_from_kern(dst: *mut c_void, src: *mut c_void) -> Nothing;
    fn ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *mut c_void) -> Nothing;
}
