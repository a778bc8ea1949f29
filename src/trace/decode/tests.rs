//! The decoders, on values built here.

use super::*;

fn put<T>(f: &str, a: &str, v: T) -> String
where
    for<'x> Arg<'x, T>: Typed,
{
    let mut l = Line::new();
    Typed::put(&Arg(&v), f, a, &mut l);
    l.text
}

#[test]
fn names_and_flags() {
    let mut s = String::new();
    enum_name(ibv_wc_status::IBV_WC_RETRY_EXC_ERR as i64, WC_STATUS, &mut s);
    assert_eq!(s, "IBV_WC_RETRY_EXC_ERR");
    s.clear();
    enum_name(9999, WC_STATUS, &mut s);
    assert_eq!(s, "9999");
    s.clear();
    flag_names(2 | 8 | 0x100, SEND_FLAGS, &mut s);
    assert_eq!(s, "IBV_SEND_SIGNALED|IBV_SEND_INLINE|0x100");
    s.clear();
    flag_names(0, SEND_FLAGS, &mut s);
    assert_eq!(s, "0x0");
    assert_eq!(errno_name(libc::EINVAL), "EINVAL");
    assert_eq!(errno_name(100_000), "100000");
}

#[test]
fn plain_arguments_by_name() {
    let mut l = Line::new();
    (&Arg(&(rdma_port_space::RDMA_PS_UDP))).put("rdma_create_id", "ps", &mut l);
    (&Arg(&(1i32 | 4))).put("ibv_reg_mr", "access", &mut l);
    (&Arg(&7i32)).put("ibv_reg_mr", "length", &mut l);
    (&Arg(&std::ptr::null_mut::<ibv_pd>())).put("ibv_reg_mr", "pd", &mut l);
    assert_eq!(
        l.text,
        "ps=RDMA_PS_UDP, access=IBV_ACCESS_LOCAL_WRITE|IBV_ACCESS_REMOTE_READ, length=7, pd=0x0"
    );
}

#[test]
fn send_list_and_strings() {
    let mut sge = ibv_sge { addr: 0, length: 16, lkey: 1 };
    // SAFETY: all-zero is a valid ibv_send_wr.
    let mut second: ibv_send_wr = unsafe { std::mem::zeroed() };
    second.wr_id = 2;
    second.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
    // SAFETY: all-zero is a valid ibv_send_wr (NULL lists, opcode 0).
    let mut first: ibv_send_wr = unsafe { std::mem::zeroed() };
    first.wr_id = 1;
    first.opcode = ibv_wr_opcode::IBV_WR_SEND;
    first.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    first.sg_list = &mut sge;
    first.num_sge = 1;
    first.next = &mut second;
    let s = put("ibv_post_send", "wr", &mut first as *mut ibv_send_wr);
    assert!(
        s.ends_with(
            "[{wr_id=0x1 opcode=IBV_WR_SEND send_flags=IBV_SEND_SIGNALED num_sge=1 \
             length=16} {wr_id=0x2 opcode=IBV_WR_RDMA_READ send_flags=0x0 num_sge=0}]"
        ),
        "{s}"
    );
    let s = put("rdma_getaddrinfo", "node", c"10.0.0.1".as_ptr());
    assert_eq!(s, "node=\"10.0.0.1\"");
    let s = put("rdma_getaddrinfo", "node", std::ptr::null::<c_char>());
    assert_eq!(s, "node=NULL");
}

#[test]
fn completions_follow_the_call() {
    // SAFETY: all-zero is a valid ibv_wc.
    let mut wc: [ibv_wc; 2] = unsafe { std::mem::zeroed() };
    wc[0].wr_id = 5;
    wc[0].opcode = ibv_wc_opcode::IBV_WC_RECV;
    wc[0].byte_len = 16;
    wc[1].status = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
    let p = wc.as_mut_ptr();
    let mut l = Line::new();
    Typed::after(&Arg(&p), "ibv_poll_cq", "wc", 2, &mut l);
    let lines: Vec<&str> = l.extra.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0]
        .ends_with("wc wr_id=0x5 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=16 qp_num=0x0"));
    assert!(lines[1].contains("status=IBV_WC_WR_FLUSH_ERR opcode=IBV_WC_SEND"));
    // Other calls taking an ibv_wc do not report completions.
    let mut l = Line::new();
    Typed::after(&Arg(&p), "ibv_init_ah_from_wc", "wc", 0, &mut l);
    assert!(l.extra.is_empty());
}
