/*
 * Layout oracle for tests/layout.rs.
 *
 * Compiled against the system rdma-core headers, it prints the size of every
 * public struct rdmashim shares with C callers and the offset of each of their
 * fields, one item per line:
 *
 *     sizeof <struct> <n>
 *     offsetof <struct>.<field>[.<member>...] <n>
 *
 * Members of anonymous unions are named as C code names them (e.g.
 * `ibv_wc.imm_data`); members of named unions and nested structs by their
 * full path (e.g. `ibv_send_wr.wr.rdma.rkey`). The Rust test maps every line
 * to the corresponding `rdma_sys` type and fails on any difference.
 */
#include <stddef.h>
#include <stdio.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static void emit(const char *what, const char *name, size_t n)
{
	printf("%s %s %zu\n", what, name, n);
}

/* Field names are stringified directly (never macro-expanded for the label). */
#define SIZE(kind, T) emit("sizeof", #T, sizeof(kind T))
#define OFF(kind, T, f) emit("offsetof", #T "." #f, offsetof(kind T, f))
#define S(T) SIZE(struct, T)
#define O(T, f) OFF(struct, T, f)

/* Every slot of struct ibv_context_ops, in declaration order. */
#define IBV_CONTEXT_OPS_SLOTS(X)                                              \
	X(_compat_query_device) X(_compat_query_port) X(_compat_alloc_pd)     \
	X(_compat_dealloc_pd) X(_compat_reg_mr) X(_compat_rereg_mr)           \
	X(_compat_dereg_mr) X(alloc_mw) X(bind_mw) X(dealloc_mw)              \
	X(_compat_create_cq) X(poll_cq) X(req_notify_cq) X(_compat_cq_event)  \
	X(_compat_resize_cq) X(_compat_destroy_cq) X(_compat_create_srq)      \
	X(_compat_modify_srq) X(_compat_query_srq) X(_compat_destroy_srq)     \
	X(post_srq_recv) X(_compat_create_qp) X(_compat_query_qp)             \
	X(_compat_modify_qp) X(_compat_destroy_qp) X(post_send) X(post_recv)  \
	X(_compat_create_ah) X(_compat_destroy_ah) X(_compat_attach_mcast)    \
	X(_compat_detach_mcast) X(_compat_async_event)

#define OPS_SLOT(slot) O(ibv_context_ops, slot);
#define CONTEXT_OPS_SLOT(slot) O(ibv_context, ops.slot);

int main(void)
{
	/* librdmacm */
	S(rdma_cm_id);
	O(rdma_cm_id, verbs); O(rdma_cm_id, channel); O(rdma_cm_id, context);
	O(rdma_cm_id, qp); O(rdma_cm_id, route); O(rdma_cm_id, ps);
	O(rdma_cm_id, port_num); O(rdma_cm_id, event);
	O(rdma_cm_id, send_cq_channel); O(rdma_cm_id, send_cq);
	O(rdma_cm_id, recv_cq_channel); O(rdma_cm_id, recv_cq);
	O(rdma_cm_id, srq); O(rdma_cm_id, pd); O(rdma_cm_id, qp_type);

	S(rdma_cm_event);
	O(rdma_cm_event, id); O(rdma_cm_event, listen_id);
	O(rdma_cm_event, event); O(rdma_cm_event, status);
	O(rdma_cm_event, param);
	O(rdma_cm_event, param.conn);
	O(rdma_cm_event, param.conn.private_data);
	O(rdma_cm_event, param.conn.private_data_len);
	O(rdma_cm_event, param.conn.responder_resources);
	O(rdma_cm_event, param.conn.initiator_depth);
	O(rdma_cm_event, param.conn.flow_control);
	O(rdma_cm_event, param.conn.retry_count);
	O(rdma_cm_event, param.conn.rnr_retry_count);
	O(rdma_cm_event, param.conn.srq);
	O(rdma_cm_event, param.conn.qp_num);
	O(rdma_cm_event, param.ud);
	O(rdma_cm_event, param.ud.private_data);
	O(rdma_cm_event, param.ud.private_data_len);
	O(rdma_cm_event, param.ud.ah_attr);
	O(rdma_cm_event, param.ud.qp_num);
	O(rdma_cm_event, param.ud.qkey);

	S(rdma_event_channel);
	O(rdma_event_channel, fd);

	S(rdma_addrinfo);
	O(rdma_addrinfo, ai_flags); O(rdma_addrinfo, ai_family);
	O(rdma_addrinfo, ai_qp_type); O(rdma_addrinfo, ai_port_space);
	O(rdma_addrinfo, ai_src_len); O(rdma_addrinfo, ai_dst_len);
	O(rdma_addrinfo, ai_src_addr); O(rdma_addrinfo, ai_dst_addr);
	O(rdma_addrinfo, ai_src_canonname); O(rdma_addrinfo, ai_dst_canonname);
	O(rdma_addrinfo, ai_route_len); O(rdma_addrinfo, ai_route);
	O(rdma_addrinfo, ai_connect_len); O(rdma_addrinfo, ai_connect);
	O(rdma_addrinfo, ai_next);

	S(rdma_conn_param);
	O(rdma_conn_param, private_data); O(rdma_conn_param, private_data_len);
	O(rdma_conn_param, responder_resources);
	O(rdma_conn_param, initiator_depth); O(rdma_conn_param, flow_control);
	O(rdma_conn_param, retry_count); O(rdma_conn_param, rnr_retry_count);
	O(rdma_conn_param, srq); O(rdma_conn_param, qp_num);

	S(rdma_ud_param);
	O(rdma_ud_param, private_data); O(rdma_ud_param, private_data_len);
	O(rdma_ud_param, ah_attr); O(rdma_ud_param, qp_num);
	O(rdma_ud_param, qkey);

	S(rdma_route);
	O(rdma_route, addr); O(rdma_route, path_rec); O(rdma_route, num_paths);

	S(rdma_addr);
	O(rdma_addr, src_addr); O(rdma_addr, src_sin); O(rdma_addr, src_sin6);
	O(rdma_addr, src_storage);
	O(rdma_addr, dst_addr); O(rdma_addr, dst_sin); O(rdma_addr, dst_sin6);
	O(rdma_addr, dst_storage);
	O(rdma_addr, addr); O(rdma_addr, addr.ibaddr);
	O(rdma_addr, addr.ibaddr.sgid); O(rdma_addr, addr.ibaddr.dgid);
	O(rdma_addr, addr.ibaddr.pkey);

	S(ibv_sa_path_rec);
	O(ibv_sa_path_rec, dgid); O(ibv_sa_path_rec, sgid);
	O(ibv_sa_path_rec, dlid); O(ibv_sa_path_rec, slid);
	O(ibv_sa_path_rec, raw_traffic); O(ibv_sa_path_rec, flow_label);
	O(ibv_sa_path_rec, hop_limit); O(ibv_sa_path_rec, traffic_class);
	O(ibv_sa_path_rec, reversible); O(ibv_sa_path_rec, numb_path);
	O(ibv_sa_path_rec, pkey); O(ibv_sa_path_rec, sl);
	O(ibv_sa_path_rec, mtu_selector); O(ibv_sa_path_rec, mtu);
	O(ibv_sa_path_rec, rate_selector); O(ibv_sa_path_rec, rate);
	O(ibv_sa_path_rec, packet_life_time_selector);
	O(ibv_sa_path_rec, packet_life_time); O(ibv_sa_path_rec, preference);

	/* libibverbs: device and context */
	S(ibv_context);
	O(ibv_context, device); O(ibv_context, ops); O(ibv_context, cmd_fd);
	O(ibv_context, async_fd); O(ibv_context, num_comp_vectors);
	O(ibv_context, mutex); O(ibv_context, abi_compat);
	IBV_CONTEXT_OPS_SLOTS(CONTEXT_OPS_SLOT)

	S(ibv_context_ops);
	IBV_CONTEXT_OPS_SLOTS(OPS_SLOT)

	S(verbs_context);
	O(verbs_context, query_port); O(verbs_context, advise_mr);
	O(verbs_context, alloc_null_mr); O(verbs_context, read_counters);
	O(verbs_context, attach_counters_point_flow);
	O(verbs_context, create_counters); O(verbs_context, destroy_counters);
	O(verbs_context, reg_dm_mr); O(verbs_context, alloc_dm);
	O(verbs_context, free_dm); O(verbs_context, modify_flow_action_esp);
	O(verbs_context, destroy_flow_action);
	O(verbs_context, create_flow_action_esp);
	O(verbs_context, modify_qp_rate_limit);
	O(verbs_context, alloc_parent_domain); O(verbs_context, dealloc_td);
	O(verbs_context, alloc_td); O(verbs_context, modify_cq);
	O(verbs_context, post_srq_ops); O(verbs_context, destroy_rwq_ind_table);
	O(verbs_context, create_rwq_ind_table); O(verbs_context, destroy_wq);
	O(verbs_context, modify_wq); O(verbs_context, create_wq);
	O(verbs_context, query_rt_values); O(verbs_context, create_cq_ex);
	O(verbs_context, priv); O(verbs_context, query_device_ex);
	O(verbs_context, ibv_destroy_flow); O(verbs_context, ABI_placeholder2);
	O(verbs_context, ibv_create_flow); O(verbs_context, ABI_placeholder1);
	O(verbs_context, open_qp); O(verbs_context, create_qp_ex);
	O(verbs_context, get_srq_num); O(verbs_context, create_srq_ex);
	O(verbs_context, open_xrcd); O(verbs_context, close_xrcd);
	O(verbs_context, _ABI_placeholder3); O(verbs_context, sz);
	O(verbs_context, context);

	S(ibv_device);
	O(ibv_device, _ops); O(ibv_device, node_type);
	O(ibv_device, transport_type); O(ibv_device, name);
	O(ibv_device, dev_name); O(ibv_device, dev_path);
	O(ibv_device, ibdev_path);

	S(ibv_device_attr);
	O(ibv_device_attr, fw_ver); O(ibv_device_attr, node_guid);
	O(ibv_device_attr, sys_image_guid); O(ibv_device_attr, max_mr_size);
	O(ibv_device_attr, page_size_cap); O(ibv_device_attr, vendor_id);
	O(ibv_device_attr, vendor_part_id); O(ibv_device_attr, hw_ver);
	O(ibv_device_attr, max_qp); O(ibv_device_attr, max_qp_wr);
	O(ibv_device_attr, device_cap_flags); O(ibv_device_attr, max_sge);
	O(ibv_device_attr, max_sge_rd); O(ibv_device_attr, max_cq);
	O(ibv_device_attr, max_cqe); O(ibv_device_attr, max_mr);
	O(ibv_device_attr, max_pd); O(ibv_device_attr, max_qp_rd_atom);
	O(ibv_device_attr, max_ee_rd_atom); O(ibv_device_attr, max_res_rd_atom);
	O(ibv_device_attr, max_qp_init_rd_atom);
	O(ibv_device_attr, max_ee_init_rd_atom);
	O(ibv_device_attr, atomic_cap); O(ibv_device_attr, max_ee);
	O(ibv_device_attr, max_rdd); O(ibv_device_attr, max_mw);
	O(ibv_device_attr, max_raw_ipv6_qp); O(ibv_device_attr, max_raw_ethy_qp);
	O(ibv_device_attr, max_mcast_grp);
	O(ibv_device_attr, max_mcast_qp_attach);
	O(ibv_device_attr, max_total_mcast_qp_attach);
	O(ibv_device_attr, max_ah); O(ibv_device_attr, max_fmr);
	O(ibv_device_attr, max_map_per_fmr); O(ibv_device_attr, max_srq);
	O(ibv_device_attr, max_srq_wr); O(ibv_device_attr, max_srq_sge);
	O(ibv_device_attr, max_pkeys); O(ibv_device_attr, local_ca_ack_delay);
	O(ibv_device_attr, phys_port_cnt);

	S(ibv_port_attr);
	O(ibv_port_attr, state); O(ibv_port_attr, max_mtu);
	O(ibv_port_attr, active_mtu); O(ibv_port_attr, gid_tbl_len);
	O(ibv_port_attr, port_cap_flags); O(ibv_port_attr, max_msg_sz);
	O(ibv_port_attr, bad_pkey_cntr); O(ibv_port_attr, qkey_viol_cntr);
	O(ibv_port_attr, pkey_tbl_len); O(ibv_port_attr, lid);
	O(ibv_port_attr, sm_lid); O(ibv_port_attr, lmc);
	O(ibv_port_attr, max_vl_num); O(ibv_port_attr, sm_sl);
	O(ibv_port_attr, subnet_timeout); O(ibv_port_attr, init_type_reply);
	O(ibv_port_attr, active_width); O(ibv_port_attr, active_speed);
	O(ibv_port_attr, phys_state); O(ibv_port_attr, link_layer);
	O(ibv_port_attr, flags); O(ibv_port_attr, port_cap_flags2);

	SIZE(union, ibv_gid);
	OFF(union, ibv_gid, raw); OFF(union, ibv_gid, global);
	OFF(union, ibv_gid, global.subnet_prefix);
	OFF(union, ibv_gid, global.interface_id);

	S(ibv_async_event);
	O(ibv_async_event, element); O(ibv_async_event, element.cq);
	O(ibv_async_event, element.qp); O(ibv_async_event, element.srq);
	O(ibv_async_event, element.wq); O(ibv_async_event, element.port_num);
	O(ibv_async_event, event_type);

	/* libibverbs: resources */
	S(ibv_pd);
	O(ibv_pd, context); O(ibv_pd, handle);

	S(ibv_mr);
	O(ibv_mr, context); O(ibv_mr, pd); O(ibv_mr, addr); O(ibv_mr, length);
	O(ibv_mr, handle); O(ibv_mr, lkey); O(ibv_mr, rkey);

	S(ibv_cq);
	O(ibv_cq, context); O(ibv_cq, channel); O(ibv_cq, cq_context);
	O(ibv_cq, handle); O(ibv_cq, cqe); O(ibv_cq, mutex); O(ibv_cq, cond);
	O(ibv_cq, comp_events_completed); O(ibv_cq, async_events_completed);

	S(ibv_comp_channel);
	O(ibv_comp_channel, context); O(ibv_comp_channel, fd);
	O(ibv_comp_channel, refcnt);

	S(ibv_qp);
	O(ibv_qp, context); O(ibv_qp, qp_context); O(ibv_qp, pd);
	O(ibv_qp, send_cq); O(ibv_qp, recv_cq); O(ibv_qp, srq);
	O(ibv_qp, handle); O(ibv_qp, qp_num); O(ibv_qp, state);
	O(ibv_qp, qp_type); O(ibv_qp, mutex); O(ibv_qp, cond);
	O(ibv_qp, events_completed);

	S(ibv_qp_init_attr);
	O(ibv_qp_init_attr, qp_context); O(ibv_qp_init_attr, send_cq);
	O(ibv_qp_init_attr, recv_cq); O(ibv_qp_init_attr, srq);
	O(ibv_qp_init_attr, cap); O(ibv_qp_init_attr, qp_type);
	O(ibv_qp_init_attr, sq_sig_all);

	S(ibv_qp_attr);
	O(ibv_qp_attr, qp_state); O(ibv_qp_attr, cur_qp_state);
	O(ibv_qp_attr, path_mtu); O(ibv_qp_attr, path_mig_state);
	O(ibv_qp_attr, qkey); O(ibv_qp_attr, rq_psn); O(ibv_qp_attr, sq_psn);
	O(ibv_qp_attr, dest_qp_num); O(ibv_qp_attr, qp_access_flags);
	O(ibv_qp_attr, cap); O(ibv_qp_attr, ah_attr);
	O(ibv_qp_attr, alt_ah_attr); O(ibv_qp_attr, pkey_index);
	O(ibv_qp_attr, alt_pkey_index); O(ibv_qp_attr, en_sqd_async_notify);
	O(ibv_qp_attr, sq_draining); O(ibv_qp_attr, max_rd_atomic);
	O(ibv_qp_attr, max_dest_rd_atomic); O(ibv_qp_attr, min_rnr_timer);
	O(ibv_qp_attr, port_num); O(ibv_qp_attr, timeout);
	O(ibv_qp_attr, retry_cnt); O(ibv_qp_attr, rnr_retry);
	O(ibv_qp_attr, alt_port_num); O(ibv_qp_attr, alt_timeout);
	O(ibv_qp_attr, rate_limit);

	S(ibv_srq);
	O(ibv_srq, context); O(ibv_srq, srq_context); O(ibv_srq, pd);
	O(ibv_srq, handle); O(ibv_srq, mutex); O(ibv_srq, cond);
	O(ibv_srq, events_completed);

	S(ibv_srq_init_attr);
	O(ibv_srq_init_attr, srq_context); O(ibv_srq_init_attr, attr);

	S(ibv_ah);
	O(ibv_ah, context); O(ibv_ah, pd); O(ibv_ah, handle);

	S(ibv_ah_attr);
	O(ibv_ah_attr, grh); O(ibv_ah_attr, grh.dgid);
	O(ibv_ah_attr, grh.flow_label); O(ibv_ah_attr, grh.sgid_index);
	O(ibv_ah_attr, grh.hop_limit); O(ibv_ah_attr, grh.traffic_class);
	O(ibv_ah_attr, dlid); O(ibv_ah_attr, sl); O(ibv_ah_attr, src_path_bits);
	O(ibv_ah_attr, static_rate); O(ibv_ah_attr, is_global);
	O(ibv_ah_attr, port_num);

	/* libibverbs: data path */
	S(ibv_wc);
	O(ibv_wc, wr_id); O(ibv_wc, status); O(ibv_wc, opcode);
	O(ibv_wc, vendor_err); O(ibv_wc, byte_len); O(ibv_wc, imm_data);
	O(ibv_wc, invalidated_rkey); O(ibv_wc, qp_num); O(ibv_wc, src_qp);
	O(ibv_wc, wc_flags); O(ibv_wc, pkey_index); O(ibv_wc, slid);
	O(ibv_wc, sl); O(ibv_wc, dlid_path_bits);

	S(ibv_send_wr);
	O(ibv_send_wr, wr_id); O(ibv_send_wr, next); O(ibv_send_wr, sg_list);
	O(ibv_send_wr, num_sge); O(ibv_send_wr, opcode);
	O(ibv_send_wr, send_flags); O(ibv_send_wr, imm_data);
	O(ibv_send_wr, invalidate_rkey);
	O(ibv_send_wr, wr);
	O(ibv_send_wr, wr.rdma); O(ibv_send_wr, wr.rdma.remote_addr);
	O(ibv_send_wr, wr.rdma.rkey);
	O(ibv_send_wr, wr.atomic); O(ibv_send_wr, wr.atomic.remote_addr);
	O(ibv_send_wr, wr.atomic.compare_add); O(ibv_send_wr, wr.atomic.swap);
	O(ibv_send_wr, wr.atomic.rkey);
	O(ibv_send_wr, wr.ud); O(ibv_send_wr, wr.ud.ah);
	O(ibv_send_wr, wr.ud.remote_qpn); O(ibv_send_wr, wr.ud.remote_qkey);
	O(ibv_send_wr, qp_type); O(ibv_send_wr, qp_type.xrc);
	O(ibv_send_wr, qp_type.xrc.remote_srqn);
	O(ibv_send_wr, bind_mw); O(ibv_send_wr, bind_mw.mw);
	O(ibv_send_wr, bind_mw.rkey); O(ibv_send_wr, bind_mw.bind_info);
	O(ibv_send_wr, tso); O(ibv_send_wr, tso.hdr);
	O(ibv_send_wr, tso.hdr_sz); O(ibv_send_wr, tso.mss);

	S(ibv_recv_wr);
	O(ibv_recv_wr, wr_id); O(ibv_recv_wr, next); O(ibv_recv_wr, sg_list);
	O(ibv_recv_wr, num_sge);

	S(ibv_sge);
	O(ibv_sge, addr); O(ibv_sge, length); O(ibv_sge, lkey);

	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
