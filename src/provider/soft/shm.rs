//! Shared memory segments backed by memfd, passed between processes as file descriptors.

use crate::errno::{check, Errno, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A shared mapping of a memfd.
pub struct Shm {
    ptr: *mut u8,
    len: usize,
    /// Kept only while the segment still has to be passed to a peer (see `close_fd`).
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is shared memory accessed only through atomics or by the single owner of
// each region (ring protocol), so moving the handle between threads is sound.
unsafe impl Send for Shm {}
// SAFETY: see above.
unsafe impl Sync for Shm {}

impl Shm {
    /// Creates a zero-filled segment of `len` bytes.
    pub fn create(len: usize) -> Result<Shm> {
        // SAFETY: the name is a valid NUL-terminated string.
        let fd = check(unsafe { libc::memfd_create(c"rdmashim".as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: fd was just returned by memfd_create and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fd is a valid memfd.
        check(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        Shm::map(fd, len)
    }

    /// Maps a segment received from a peer; `len` is checked against the file size.
    pub fn map(fd: OwnedFd, len: usize) -> Result<Shm> {
        // SAFETY: an all-zero stat is a valid out-buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st is a valid out-pointer.
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if (st.st_size as usize) < len {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping of a file we hold; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Shm { ptr: ptr.cast(), len, fd: Some(fd) })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segment's descriptor, to pass to a peer; `EBADF` once closed.
    pub fn fd(&self) -> Result<&OwnedFd> {
        self.fd.as_ref().ok_or(Errno::EBADF)
    }

    /// Closes the descriptor: the mapping stays. Saves a descriptor per segment.
    pub fn close_fd(&mut self) {
        self.fd = None;
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe the mapping made in map(); it is unmapped once, here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
