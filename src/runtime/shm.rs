//! Shared memory segments backed by memfd, passed between processes as file descriptors.
//!
//! A peer holds the same file: if it could shrink it, our next access to the mapping would
//! raise SIGBUS. So every segment is sealed against shrinking and growing before it is passed,
//! and a segment received from a peer is refused unless it carries `F_SEAL_SHRINK` (which only
//! a memfd can) and is at least as large as expected.

use crate::errno::{check, Errno, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The seals we put on our own segments.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A memfd named `name` holding `content`, sealed: a descriptor whose file is ours alone, to
/// tell apart by [`inode`] (a context's `cmd_fd`), and whose content nobody can change.
pub fn token(name: &std::ffi::CStr, content: &[u8]) -> Result<OwnedFd> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: the name is a valid NUL-terminated string.
    let fd = check(unsafe { libc::memfd_create(name.as_ptr(), flags) })?;
    // SAFETY: fd was just returned by memfd_create and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if !content.is_empty() {
        // SAFETY: writes from a valid buffer of its length to our memfd.
        let n = unsafe { libc::write(fd.as_raw_fd(), content.as_ptr().cast(), content.len()) };
        if n != content.len() as isize {
            return Err(Errno::last());
        }
    }
    // SAFETY: fd is a valid memfd created with MFD_ALLOW_SEALING.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS | libc::F_SEAL_WRITE) })?;
    Ok(fd)
}

/// The inode number of the file behind `fd` (any descriptor), or `EBADF`.
pub fn inode(fd: std::os::fd::RawFd) -> Result<u64> {
    file_id(fd).map(|(_, ino)| ino)
}

/// The device and inode of the file behind `fd`: equal for two descriptors of one file only.
pub fn file_id(fd: std::os::fd::RawFd) -> Result<(u64, u64)> {
    // SAFETY: all-zero is a valid stat; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

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
// SAFETY: the handle itself is immutable after creation (pointer and length); concurrent access
// to the bytes behind it follows the ring protocol, as for Send.
unsafe impl Sync for Shm {}

impl Shm {
    /// Creates a zero-filled segment of `len` bytes, sealed at that size.
    pub fn create(len: usize) -> Result<Shm> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: the name is a valid NUL-terminated string.
        let fd = check(unsafe { libc::memfd_create(c"rdmashim".as_ptr(), flags) })?;
        // SAFETY: fd was just returned by memfd_create and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fd is a valid memfd.
        check(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        // SAFETY: fd is a valid memfd created with MFD_ALLOW_SEALING.
        check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) })?;
        Shm::map(fd, len)
    }

    /// Maps a segment received from a peer: `EINVAL` unless it is a (shmem) memfd sealed against
    /// shrinking and holding at least `len` bytes.
    pub fn map(fd: OwnedFd, len: usize) -> Result<Shm> {
        Shm::map_as(fd, len, true)
    }

    /// [`Shm::map`], read-only unless `writable` (a descriptor opened read-only maps only so).
    pub fn map_as(fd: OwnedFd, len: usize, writable: bool) -> Result<Shm> {
        // SAFETY: F_GET_SEALS on a descriptor we own; fails (EINVAL) for files without seals.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: an all-zero stat is a valid out-buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st is a valid out-pointer.
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_size < len as libc::off_t {
            return Err(Errno::EINVAL);
        }
        // Plain shmem only: a hugetlbfs memfd could fault when its page pool runs dry.
        // SAFETY: an all-zero statfs is a valid out-buffer for fstatfs.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and fs is a valid out-pointer.
        check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) })?;
        if fs.f_type != libc::TMPFS_MAGIC {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping of a file we hold; the kernel picks the address. The
        // file cannot shrink below `len` any more, so no access to the mapping can fault.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ },
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

/// Checks a doorbell's wake-up descriptor from a peer before we ever send to it: `EINVAL`
/// unless it is a unix datagram socket (sent to with `MSG_DONTWAIT`, which cannot block
/// whatever flags the peer sets on the shared file description; a pipe or an eventfd could).
pub fn check_peer_wake_socket(fd: &OwnedFd) -> Result<()> {
    let opt = |name| -> Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid out-pointers of the sizes given.
        check(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        })
        .map_err(|_| Errno::EINVAL)?;
        Ok(v)
    };
    if opt(libc::SO_DOMAIN)? != libc::AF_UNIX || opt(libc::SO_TYPE)? != libc::SOCK_DGRAM {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe the mapping made in map(); it is unmapped once, here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(flags: libc::c_uint, len: usize) -> OwnedFd {
        // SAFETY: valid name; the returned descriptor is owned by the OwnedFd.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), flags) };
        assert!(fd >= 0);
        // SAFETY: fd was just created.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: valid memfd.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) }, 0);
        fd
    }

    #[test]
    fn doorbells_must_be_datagram_sockets() {
        let mut p = [0; 2];
        // SAFETY: p has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK) }, 0);
        // SAFETY: both were just created and are owned here.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        assert_eq!(check_peer_wake_socket(&r).err(), Some(Errno::EINVAL));
        // SAFETY: plain eventfd(2); the descriptor is owned by the OwnedFd.
        let e = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)) };
        assert_eq!(check_peer_wake_socket(&e).err(), Some(Errno::EINVAL));
        for (ty, ok) in
            [(libc::SOCK_STREAM, false), (libc::SOCK_SEQPACKET, false), (libc::SOCK_DGRAM, true)]
        {
            let mut sv = [0; 2];
            // SAFETY: sv has room for two descriptors.
            assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) }, 0);
            // SAFETY: both were just created and are owned here.
            let (a, _b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
            assert_eq!(check_peer_wake_socket(&a).is_ok(), ok);
        }
    }

    #[test]
    fn own_segments_cannot_shrink() {
        let s = Shm::create(8192).unwrap();
        let fd = s.fd().unwrap().as_raw_fd();
        // SAFETY: fd is the live segment descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd, 0) }, -1);
        assert_eq!(Errno::last(), Errno::EPERM);
    }

    #[test]
    fn unsealed_or_small_segments_are_refused() {
        assert_eq!(Shm::map(memfd(libc::MFD_CLOEXEC, 8192), 8192).err(), Some(Errno::EINVAL));
        let fd = memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 4096);
        // SAFETY: valid sealable memfd.
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) }, 0);
        assert_eq!(Shm::map(fd, 8192).err(), Some(Errno::EINVAL));
        let fd = memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 8192);
        // SAFETY: valid sealable memfd.
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) }, 0);
        assert!(Shm::map(fd, 8192).is_ok());
    }
}
