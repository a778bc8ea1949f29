//! Proves that the `rdma_sys` types rdmashim exposes to C callers have exactly the
//! layout of the installed rdma-core headers.
//!
//! `c-tests/layout.c` is compiled with the system C compiler and prints
//! `sizeof <struct> <n>` / `offsetof <struct>.<field path> <n>` lines; every one of
//! them must match the value computed here from `rdmashim::sys`. This matters most
//! for the types rdma-sys defines by hand instead of through bindgen (`ibv_wc`,
//! `ibv_send_wr`, `ibv_gid`, `ibv_ah_attr`, `ibv_async_event`, `rdma_addr`,
//! `rdma_ud_param`, `rdma_cm_event`), whose anonymous unions also get Rust names.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use rdmashim::sys::*;

/// `layout! { T { c.path, c.path => rust.path, ... } ... }` expands to a
/// `Vec<(&str, usize)>` holding `("sizeof T", size_of::<T>())` and, per field,
/// `("offsetof T.c.path", offset_of!(T, rust.path))`. The Rust path defaults to the
/// C path; `=>` gives it when rdma-sys names the member differently (anonymous C
/// unions become named fields in rdma-sys).
macro_rules! layout {
    (@off $t:ident [$($c:ident).+]) => {
        offset_of!($t, $($c).+)
    };
    (@off $t:ident [$($c:ident).+] [$($r:ident).+]) => {
        offset_of!($t, $($r).+)
    };
    ($($t:ident { $($($c:ident).+ $(=> $($r:ident).+)?),* $(,)? })*) => {
        vec![$(
            (concat!("sizeof ", stringify!($t)), size_of::<$t>()),
            $((
                concat!("offsetof ", stringify!($t) $(, ".", stringify!($c))+),
                layout!(@off $t [$($c).+] $([$($r).+])?),
            ),)*
        )*]
    };
}

/// The Rust side of every line `c-tests/layout.c` prints.
fn rust_layout() -> BTreeMap<String, usize> {
    let table = layout! {
        rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type,
        }
        rdma_cm_event {
            id, listen_id, event, status, param,
            param.conn, param.conn.private_data, param.conn.private_data_len,
            param.conn.responder_resources, param.conn.initiator_depth, param.conn.flow_control,
            param.conn.retry_count, param.conn.rnr_retry_count, param.conn.srq, param.conn.qp_num,
            param.ud, param.ud.private_data, param.ud.private_data_len, param.ud.ah_attr,
            param.ud.qp_num, param.ud.qkey,
        }
        rdma_event_channel { fd }
        rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
            ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
            ai_connect_len, ai_connect, ai_next,
        }
        rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, srq, qp_num,
        }
        rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        rdma_route { addr, path_rec, num_paths }
        rdma_addr {
            src_addr => src_addr_union.src_addr,
            src_sin => src_addr_union.src_sin,
            src_sin6 => src_addr_union.src_sin6,
            src_storage => src_addr_union.src_storage,
            dst_addr => dst_addr_union.dst_addr,
            dst_sin => dst_addr_union.dst_sin,
            dst_sin6 => dst_addr_union.dst_sin6,
            dst_storage => dst_addr_union.dst_storage,
            addr, addr.ibaddr, addr.ibaddr.sgid, addr.ibaddr.dgid, addr.ibaddr.pkey,
        }
        ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
            numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference,
        }
        ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        ibv_context_ops {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
            _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
            _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
            _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
            _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
            _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
        }
        verbs_context {
            query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
            create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
            modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
            modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
            create_wq, query_rt_values, create_cq_ex, priv => priv_, query_device_ex,
            ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp,
            create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3,
            sz, context,
        }
        ibv_device {
            _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
        }
        ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
        }
        ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
            port_cap_flags2,
        }
        ibv_gid { raw, global, global.subnet_prefix, global.interface_id }
        ibv_async_event {
            element, element.cq, element.qp, element.srq, element.wq, element.port_num,
            event_type,
        }
        ibv_pd { context, handle }
        ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed,
        }
        ibv_comp_channel { context, fd, refcnt }
        ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed,
        }
        ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
        }
        ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        ibv_srq_init_attr { srq_context, attr }
        ibv_ah { context, pd, handle }
        ibv_ah_attr {
            grh, grh.dgid, grh.flow_label, grh.sgid_index, grh.hop_limit, grh.traffic_class,
            dlid, sl, src_path_bits, static_rate, is_global, port_num,
        }
        ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len,
            imm_data => imm_data_invalidated_rkey_union.imm_data,
            invalidated_rkey => imm_data_invalidated_rkey_union.invalidated_rkey,
            qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits,
        }
        ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags,
            imm_data => imm_data_invalidated_rkey_union.imm_data,
            invalidate_rkey => imm_data_invalidated_rkey_union.invalidated_rkey,
            wr, wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
            wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap,
            wr.atomic.rkey, wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
            qp_type, qp_type.xrc, qp_type.xrc.remote_srqn,
            bind_mw => bind_mw_tso_union.bind_mw,
            bind_mw.mw => bind_mw_tso_union.bind_mw.mw,
            bind_mw.rkey => bind_mw_tso_union.bind_mw.rkey,
            bind_mw.bind_info => bind_mw_tso_union.bind_mw.bind_info,
            tso => bind_mw_tso_union.tso,
            tso.hdr => bind_mw_tso_union.tso.hdr,
            tso.hdr_sz => bind_mw_tso_union.tso.hdr_sz,
            tso.mss => bind_mw_tso_union.tso.mss,
        }
        ibv_recv_wr { wr_id, next, sg_list, num_sge }
        ibv_sge { addr, length, lkey }
    };

    let mut map = BTreeMap::new();
    for (name, value) in table {
        // `ibv_context.ops.<slot>` is the slot's offset in `ibv_context_ops` plus `ops`.
        if let Some(slot) = name.strip_prefix("offsetof ibv_context_ops.") {
            let nested = format!("offsetof ibv_context.ops.{slot}");
            map.insert(nested, offset_of!(ibv_context, ops) + value);
        }
        assert!(
            map.insert(name.to_owned(), value).is_none(),
            "duplicate entry in the Rust layout table: {name}"
        );
    }
    map
}

/// Compiles and runs `c-tests/layout.c`; returns its lines as `"<kind> <name>" -> n`.
fn c_layout() -> BTreeMap<String, usize> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("c-tests/layout.c");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layout");
    std::fs::create_dir_all(&out_dir).expect("create the temporary build directory");
    let exe = out_dir.join("layout-probe");

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the C compiler `{cc}` ({e}); the layout test needs a C compiler \
                 (install gcc or set CC) and the rdma-core development headers"
            )
        });
    assert!(status.success(), "`{cc}` failed to compile {}: {status}", source.display());

    let output =
        Command::new(&exe).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    assert!(output.status.success(), "{} failed: {}", exe.display(), output.status);
    let stdout = String::from_utf8(output.stdout).expect("layout probe printed non-UTF-8");

    let mut map = BTreeMap::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        let (Some(kind @ ("sizeof" | "offsetof")), Some(name), Some(value), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            panic!("malformed line from the layout probe: {line:?}");
        };
        let value = value.parse().unwrap_or_else(|e| panic!("bad number in {line:?}: {e}"));
        assert!(
            map.insert(format!("{kind} {name}"), value).is_none(),
            "duplicate line from the layout probe: {line:?}"
        );
    }
    assert!(!map.is_empty(), "the layout probe printed nothing");
    map
}

#[test]
fn struct_layouts_match_c_headers() {
    let c = c_layout();
    let rust = rust_layout();

    let mut unmapped = Vec::new();
    let mut mismatches = Vec::new();
    for (item, &c_value) in &c {
        match rust.get(item) {
            None => unmapped.push(format!("  {item} {c_value}")),
            Some(&rust_value) if rust_value != c_value => {
                mismatches.push(format!("  {item}: C {c_value}, Rust {rust_value}"));
            }
            Some(_) => {}
        }
    }
    let stale: Vec<_> =
        rust.keys().filter(|item| !c.contains_key(*item)).map(|item| format!("  {item}")).collect();

    let mut report = String::new();
    for (title, list) in [
        ("layout mismatches between C and rdma-sys", &mismatches),
        ("C lines without a Rust counterpart", &unmapped),
        ("Rust table entries the C probe does not print", &stale),
    ] {
        if !list.is_empty() {
            report.push_str(&format!("{} {title}:\n{}\n", list.len(), list.join("\n")));
        }
    }
    assert!(report.is_empty(), "checked {} C items\n{report}", c.len());
}
