//! The embedded software provider.
//!
//! Same-host transport, one scheme for threads and processes alike:
//! * every RC QP owns an abstract unix socket named after its QPN (so QPNs are unique per
//!   network namespace and lead to the owning process without a daemon);
//! * when a QP reaches RTR, the QP with the smaller QPN connects to its peer's socket and hands it
//!   a shared-memory segment (memfd) holding two single-producer rings, one per direction, plus
//!   its process doorbell; the peer answers with its own doorbell ([`link`]);
//! * data moves by copying into and out of ring slots; the sender's completion is generated when
//!   the receiver has consumed the message into a posted receive (the RC ACK);
//! * work moves when the application posts or polls (no system call on that path) and otherwise
//!   in a per-process progress thread ([`engine`]) that sleeps in `epoll_wait` and is woken through
//!   an eventfd only when it has said, in shared memory, that it is asleep.

pub mod accept;
pub mod access;
pub mod datagram;
pub mod engine;
pub mod fork;
pub mod link;
pub mod ring;
pub mod roce;
pub mod segcheck;
pub mod shm;
pub mod transport;
pub mod unix;
