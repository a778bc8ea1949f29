//! How the traced calls' arguments read, as the headers name them.
//!
//! `(&Arg(&value)).put(function, argument, line)` picks the decoder of the value's type when
//! there is one ([`Typed`]: work-request lists, QP attributes, address info, socket addresses,
//! strings, out-parameters, completions) and the generic one otherwise ([`Plain`]: integers, by
//! name where [`NAMED`] says so, and pointers in hex). The choice is made at compile time by
//! method resolution (a `Typed` impl on `Arg<T>` wins over the `Plain` one on `&Arg<T>`).
//!
//! Decoders read only what the call's contract lets the library read: input structs before the
//! call, out-parameters only after it succeeded.

use super::{Line, Show};
use crate::sys::*;
use libc::{c_char, c_int, sockaddr};
use std::fmt::Write as _;

/// An argument of a traced call.
pub struct Arg<'a, T>(pub &'a T);

/// A decoder chosen by the argument's type.
pub trait Typed {
    /// Shows the argument (before the call).
    fn put(&self, f: &str, a: &str, l: &mut Line);
    /// Shows what the call wrote through it (after a successful call returning `ret`).
    fn after(&self, _f: &str, _a: &str, _ret: i64, _l: &mut Line) {}
}

/// The generic decoder: integers (by name where [`NAMED`] knows the argument) and pointers.
pub trait Plain {
    fn put(&self, f: &str, a: &str, l: &mut Line);
    fn after(&self, _f: &str, _a: &str, _ret: i64, _l: &mut Line) {}
}

impl<T: Show> Plain for &Arg<'_, T> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        match NAMED.iter().find(|(nf, na, _)| na == &a && (nf.is_empty() || nf == &f)) {
            Some((_, _, decode)) => decode(self.0.as_i64(), out),
            None => self.0.show(out),
        }
    }
}

type Decoder = fn(i64, &mut String);

/// Integer arguments shown by name: (function, or "" for any; argument; decoder).
pub static NAMED: &[(&str, &str, Decoder)] = &[
    ("", "ps", |v, o| enum_name(v, PORT_SPACES, o)),
    ("", "access", |v, o| flag_names(v, ACCESS, o)),
    ("ibv_modify_qp", "mask", |v, o| flag_names(v, QP_ATTR_MASK, o)),
    ("ibv_query_qp", "mask", |v, o| flag_names(v, QP_ATTR_MASK, o)),
    ("ibv_modify_srq", "mask", |v, o| flag_names(v, SRQ_ATTR_MASK, o)),
    ("rdma_init_qp_attr", "qp_attr_mask", |v, o| flag_names(v, QP_ATTR_MASK, o)),
    ("rdma_post_send", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_sendv", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_ud_send", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_read", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_readv", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_write", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("rdma_post_writev", "flags", |v, o| flag_names(v, SEND_FLAGS, o)),
    ("ibv_wc_status_str", "status", |v, o| enum_name(v, WC_STATUS, o)),
    ("ibv_event_type_str", "event", |v, o| enum_name(v, EVENT_TYPES, o)),
    ("rdma_event_str", "event", |v, o| enum_name(v, CM_EVENTS, o)),
];

macro_rules! names {
    ($m:ident: $($c:ident),* $(,)?) => { &[$(($m::$c as i64, stringify!($c))),*] };
}
macro_rules! flags {
    ($m:ident: $($c:ident),* $(,)?) => { &[$(($m::$c.0 as i64, stringify!($c))),*] };
}

type Names = &'static [(i64, &'static str)];

static PORT_SPACES: Names =
    names!(rdma_port_space: RDMA_PS_IPOIB, RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP);
static QP_TYPES: Names = names!(ibv_qp_type: IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET,
    IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_DRIVER);
static QP_STATES: Names = names!(ibv_qp_state: IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
    IBV_QPS_SQD, IBV_QPS_SQE, IBV_QPS_ERR, IBV_QPS_UNKNOWN);
static WR_OPCODES: Names = names!(ibv_wr_opcode: IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV,
    IBV_WR_TSO, IBV_WR_DRIVER1);
static WC_OPCODES: Names = names!(ibv_wc_opcode: IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
    IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO,
    IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM);
static WC_STATUS: Names = names!(ibv_wc_status: IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR,
    IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR,
    IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR, IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
    IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
    IBV_WC_LOC_RDD_VIOL_ERR, IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR,
    IBV_WC_INV_EECN_ERR, IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR, IBV_WC_RESP_TIMEOUT_ERR,
    IBV_WC_GENERAL_ERR, IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE);
static CM_EVENTS: Names = names!(rdma_cm_event_type: RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_MULTICAST_JOIN,
    RDMA_CM_EVENT_MULTICAST_ERROR, RDMA_CM_EVENT_ADDR_CHANGE, RDMA_CM_EVENT_TIMEWAIT_EXIT);
static EVENT_TYPES: Names = names!(ibv_event_type: IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL,
    IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED,
    IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR, IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE,
    IBV_EVENT_PORT_ERR, IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE,
    IBV_EVENT_SRQ_ERR, IBV_EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_QP_LAST_WQE_REACHED,
    IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_WQ_FATAL);
static ACCESS: Names = flags!(ibv_access_flags: IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE,
    IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
    IBV_ACCESS_ON_DEMAND, IBV_ACCESS_HUGETLB, IBV_ACCESS_RELAXED_ORDERING);
static SEND_FLAGS: Names = flags!(ibv_send_flags: IBV_SEND_FENCE, IBV_SEND_SIGNALED,
    IBV_SEND_SOLICITED, IBV_SEND_INLINE, IBV_SEND_IP_CSUM);
static QP_ATTR_MASK: Names = flags!(ibv_qp_attr_mask: IBV_QP_STATE, IBV_QP_CUR_STATE,
    IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY,
    IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN,
    IBV_QP_RATE_LIMIT);
static SRQ_ATTR_MASK: Names = flags!(ibv_srq_attr_mask: IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT);
static FAMILIES: Names = &[
    (libc::AF_UNSPEC as i64, "AF_UNSPEC"),
    (libc::AF_INET as i64, "AF_INET"),
    (libc::AF_INET6 as i64, "AF_INET6"),
    (libc::AF_IB as i64, "AF_IB"),
];
/// `rdma_addrinfo.ai_flags` (`RAI_*` are macros in rdma_cma.h, so not in the bindings).
static RAI_FLAGS: Names =
    &[(1, "RAI_PASSIVE"), (2, "RAI_NUMERICHOST"), (4, "RAI_NOROUTE"), (8, "RAI_FAMILY")];

/// `NAME`, or the number when it has no name.
pub fn enum_name(v: i64, names: Names, out: &mut String) {
    match names.iter().find(|(n, _)| *n == v) {
        Some((_, s)) => out.push_str(s),
        None => {
            let _ = write!(out, "{v}");
        }
    }
}

/// `A|B|0x40` (the bits without a name in hex), or `0x0`.
pub fn flag_names(v: i64, names: Names, out: &mut String) {
    let mut rest = v;
    let mut first = true;
    for (bit, s) in names {
        if *bit != 0 && rest & bit == *bit {
            out.push_str(if first { "" } else { "|" });
            out.push_str(s);
            rest &= !bit;
            first = false;
        }
    }
    if rest != 0 || first {
        let _ = write!(out, "{}{:#x}", if first { "" } else { "|" }, rest);
    }
}

extern "C" {
    // glibc 2.32: the errno's macro name ("EINVAL"), NULL for an unknown value.
    fn strerrorname_np(errnum: c_int) -> *const c_char;
}

/// `EINVAL`, or the number.
pub fn errno_name(e: i32) -> String {
    // SAFETY: strerrorname_np accepts any value; it returns NULL or a static string.
    let p = unsafe { strerrorname_np(e) };
    if p.is_null() {
        return e.to_string();
    }
    // SAFETY: p is a NUL-terminated static string of glibc's.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Borrows `p` for reading, `None` if NULL.
///
/// # Safety
/// `p` is NULL or valid for reads of `T` (the traced call's contract).
unsafe fn read<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: per the function's contract.
    unsafe { p.as_ref() }
}

/// At most this many entries of a list are shown.
const MAX_LIST: usize = 8;

/// `[item item …]`: a linked list of work requests from `p` on, at most `MAX_LIST` of them.
///
/// # Safety
/// `p` is NULL or the head of a list of valid entries whose `next` links end in NULL (the
/// traced call's contract).
unsafe fn wr_list<T>(
    p: *const T,
    next: impl Fn(&T) -> *const T,
    mut item: impl FnMut(&T, &mut String),
    out: &mut String,
) {
    out.push('[');
    let mut p = p;
    for i in 0.. {
        // SAFETY: per the function's contract, p is NULL or a valid entry of the list.
        let Some(wr) = (unsafe { read(p) }) else { break };
        if i == MAX_LIST {
            out.push_str(" …");
            break;
        }
        if i > 0 {
            out.push(' ');
        }
        item(wr, out);
        p = next(wr);
    }
    out.push(']');
}

impl Typed for Arg<'_, *mut ibv_send_wr> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        let item = |wr: &ibv_send_wr, out: &mut String| {
            let _ = write!(out, "{{wr_id={:#x} opcode=", wr.wr_id);
            enum_name(wr.opcode as i64, WR_OPCODES, out);
            out.push_str(" send_flags=");
            flag_names(wr.send_flags as i64, SEND_FLAGS, out);
            let _ = write!(out, " num_sge={}", wr.num_sge);
            sge_bytes(wr.sg_list, wr.num_sge, out);
            out.push('}');
        };
        // SAFETY: the caller's list of send requests (ibv_post_send(3)), read before the call.
        unsafe { wr_list(*self.0 as *const ibv_send_wr, |w| w.next, item, out) };
    }
}

impl Typed for Arg<'_, *mut ibv_recv_wr> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        let item = |wr: &ibv_recv_wr, out: &mut String| {
            let _ = write!(out, "{{wr_id={:#x} num_sge={}", wr.wr_id, wr.num_sge);
            sge_bytes(wr.sg_list, wr.num_sge, out);
            out.push('}');
        };
        // SAFETY: the caller's list of receive requests (ibv_post_recv(3)), read before it.
        unsafe { wr_list(*self.0 as *const ibv_recv_wr, |w| w.next, item, out) };
    }
}

/// ` length=N`: the total of a scatter/gather list.
fn sge_bytes(sg: *mut ibv_sge, n: c_int, out: &mut String) {
    if sg.is_null() || n <= 0 {
        return;
    }
    let n = (n as usize).min(64);
    // SAFETY: a work request's sg_list holds num_sge entries (ibv_post_send(3)).
    let sges = unsafe { std::slice::from_raw_parts(sg, n) };
    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
    let _ = write!(out, " length={total}");
}

impl Typed for Arg<'_, *mut ibv_qp_attr> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        // Only ibv_modify_qp reads it; the others fill it in.
        if f == "ibv_modify_qp" {
            // SAFETY: ibv_modify_qp(3)'s attr is valid for reads.
            if let Some(at) = unsafe { read(*self.0) } {
                out.push_str("{qp_state=");
                enum_name(at.qp_state as i64, QP_STATES, out);
                out.push('}');
            }
        }
    }
}

impl Typed for Arg<'_, *mut ibv_qp_init_attr> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        if f == "ibv_query_qp" {
            return; // filled in by the call
        }
        // SAFETY: ibv_create_qp(3), rdma_create_qp(3) and rdma_create_ep(3) read it.
        if let Some(at) = unsafe { read(*self.0) } {
            out.push_str("{qp_type=");
            enum_name(at.qp_type as i64, QP_TYPES, out);
            let c = &at.cap;
            let _ = write!(
                out,
                " max_send_wr={} max_recv_wr={} max_send_sge={} max_recv_sge={} \
                 max_inline_data={} sq_sig_all={}}}",
                c.max_send_wr,
                c.max_recv_wr,
                c.max_send_sge,
                c.max_recv_sge,
                c.max_inline_data,
                at.sq_sig_all
            );
        }
    }
}

fn addrinfo(p: *const rdma_addrinfo, out: &mut String) {
    p.show(out);
    // SAFETY: rdma_getaddrinfo(3)'s hints and the rdma_addrinfo given to rdma_create_ep(3)
    // are valid for reads.
    let Some(ai) = (unsafe { read(p) }) else { return };
    out.push_str("{ai_flags=");
    flag_names(ai.ai_flags as i64, RAI_FLAGS, out);
    out.push_str(" ai_family=");
    enum_name(ai.ai_family as i64, FAMILIES, out);
    out.push_str(" ai_qp_type=");
    enum_name(ai.ai_qp_type as i64, QP_TYPES, out);
    out.push_str(" ai_port_space=");
    enum_name(ai.ai_port_space as i64, PORT_SPACES, out);
    for (name, sa) in [(" ai_src_addr=", ai.ai_src_addr), (" ai_dst_addr=", ai.ai_dst_addr)] {
        if !sa.is_null() {
            out.push_str(name);
            sockaddr_text(sa, out);
        }
    }
    out.push('}');
}

impl Typed for Arg<'_, *const rdma_addrinfo> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        addrinfo(*self.0, l.arg(a));
    }
}

impl Typed for Arg<'_, *mut rdma_addrinfo> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        if f == "rdma_freeaddrinfo" {
            // A list it never handed out or one freed already is ignored, so not read here.
            self.0.show(l.arg(a));
        } else {
            addrinfo(*self.0, l.arg(a));
        }
    }
}

/// `127.0.0.1:7471`, `[::1]:7471`, or `family=N`.
fn sockaddr_text(sa: *const sockaddr, out: &mut String) {
    // SAFETY: the address arguments of the calls that read one are valid socket addresses of
    // their family's size (rdma_bind_addr(3), rdma_resolve_addr(3), bind(2)…).
    let Some(s) = (unsafe { read(sa) }) else { return };
    match s.sa_family as c_int {
        libc::AF_INET => {
            // SAFETY: the caller's address is a valid socket address of its family's size (the
            // contract above), and AF_INET's is a sockaddr_in.
            let a = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            let _ = write!(out, "{ip}:{}", u16::from_be(a.sin_port));
        }
        libc::AF_INET6 => {
            // SAFETY: the caller's address is a valid socket address of its family's size (the
            // contract above), and AF_INET6's is a sockaddr_in6.
            let a = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            let _ = write!(out, "[{ip}]:{}", u16::from_be(a.sin6_port));
        }
        f => {
            let _ = write!(out, "family={f}");
        }
    }
}

/// The calls whose `sockaddr` arguments are inputs (the others write them).
const SOCKADDR_IN: &[&str] = &[
    "rdma_bind_addr",
    "rdma_resolve_addr",
    "rdma_join_multicast",
    "rdma_leave_multicast",
    "rbind",
    "rconnect",
    "rsendto",
];

impl Typed for Arg<'_, *mut sockaddr> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        if SOCKADDR_IN.contains(&f) && !self.0.is_null() {
            out.push('{');
            sockaddr_text(*self.0, out);
            out.push('}');
        }
    }
}

impl Typed for Arg<'_, *const sockaddr> {
    fn put(&self, f: &str, a: &str, l: &mut Line) {
        Typed::put(&Arg(&(*self.0 as *mut sockaddr)), f, a, l)
    }
}

impl Typed for Arg<'_, *const c_char> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        if self.0.is_null() {
            out.push_str("NULL");
            return;
        }
        // SAFETY: the `const char *` arguments are NUL-terminated strings (the man pages).
        let s = unsafe { std::ffi::CStr::from_ptr(*self.0) }.to_string_lossy();
        let _ = write!(out, "{:?}", s.chars().take(80).collect::<String>());
    }
}

impl Typed for Arg<'_, *mut rdma_conn_param> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        let out = l.arg(a);
        self.0.show(out);
        // SAFETY: rdma_connect(3)/rdma_accept(3) read conn_param when it is not NULL.
        if let Some(c) = unsafe { read(*self.0) } {
            let _ = write!(
                out,
                "{{private_data_len={} responder_resources={} initiator_depth={} \
                 retry_count={} rnr_retry_count={} srq={} qp_num={:#x}}}",
                c.private_data_len,
                c.responder_resources,
                c.initiator_depth,
                c.retry_count,
                c.rnr_retry_count,
                c.srq,
                c.qp_num
            );
        }
    }
}

/// Out-parameters `T **`: the pointer the call stored, after it succeeded.
macro_rules! out_ptr {
    ($($t:ty),*) => {$(
        impl Typed for Arg<'_, *mut *mut $t> {
            fn put(&self, _f: &str, a: &str, l: &mut Line) {
                self.0.show(l.arg(a));
            }
            fn after(&self, f: &str, a: &str, _ret: i64, l: &mut Line) {
                // SAFETY: the call succeeded, so it stored a pointer through this non-NULL
                // out-parameter (its man page).
                let Some(v) = (unsafe { read(*self.0) }) else { return };
                let _ = write!(l.outs(), " {a}={:#x}", *v as usize);
                cm_event(f, *v as *const rdma_cm_event, l);
            }
        }
    )*};
}
out_ptr!(rdma_cm_id, rdma_addrinfo, rdma_cm_event, ibv_cq);

/// rdma_get_cm_event's follow-up line: the event delivered.
fn cm_event(f: &str, ev: *const rdma_cm_event, l: &mut Line) {
    if f != "rdma_get_cm_event" {
        return;
    }
    // SAFETY: rdma_get_cm_event succeeded: ev is the event it returned, valid until acked.
    let Some(e) = (unsafe { read(ev) }) else { return };
    let mut t = String::new();
    enum_name(e.event as i64, CM_EVENTS, &mut t);
    l.follow(format_args!(
        "cm_event event={t} status={} id={:#x} listen_id={:#x}",
        e.status, e.id as usize, e.listen_id as usize
    ));
}

impl Typed for Arg<'_, *mut ibv_wc> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        self.0.show(l.arg(a));
    }
    fn after(&self, f: &str, _a: &str, ret: i64, l: &mut Line) {
        if f != "ibv_poll_cq" || ret <= 0 || self.0.is_null() {
            return;
        }
        // SAFETY: ibv_poll_cq returned `ret` completions written to the caller's array.
        let wcs = unsafe { std::slice::from_raw_parts(*self.0, ret as usize) };
        for wc in wcs {
            let (mut st, mut op) = (String::new(), String::new());
            enum_name(wc.status as i64, WC_STATUS, &mut st);
            enum_name(wc.opcode as i64, WC_OPCODES, &mut op);
            l.follow(format_args!(
                "wc wr_id={:#x} status={st} opcode={op} byte_len={} qp_num={:#x}",
                wc.wr_id, wc.byte_len, wc.qp_num
            ));
        }
    }
}

impl Typed for Arg<'_, *mut ibv_async_event> {
    fn put(&self, _f: &str, a: &str, l: &mut Line) {
        self.0.show(l.arg(a));
    }
    fn after(&self, f: &str, _a: &str, _ret: i64, l: &mut Line) {
        if f != "ibv_get_async_event" {
            return;
        }
        // SAFETY: ibv_get_async_event succeeded and filled the caller's event.
        let Some(e) = (unsafe { read(*self.0) }) else { return };
        let mut t = String::new();
        enum_name(e.event_type as i64, EVENT_TYPES, &mut t);
        l.follow(format_args!("async_event event_type={t}"));
    }
}

#[cfg(test)]
mod tests;
