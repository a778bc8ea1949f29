//! RDMA providers: the fabric under the verbs layer.
//!
//! `soft` is the embedded software provider (the default where no RDMA device exists, forced by
//! `RDMASHIM_PROVIDER=soft`). Passthrough to real hardware (`native`) is not built yet.

pub mod soft;

/// Which provider the environment asks for.
pub fn selected() -> &'static str {
    match std::env::var("RDMASHIM_PROVIDER").as_deref() {
        Ok("native") => "native",
        _ => "soft",
    }
}
