//! The public librdmacm/libibverbs functions the rsocket layer is built on. rsockets sit above
//! the CM the way librdmacm's own rsocket code does: they use the same calls an application
//! makes (`rdma_create_id`, `rdma_connect`, `ibv_post_send`, `ibv_poll_cq`, …), so every
//! check, registry lookup and lock order of those entry points applies unchanged. This file is
//! the only place the layer names `crate::abi`.

pub use crate::abi::rdma_cma::{
    rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_connect, rdma_create_event_channel,
    rdma_create_id, rdma_create_qp, rdma_destroy_event_channel, rdma_destroy_id, rdma_destroy_qp,
    rdma_get_cm_event, rdma_listen, rdma_migrate_id, rdma_reject, rdma_resolve_addr,
    rdma_resolve_route, rdma_set_option,
};
pub use crate::abi::verbs::{
    ibv_ack_cq_events, ibv_create_ah, ibv_create_comp_channel, ibv_create_cq, ibv_dereg_mr,
    ibv_destroy_ah, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_modify_qp,
    ibv_poll_cq, ibv_post_recv, ibv_post_send, ibv_query_gid, ibv_reg_mr, ibv_req_notify_cq,
};
