//! The QP state machine as the verbs man pages and IBA 11.2.4.2 give it: the transitions each
//! QP type allows, the attribute masks each requires and accepts, the checks on the attributes,
//! and what a modify records. Pure functions of the attributes; `qp.rs` applies them.

use super::device;
use crate::errno::{Errno, Result};
use crate::provider::{QpAttrs, QpState};
use crate::sys::*;

use ibv_qp_state::*;

pub fn to_ibv_state(s: QpState) -> u32 {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

pub(super) fn from_ibv_state(s: u32) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

/// What the transport uses of the attribute record.
pub(super) fn transport_attrs(a: &ibv_qp_attr) -> QpAttrs {
    let av = &a.ah_attr;
    let (sgid, dgid) = if av.is_global != 0 {
        let table = device::gids();
        let sgid = table.get(av.grh.sgid_index as usize).unwrap_or([0; 16]);
        // SAFETY: ibv_gid is a union of byte views; raw is always valid.
        (sgid, unsafe { av.grh.dgid.raw })
    } else {
        ([0; 16], [0; 16])
    };
    QpAttrs {
        qkey: a.qkey,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        min_rnr_timer: a.min_rnr_timer,
        rnr_retry: a.rnr_retry,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        sq_psn: a.sq_psn & 0x00ff_ffff,
        rq_psn: a.rq_psn & 0x00ff_ffff,
        // IBV_MTU_256..=IBV_MTU_4096 are consecutive: 256 << n bytes; anything else is unset.
        path_mtu: if (ibv_mtu::IBV_MTU_256..=ibv_mtu::IBV_MTU_4096).contains(&a.path_mtu) {
            256 << (a.path_mtu - ibv_mtu::IBV_MTU_256)
        } else {
            0
        },
        has_grh: av.is_global != 0,
        sgid,
        dgid,
    }
}

pub(super) const M_STATE: u32 = ibv_qp_attr_mask::IBV_QP_STATE.0;
pub(super) const M_CUR_STATE: u32 = ibv_qp_attr_mask::IBV_QP_CUR_STATE.0;
pub(super) const M_EN_SQD: u32 = ibv_qp_attr_mask::IBV_QP_EN_SQD_ASYNC_NOTIFY.0;
pub(super) const M_ACCESS: u32 = ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
pub(super) const M_PKEY: u32 = ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0;
pub(super) const M_PORT: u32 = ibv_qp_attr_mask::IBV_QP_PORT.0;
pub(super) const M_QKEY: u32 = ibv_qp_attr_mask::IBV_QP_QKEY.0;
pub(super) const M_AV: u32 = ibv_qp_attr_mask::IBV_QP_AV.0;
pub(super) const M_PATH_MTU: u32 = ibv_qp_attr_mask::IBV_QP_PATH_MTU.0;
pub(super) const M_TIMEOUT: u32 = ibv_qp_attr_mask::IBV_QP_TIMEOUT.0;
pub(super) const M_RETRY: u32 = ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0;
pub(super) const M_RNR_RETRY: u32 = ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0;
pub(super) const M_RQ_PSN: u32 = ibv_qp_attr_mask::IBV_QP_RQ_PSN.0;
pub(super) const M_MAX_QP_RD: u32 = ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
pub(super) const M_ALT_PATH: u32 = ibv_qp_attr_mask::IBV_QP_ALT_PATH.0;
pub(super) const M_MIN_RNR: u32 = ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
pub(super) const M_SQ_PSN: u32 = ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
pub(super) const M_MAX_DEST_RD: u32 = ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0;
pub(super) const M_MIG: u32 = ibv_qp_attr_mask::IBV_QP_PATH_MIG_STATE.0;
pub(super) const M_CAP: u32 = ibv_qp_attr_mask::IBV_QP_CAP.0;
pub(super) const M_DEST_QPN: u32 = ibv_qp_attr_mask::IBV_QP_DEST_QPN.0;

/// Required and optional attribute masks of an RC transition (IBA 11.2.4.2), `None` if the
/// transition does not exist.
pub(super) fn rc_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    Some(match (from, to) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (M_PKEY | M_PORT | M_ACCESS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, M_PKEY | M_PORT | M_ACCESS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN | M_MAX_DEST_RD | M_MIN_RNR,
            M_ALT_PATH | M_ACCESS | M_PKEY,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (
            M_TIMEOUT | M_RETRY | M_RNR_RETRY | M_SQ_PSN | M_MAX_QP_RD,
            M_CUR_STATE | M_ALT_PATH | M_ACCESS | M_MIN_RNR | M_MIG,
        ),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (0, M_CUR_STATE | M_ACCESS | M_ALT_PATH | M_MIG | M_MIN_RNR),
        _ => return None,
    })
}

/// The same for XRC initiators (`ini`) and targets: RC's, where an initiator needs nothing of
/// what a responder does at RTR and a target nothing of what a requester does at RTS (rdma-core's
/// and the kernel's `qp_state_table`).
pub(super) fn xrc_transition(from: u32, to: u32, ini: bool) -> Option<(u32, u32)> {
    let resp = M_MAX_DEST_RD | M_MIN_RNR;
    let req = M_RETRY | M_RNR_RETRY | M_MAX_QP_RD;
    let (r, o) = rc_transition(from, to)?;
    Some(match (from, to) {
        (IBV_QPS_INIT, IBV_QPS_RTR) if ini => (r & !resp, o | resp),
        (IBV_QPS_RTR, IBV_QPS_RTS) if !ini => (r & !req, o | req),
        _ => (r, o),
    })
}

pub(super) fn xrc_ini_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    xrc_transition(from, to, true)
}

pub(super) fn xrc_tgt_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    xrc_transition(from, to, false)
}

/// The same for UC QPs: RC's, without what acknowledgements need (IBA 11.2.4.2; rdma-core's
/// `qp_state_table`): no RNR timer, no READ/atomic depth, no timeout or retries.
pub(super) fn uc_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    Some(match (from, to) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (M_PKEY | M_PORT | M_ACCESS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, M_PKEY | M_PORT | M_ACCESS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => {
            (M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN, M_ALT_PATH | M_ACCESS | M_PKEY)
        }
        (IBV_QPS_RTR, IBV_QPS_RTS) => (M_SQ_PSN, M_CUR_STATE | M_ALT_PATH | M_ACCESS | M_MIG),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (0, M_CUR_STATE | M_ACCESS | M_ALT_PATH | M_MIG),
        _ => return None,
    })
}

/// The same for UD QPs.
pub(super) fn ud_transition(from: u32, to: u32) -> Option<(u32, u32)> {
    Some(match (from, to) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (M_PKEY | M_PORT | M_QKEY, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, M_PKEY | M_PORT | M_QKEY),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (0, M_PKEY | M_QKEY),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (M_SQ_PSN, M_CUR_STATE | M_QKEY),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (0, M_CUR_STATE | M_QKEY),
        _ => return None,
    })
}

/// The target state of a modify, or `EINVAL` if the transition or the attributes are invalid.
pub(super) fn check_modify(
    table: fn(u32, u32) -> Option<(u32, u32)>,
    cur: u32,
    attr: &ibv_qp_attr,
    mask: u32,
) -> Result<u32> {
    if mask & M_CUR_STATE != 0 && attr.cur_qp_state != cur {
        return Err(Errno::EINVAL);
    }
    let to = if mask & M_STATE != 0 { attr.qp_state } else { cur };
    let (req, opt) = table(cur, to).ok_or(Errno::EINVAL)?;
    let given = mask & !M_STATE;
    if given & req != req || given & !(req | opt | M_CUR_STATE) != 0 {
        return Err(Errno::EINVAL);
    }
    if mask & M_PORT != 0 && attr.port_num != device::PORT {
        return Err(Errno::EINVAL);
    }
    // The port is RoCE (IBV_QPF_GRH_REQUIRED): an address vector needs a GRH.
    if mask & M_AV != 0 && attr.ah_attr.is_global == 0 {
        return Err(Errno::EINVAL);
    }
    // No alternate paths (IBV_DEVICE_AUTO_PATH_MIG is not advertised).
    if mask & M_ALT_PATH != 0 {
        return Err(Errno::EINVAL);
    }
    if mask & M_PKEY != 0 && attr.pkey_index != 0 {
        return Err(Errno::EINVAL);
    }
    if mask & M_PATH_MTU != 0
        && !(ibv_mtu::IBV_MTU_256..=ibv_mtu::IBV_MTU_4096).contains(&attr.path_mtu)
    {
        return Err(Errno::EINVAL);
    }
    if mask & M_DEST_QPN != 0 && attr.dest_qp_num > 0x00ff_ffff {
        return Err(Errno::EINVAL);
    }
    Ok(to)
}

/// Records the attributes a modify gives.
pub(super) fn record(a: &mut ibv_qp_attr, attr: &ibv_qp_attr, mask: u32) {
    if mask & M_ACCESS != 0 {
        a.qp_access_flags = attr.qp_access_flags;
    }
    if mask & M_PKEY != 0 {
        a.pkey_index = attr.pkey_index;
    }
    if mask & M_PORT != 0 {
        a.port_num = attr.port_num;
    }
    if mask & M_QKEY != 0 {
        a.qkey = attr.qkey;
    }
    if mask & M_AV != 0 {
        a.ah_attr = attr.ah_attr;
    }
    if mask & M_PATH_MTU != 0 {
        a.path_mtu = attr.path_mtu;
    }
    if mask & M_TIMEOUT != 0 {
        a.timeout = attr.timeout;
    }
    if mask & M_RETRY != 0 {
        a.retry_cnt = attr.retry_cnt;
    }
    if mask & M_RNR_RETRY != 0 {
        a.rnr_retry = attr.rnr_retry;
    }
    if mask & M_RQ_PSN != 0 {
        a.rq_psn = attr.rq_psn;
    }
    if mask & M_SQ_PSN != 0 {
        a.sq_psn = attr.sq_psn;
    }
    if mask & M_MAX_QP_RD != 0 {
        a.max_rd_atomic = attr.max_rd_atomic;
    }
    if mask & M_MAX_DEST_RD != 0 {
        a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if mask & M_MIN_RNR != 0 {
        a.min_rnr_timer = attr.min_rnr_timer;
    }
    if mask & M_DEST_QPN != 0 {
        a.dest_qp_num = attr.dest_qp_num;
    }
    if mask & M_MIG != 0 {
        a.path_mig_state = attr.path_mig_state;
    }
    let _ = (M_EN_SQD, M_CAP);
}
