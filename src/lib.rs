//! rdmashim: a C-ABI-compatible librdmacm and libibverbs with an embedded software RDMA provider.
//!
//! Layers (data flows one way, no module names a layer above it): [`abi`] (the C boundary,
//! nothing else) → [`cm`] (connection manager) → [`verbs`] (what every provider shares) →
//! [`provider`] (the seam and the fabric behind it); [`runtime`] (progress engine, sockets, shm)
//! serves every layer below `abi`.
//!
//! # Safety vocabulary
//! Exported functions take raw pointers from C. "A live handle" means a pointer this library
//! handed out and has not destroyed; every handle is checked against its registry before use,
//! so a NULL, foreign or destroyed handle gives an error, never a dereference.

pub mod abi;
pub mod cm;
pub mod errno;
pub mod handle;
pub mod provider;
pub mod rsocket;
pub mod runtime;
pub mod sys;
pub mod trace;
pub mod verbs;

pub use errno::{Errno, Result};
