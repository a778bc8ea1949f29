//! rdma-core's C types and constants, from `rdma-sys` (bindgen of the installed headers).
//! Re-exported in one place so the rest of the crate names them uniformly.

pub use rdma_sys::*;
