//! Process-wide runtime shared by the connection manager and the providers: the progress engine
//! (one epoll thread, timers, doorbells), eventfd-backed queues, unix sockets with their accept,
//! credential and fork plumbing, shared memory, and the dual-stack UDP sockets with their
//! route lookup. It names no higher layer.

pub mod accept;
pub mod access;
pub mod bell;
pub mod direct;
pub mod engine;
pub mod fdqueue;
pub mod fork;
pub mod ifaddrs;
pub mod maps;
pub mod pcap;
pub mod shm;
pub mod socket;
pub mod spin;
pub mod udp;
pub mod unix;
