//! The error type of the core: a positive errno value.

use std::fmt;

/// A positive `errno` value, the only error the core returns.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

pub type Result<T> = std::result::Result<T, Errno>;

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFAULT: Errno = Errno(libc::EFAULT);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
    pub const EADDRNOTAVAIL: Errno = Errno(libc::EADDRNOTAVAIL);
    pub const ECONNREFUSED: Errno = Errno(libc::ECONNREFUSED);
    pub const ECONNRESET: Errno = Errno(libc::ECONNRESET);
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    pub const EISCONN: Errno = Errno(libc::EISCONN);
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    pub const EAFNOSUPPORT: Errno = Errno(libc::EAFNOSUPPORT);
    pub const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
    pub const ENOMSG: Errno = Errno(libc::ENOMSG);

    /// The calling thread's current `errno`, as left by a failed libc call.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    }

    /// The calling thread's `errno` as it stands (0 included).
    pub fn last_raw() -> i32 {
        // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
        unsafe { *libc::__errno_location() }
    }

    /// Stores this value in the calling thread's `errno`.
    pub fn set(self) {
        // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({}: {})", self.0, std::io::Error::from_raw_os_error(self.0))
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Turns a libc return value (-1 + errno on failure) into a `Result`.
pub fn check(ret: libc::c_int) -> Result<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Turns a verbs-style return value (0 on success, an errno otherwise) into a `Result`.
pub fn zero_or(ret: libc::c_int) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno(ret))
    }
}

/// Like [`check`] for `ssize_t` results.
pub fn check_size(ret: libc::ssize_t) -> Result<usize> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}
