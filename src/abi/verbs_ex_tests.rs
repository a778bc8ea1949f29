//! Thread and parent domains, CQ moderation, the raw clock and ECE through the context ops and
//! exports a program reaches (the conformance programs check the clauses; these check the
//! busy rules, nesting and the moderated event, which they do not reach).

use super::*;
use crate::abi::verbs::{
    ibv_ack_cq_events, ibv_alloc_pd, ibv_close_device, ibv_create_comp_channel, ibv_create_cq,
    ibv_create_qp, ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_comp_channel, ibv_destroy_cq,
    ibv_destroy_qp, ibv_get_cq_event, ibv_open_device, ibv_reg_mr, ibv_req_notify_cq,
};
use crate::provider::Completion;
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

fn parent_attr(pd: *mut ibv_pd, td: *mut ibv_td) -> ibv_parent_domain_init_attr {
    // SAFETY: all-zero is a valid ibv_parent_domain_init_attr.
    let mut a: ibv_parent_domain_init_attr = unsafe { std::mem::zeroed() };
    a.pd = pd;
    a.td = td;
    a
}

fn qp_attr(cq: *mut ibv_cq) -> ibv_qp_init_attr {
    // SAFETY: all-zero is a valid ibv_qp_init_attr.
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = ibv_qp_type::IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a
}

#[test]
fn parent_domains_nest_and_stay_busy_while_used() {
    let ctx = open();
    // SAFETY: every pointer passed is live or NULL, and every struct is the size C's is.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        assert!(alloc_td(ctx, &mut ibv_td_init_attr { comp_mask: 1 }).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let td = alloc_td(ctx, &mut ibv_td_init_attr { comp_mask: 0 });
        assert_eq!((*td).context, ctx);
        let mut bad = parent_attr(pd, td);
        bad.comp_mask = 1 << 2;
        assert!(alloc_parent_domain(ctx, &mut bad).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(alloc_parent_domain(ctx, &mut parent_attr(null_mut(), td)).is_null());
        let par = alloc_parent_domain(ctx, &mut parent_attr(pd, td));
        assert_eq!((*par).context, ctx);
        let nested = alloc_parent_domain(ctx, &mut parent_attr(par, null_mut()));
        assert!(!nested.is_null());
        assert_eq!(dealloc_td(td), libc::EBUSY);
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
        assert_eq!(ibv_dealloc_pd(par), libc::EBUSY);

        // An MR on the nested domain names it, and lives in the innermost PD.
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(nested, buf.as_mut_ptr().cast(), buf.len(), 1);
        assert_eq!((*mr).pd, nested);
        let inner = objects().pds.get(pd).unwrap();
        assert!(Arc::ptr_eq(&objects().mrs.get(mr).unwrap().pd(), &inner));
        assert_eq!(ibv_dealloc_pd(nested), libc::EBUSY);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(nested), 0);

        // A QP on the parent domain names it and uses the PD's keys.
        let cq = ibv_create_cq(ctx, 8, null_mut(), null_mut(), 0);
        let qp = ibv_create_qp(par, &mut qp_attr(cq));
        assert_eq!((*qp).pd, par);
        assert!(Arc::ptr_eq(objects().qps.get(qp).unwrap().pd().unwrap(), &inner));
        assert_eq!(ibv_dealloc_pd(par), libc::EBUSY);
        assert_eq!(ibv_destroy_qp(qp), 0);

        // A CQ takes only a parent domain, and holds it.
        // SAFETY: all-zero is a valid ibv_cq_init_attr_ex.
        let mut ca: ibv_cq_init_attr_ex = std::mem::zeroed();
        ca.cqe = 4;
        ca.comp_mask = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0;
        ca.parent_domain = pd;
        assert!(create_cq_ex(ctx, &mut ca).is_null());
        assert_eq!(errno(), libc::EINVAL);
        ca.parent_domain = par;
        let xcq = create_cq_ex(ctx, &mut ca);
        assert!(!xcq.is_null());
        assert_eq!(ibv_dealloc_pd(par), libc::EBUSY);
        assert_eq!(ibv_destroy_cq(xcq.cast()), 0);

        assert_eq!(ibv_dealloc_pd(par), 0);
        assert_eq!(dealloc_td(td), 0);
        assert_eq!(dealloc_td(td), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// Takes and acknowledges the channel's event of `cq`.
///
/// # Safety
/// `ch` and `cq` are live.
unsafe fn take_event(ch: *mut ibv_comp_channel, cq: *mut ibv_cq) {
    let (mut got, mut cq_ctx) = (null_mut(), null_mut());
    // SAFETY: per the function's contract; both out-pointers are live.
    unsafe {
        assert_eq!(ibv_get_cq_event(ch, &mut got, &mut cq_ctx), 0);
        assert_eq!(got, cq);
        ibv_ack_cq_events(cq, 1);
    }
}

#[test]
fn moderation_holds_the_event_for_the_count_or_the_period() {
    let ctx = open();
    let moderate = ibv_cq_attr_mask::IBV_CQ_ATTR_MODERATE.0;
    let m = |count, period| ibv_modify_cq_attr {
        attr_mask: moderate,
        moderate: ibv_moderate_cq { cq_count: count, cq_period: period },
    };
    // SAFETY: every pointer passed is live.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let fd = (*ch).fd;
        let cq = ibv_create_cq(ctx, 16, null_mut(), ch, 0);
        let c = objects().cqs.get(cq).unwrap();
        let mut bad = m(1, crate::verbs::cq_mod::MAX_CQ_PERIOD + 1);
        assert_eq!(modify_cq(cq, &mut bad), libc::EINVAL);
        bad.attr_mask = ibv_cq_attr_mask::IBV_CQ_ATTR_RESERVED.0;
        assert_eq!(modify_cq(cq, &mut bad), libc::EINVAL);
        // Two completions per event.
        assert_eq!(modify_cq(cq, &mut m(2, 0)), 0);
        assert_eq!(ibv_req_notify_cq(cq, 0), 0);
        c.push(Completion::default());
        assert!(!readable(fd, 20));
        c.push(Completion::default());
        assert!(readable(fd, 1000));
        take_event(ch, cq);
        // A period: the event comes without the count.
        assert_eq!(modify_cq(cq, &mut m(100, 2000)), 0);
        assert_eq!(ibv_req_notify_cq(cq, 0), 0);
        c.push(Completion::default());
        assert!(!readable(fd, 0));
        assert!(readable(fd, 1000));
        take_event(ch, cq);
        drop(c);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn raw_clock_and_ece() {
    let ctx = open();
    // SAFETY: every pointer passed is live.
    unsafe {
        // SAFETY: all-zero is a valid ibv_values_ex.
        let mut v: ibv_values_ex = std::mem::zeroed();
        v.comp_mask = ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
        let before = crate::verbs::cq_ex::now_ns();
        assert_eq!(query_rt_values(ctx, &mut v), 0);
        assert!(v.raw_clock.tv_nsec as u64 >= before);
        v.comp_mask = 1 << 3;
        assert_eq!(query_rt_values(ctx, &mut v), libc::EINVAL);

        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), null_mut(), 0);
        let qp = ibv_create_qp(pd, &mut qp_attr(cq));
        let mut e = ibv_ece { vendor_id: 0, options: 7, comp_mask: 7 };
        assert_eq!(ibv_query_ece(qp, &mut e), 0);
        assert_eq!((e.vendor_id, e.comp_mask), (device::VENDOR_ID, 0));
        e.options = u32::MAX;
        assert_eq!(ibv_set_ece(qp, &mut e), 0);
        assert_eq!(e.options, crate::verbs::ece::SUPPORTED);
        e.vendor_id ^= 1;
        assert_eq!(ibv_set_ece(qp, &mut e), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
