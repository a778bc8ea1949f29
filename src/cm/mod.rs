//! The connection manager: event channels, CM ids, address and route resolution, listen /
//! connect / accept / reject / disconnect with private data, sync ids, the endpoint API and
//! `rdma_getaddrinfo`.
//!
//! The rendezvous is an abstract unix socket per bound id, named by (port space, port, IP), so
//! port spaces stay apart and a listener is reachable by every process of the host; the CM
//! messages (REQ, REP, RTU, REJ, DREQ, DREP) travel over the connection the active side opens.

pub mod addrinfo;
pub mod carrier;
pub mod channel;
pub mod ep;
pub mod id;
pub mod net;
pub mod proto;
pub mod qp;
pub mod resolve;
pub mod ud;
pub mod wire;

use crate::errno::Result;
use crate::sys::rdma_cm_id;

/// `Ok` if `id` is a live CM id of this process, `EINVAL` otherwise.
pub fn check_id(id: *mut rdma_cm_id) -> Result<()> {
    id::lookup(id).map(|_| ())
}
