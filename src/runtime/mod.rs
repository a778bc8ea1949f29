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

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, taking over from a holder that panicked: a panic is caught at the C boundary
/// (`abi::call`) and the process goes on with the state the holder left, which every lock
/// here keeps consistent between statements.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `cv` with `g` (from [`lock`]), past a panicked holder, for the reason `lock` gives.
pub fn wait_on<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// Takes `l` for reading, past a panicked writer, for the reason `lock` gives.
pub fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Takes `l` for writing, past a panicked holder, for the reason `lock` gives.
pub fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
