//! The forwarders of verbs.h's inlines: the `verbs_get_ctx_op` rules (`abi_compat`, `sz`, a set
//! slot), the inline's fallbacks and checks, and the answers where the inline would crash
//! (c-tests/verbs_inline_exports.c compares them with the inlines themselves).

use super::*;
use crate::abi::verbs::{
    ibv_alloc_pd, ibv_close_device, ibv_create_cq, ibv_create_qp, ibv_dealloc_pd, ibv_dereg_mr,
    ibv_destroy_cq, ibv_destroy_qp, ibv_open_device, ibv_reg_mr,
};
use crate::abi::verbs_inline_wr::{ibv_wr_complete, ibv_wr_start};
use crate::verbs::device;
use std::ptr::null_mut;

fn open() -> *mut ibv_context {
    crate::abi::init();
    // SAFETY: our device.
    let c = unsafe { ibv_open_device(device::device_ptr()) };
    assert!(!c.is_null());
    c
}

fn errno() -> i32 {
    Errno::last().0
}

#[test]
fn ctx_op_follows_verbs_get_ctx_op() {
    let ctx = open();
    // SAFETY: ctx is a live context of ours; the test changes its verbs_context only between
    // calls on this thread, and restores it.
    unsafe {
        let v = verbs_get_ctx(ctx);
        assert_eq!(std::ptr::addr_of_mut!((*v).context), ctx);
        let mut ta = ibv_td_init_attr { comp_mask: 0 };
        let td = ibv_alloc_td(ctx, &mut ta);
        assert!(!td.is_null());
        assert_eq!(ibv_dealloc_td(td), 0);

        // A verbs_context too short to hold alloc_td: not offered.
        let sz = (*v).sz;
        (*v).sz = size_of::<verbs_context>() - offset_of!(verbs_context, alloc_td) - 1;
        assert!(ibv_alloc_td(ctx, &mut ta).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        (*v).sz = sz;

        // Not marked extended: no verbs_context at all (NULL, errno untouched).
        (*ctx).abi_compat = null_mut();
        Errno(0).set();
        assert!(verbs_get_ctx(ctx).is_null());
        assert_eq!(errno(), 0);
        assert!(ibv_alloc_td(ctx, &mut ta).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        (*ctx).abi_compat = VERBS_ABI_IS_EXTENDED;

        // A NULL slot: the inline's EOPNOTSUPP, as NULL + errno or as the code.
        let mut ca: ibv_counters_init_attr = std::mem::zeroed();
        assert!(ibv_create_counters(ctx, &mut ca).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        let mut vals: ibv_values_ex = std::mem::zeroed();
        let saved = (*v).query_rt_values.take();
        assert_eq!(ibv_query_rt_values_ex(ctx, &mut vals), libc::EOPNOTSUPP);
        (*v).query_rt_values = saved;

        // Not a context of ours (or NULL): EINVAL where the inline would read it.
        assert!(verbs_get_ctx(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let mut fake: ibv_context = std::mem::zeroed();
        assert!(ibv_alloc_td(&mut fake, &mut ta).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ibv_destroy_flow(null_mut()), libc::EINVAL);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn query_device_ex_falls_back_to_the_legacy_query() {
    let ctx = open();
    // SAFETY: as in ctx_op_follows_verbs_get_ctx_op.
    unsafe {
        let v = verbs_get_ctx(ctx);
        let mut full: ibv_device_attr_ex = std::mem::zeroed();
        assert_eq!(ibv_query_device_ex(ctx, std::ptr::null(), &mut full), 0);
        assert_ne!(full.completion_timestamp_mask, 0);
        let saved = (*v).query_device_ex.take();
        let mut legacy: ibv_device_attr_ex = std::mem::zeroed();
        std::ptr::write_bytes(&mut legacy, 0xa5, 1);
        assert_eq!(ibv_query_device_ex(ctx, std::ptr::null(), &mut legacy), 0);
        (*v).query_device_ex = saved;
        assert_eq!(legacy.completion_timestamp_mask, 0, "the extension is zeroed");
        assert_eq!(legacy.orig_attr.max_qp, full.orig_attr.max_qp);
        let input = ibv_query_device_ex_input { comp_mask: 1 };
        assert_eq!(ibv_query_device_ex(ctx, &input, &mut legacy), libc::EINVAL);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn bind_mw_makes_the_inline_checks_first() {
    let ctx = open();
    // SAFETY: every pointer passed is live or NULL, and every struct is the size C's is.
    unsafe {
        let (pd, other) = (ibv_alloc_pd(ctx), ibv_alloc_pd(ctx));
        let mut buf = [0u8; 64];
        let access = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_MW_BIND.0) as c_int;
        let mr = ibv_reg_mr(other, buf.as_mut_ptr().cast(), buf.len(), access);
        let mw1 = ibv_alloc_mw(pd, ibv_mw_type::IBV_MW_TYPE_1);
        let mw2 = ibv_alloc_mw(pd, ibv_mw_type::IBV_MW_TYPE_2);
        assert!(!mr.is_null() && !mw1.is_null() && !mw2.is_null());
        let mut b: ibv_mw_bind = std::mem::zeroed();
        assert_eq!(ibv_bind_mw(null_mut(), mw2, &mut b), libc::EINVAL, "type 2");
        b.bind_info.length = 8;
        assert_eq!(ibv_bind_mw(null_mut(), mw1, &mut b), libc::EINVAL, "a range without an MR");
        b.bind_info.mr = mr;
        assert_eq!(ibv_bind_mw(null_mut(), mw1, &mut b), libc::EPERM, "an MR of another PD");
        // Past the checks, the provider's bind sees the (NULL) QP.
        b.bind_info = std::mem::zeroed();
        assert_eq!(ibv_bind_mw(null_mut(), mw1, &mut b), libc::EINVAL);
        assert_eq!(ibv_bind_mw(null_mut(), mw1, null_mut()), libc::EINVAL);
        assert_eq!(ibv_dealloc_mw(mw1), 0);
        assert_eq!(ibv_dealloc_mw(mw2), 0);
        assert_eq!(ibv_dealloc_mw(mw2), libc::EINVAL, "a dead window");
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_dealloc_pd(other), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn reg_mr_helpers_and_posting_slots() {
    let ctx = open();
    // SAFETY: every pointer passed is live or NULL, and every struct is the size C's is.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let mut buf = [0u8; 64];
        let p = buf.as_mut_ptr().cast::<c_void>();
        let local = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let relaxed = ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0;
        for (access, constant) in [(local, 1), (local | relaxed, 1), (local, 0)] {
            let mr = __ibv_reg_mr(pd, p, buf.len(), access, constant);
            assert!(!mr.is_null(), "access {access:#x}, constant {constant}");
            assert_eq!((*mr).addr, p);
            assert_eq!(ibv_dereg_mr(mr), 0);
            let mr = __ibv_reg_mr_iova(pd, p, buf.len(), 0x1000, access, constant);
            assert!(!mr.is_null());
            assert_eq!(ibv_dereg_mr(mr), 0);
        }

        // A QP whose posting API was never enabled has NULL slots: EOPNOTSUPP, not a jump.
        let cq = ibv_create_cq(ctx, 4, null_mut(), null_mut(), 0);
        let mut a: ibv_qp_init_attr = std::mem::zeroed();
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = ibv_qp_type::IBV_QPT_RC;
        a.cap.max_send_wr = 2;
        a.cap.max_recv_wr = 2;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        let qp = ibv_create_qp(pd, &mut a);
        assert!(!qp.is_null());
        let x = qp.cast::<ibv_qp_ex>();
        if (*x).wr_start.is_none() {
            Errno(0).set();
            ibv_wr_start(x);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(ibv_wr_complete(x), libc::EOPNOTSUPP);
        }
        assert_eq!(crate::abi::verbs_ex::ibv_qp_to_qp_ex(qp), x);
        // Enabled: the export answers what the QP's own functions answer (an empty batch on a
        // QP in RESET).
        Errno(0).set();
        ibv_wr_start(x);
        assert_eq!(errno(), 0);
        let forwarded = ibv_wr_complete(x);
        ((*x).wr_start.expect("enabled"))(x);
        assert_eq!(forwarded, ((*x).wr_complete.expect("enabled"))(x));
        assert_eq!(ibv_wr_complete(null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_wr_complete(x), libc::EINVAL, "a destroyed QP");
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
