//! The C boundary. Every exported function is written with [`entry!`], which:
//! * exports it unmangled with the C ABI;
//! * runs the body inside `catch_unwind`, so a panic becomes `EIO` and never crosses into C;
//! * converts the body's `Result` into the function's C convention, named by a [`Convention`]
//!   type: `MinusOne` (0 / −1 + errno), `Value<T>` (a value / −1 + errno), `NullOr<T>` (pointer /
//!   NULL + errno), `PositiveErrno` (0 / a positive errno, as most `ibv_*` calls), `ReregCode`
//!   (`ibv_rereg_mr`'s error codes), `Nothing`
//!   (void; errno set on error), `Infallible<T>` (a plain value; errors give `T::default()`) and
//!   `Forward<C>` (a forwarded call's own C return value; our errors in `C`'s convention).
//!
//! No logic lives here: bodies look up handles and call into `cm`/`verbs`.

use crate::errno::{Errno, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub mod native_trace;
pub mod native_trace_ex;
pub mod rdma_cma;
pub mod rdma_verbs;
pub mod route;
pub mod rsocket;
pub mod verbs;
pub mod verbs_dm;
pub mod verbs_ex;
pub mod verbs_inline;
pub mod verbs_inline_wr;
pub mod verbs_util;

/// Registers this layer's ops tables with verbs, which fills every context with them. Idempotent;
/// every entry that can create a context calls it, and a constructor calls it at load time.
pub fn init() {
    crate::verbs::device::register_ops(|| crate::verbs::device::ContextOps {
        ops: verbs::context_ops(),
        fill_ex: verbs_ex::fill_context_ops,
    });
    crate::cm::net::install();
}

extern "C" fn init_at_load() {
    // A panic must not unwind out of a constructor; the entries call init() again anyway.
    let _ = catch_unwind(init);
    // Read RDMASHIM_TRACE now, so that no call (the data path included) pays for it later.
    let _ = catch_unwind(crate::trace::init);
}

// Runs when the library is loaded (the staticlib is linked whole into the shared objects).
#[used]
#[link_section = ".init_array"]
static INIT_AT_LOAD: extern "C" fn() = init_at_load;

/// How a `Result` becomes a C return value.
pub trait Convention {
    type Ok;
    type C;
    fn to_c(r: Result<Self::Ok>) -> Self::C;
}

/// 0 on success, −1 with errno on failure.
pub struct MinusOne;
impl Convention for MinusOne {
    type Ok = ();
    type C = libc::c_int;
    fn to_c(r: Result<()>) -> libc::c_int {
        match r {
            Ok(()) => 0,
            Err(e) => {
                e.set();
                -1
            }
        }
    }
}

/// Integer return types and their −1 (`(size_t)-1` for `size_t`).
pub trait MinusOneValue {
    const MINUS_ONE: Self;
}
impl MinusOneValue for i32 {
    const MINUS_ONE: i32 = -1;
}
impl MinusOneValue for i64 {
    const MINUS_ONE: i64 = -1;
}
impl MinusOneValue for isize {
    const MINUS_ONE: isize = -1;
}
impl MinusOneValue for usize {
    const MINUS_ONE: usize = usize::MAX;
}

/// A value on success, −1 (as the return type spells it) with errno on failure.
pub struct Value<T>(std::marker::PhantomData<T>);
impl<T: MinusOneValue> Convention for Value<T> {
    type Ok = T;
    type C = T;
    fn to_c(r: Result<T>) -> T {
        r.unwrap_or_else(|e| {
            e.set();
            T::MINUS_ONE
        })
    }
}

/// A non-negative count on success, the negated errno on failure (errno is set too).
pub struct NegativeErrno;
impl Convention for NegativeErrno {
    type Ok = isize;
    type C = isize;
    fn to_c(r: Result<isize>) -> isize {
        r.unwrap_or_else(|e| {
            e.set();
            -(e.0 as isize)
        })
    }
}

/// A pointer on success, NULL with errno on failure.
pub struct NullOr<T>(std::marker::PhantomData<T>);
impl<T> Convention for NullOr<T> {
    type Ok = *mut T;
    type C = *mut T;
    fn to_c(r: Result<*mut T>) -> *mut T {
        r.unwrap_or_else(|e| {
            e.set();
            std::ptr::null_mut()
        })
    }
}

/// 0 on success, the positive errno on failure (errno is set too).
pub struct PositiveErrno;
impl Convention for PositiveErrno {
    type Ok = ();
    type C = libc::c_int;
    fn to_c(r: Result<()>) -> libc::c_int {
        match r {
            Ok(()) => 0,
            Err(e) => {
                e.set();
                e.0
            }
        }
    }
}

/// `ibv_rereg_mr`'s: 0 on success; `IBV_REREG_MR_ERR_INPUT` with errno for an input error (the
/// outer `Err`, the MR unchanged); `IBV_REREG_MR_ERR_CMD` with errno when the registration
/// itself failed (the inner `Err`).
pub struct ReregCode;
impl Convention for ReregCode {
    type Ok = Result<()>;
    type C = libc::c_int;
    fn to_c(r: Result<Result<()>>) -> libc::c_int {
        use crate::sys::ibv_rereg_mr_err_code::{IBV_REREG_MR_ERR_CMD, IBV_REREG_MR_ERR_INPUT};
        match r {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                e.set();
                IBV_REREG_MR_ERR_CMD
            }
            Err(e) => {
                e.set();
                IBV_REREG_MR_ERR_INPUT
            }
        }
    }
}

/// No return value; errno is set on failure.
pub struct Nothing;
impl Convention for Nothing {
    type Ok = ();
    type C = ();
    fn to_c(r: Result<()>) {
        if let Err(e) = r {
            e.set();
        }
    }
}

/// A plain value that has no error return; failures give the default value (and set errno).
pub struct Infallible<T>(std::marker::PhantomData<T>);
impl<T: Default> Convention for Infallible<T> {
    type Ok = T;
    type C = T;
    fn to_c(r: Result<T>) -> T {
        r.unwrap_or_else(|e| {
            e.set();
            T::default()
        })
    }
}

/// The C return value of the function a call forwarded to, handed back unchanged (errno as that
/// function left it); an error of the forwarder itself (a NULL or dead handle, a missing op)
/// in `C`'s convention. For the formerly inline calls of verbs.h ([`verbs_inline`]).
pub struct Forward<C>(std::marker::PhantomData<C>);
impl<C: Convention> Convention for Forward<C> {
    type Ok = C::C;
    type C = C::C;
    fn to_c(r: Result<C::C>) -> C::C {
        match r {
            Ok(v) => v,
            Err(e) => C::to_c(Err(e)),
        }
    }
}

/// Runs an exported function's body: panics become `EIO`, the result becomes `C::C`.
#[inline(always)]
pub fn call<C: Convention>(body: impl FnOnce() -> Result<C::Ok>) -> C::C {
    let r = catch_unwind(AssertUnwindSafe(body)).unwrap_or(Err(Errno::EIO));
    C::to_c(r)
}

/// [`call`] with its trace line (`RDMASHIM_TRACE`, [`crate::trace`]), when [`crate::trace::on`]
/// says so: `args` decodes the arguments before the body runs, `after` what it wrote through
/// them. [`entry_body!`] writes both and makes the choice, so that with tracing off neither
/// closure is even built. Tracing never changes the call: errno is kept as the call left it,
/// and a panic while decoding loses the line, nothing else.
#[cold]
#[inline(never)]
pub fn traced<C: Convention>(
    name: &'static str,
    args: impl FnOnce(&mut crate::trace::Line),
    after: impl FnOnce(&mut crate::trace::Line, i64),
    body: impl FnOnce() -> Result<C::Ok>,
) -> C::C
where
    C::C: crate::trace::Show,
{
    let saved = Errno::last_raw();
    let line = catch_unwind(AssertUnwindSafe(|| crate::trace::Call::start(name, args))).ok();
    Errno(saved).set();
    let r = catch_unwind(AssertUnwindSafe(body)).unwrap_or(Err(Errno::EIO));
    let errno = r.as_ref().err().map(|e| e.0);
    let c = C::to_c(r);
    let saved = Errno::last_raw();
    if let Some(line) = line {
        let _ = catch_unwind(AssertUnwindSafe(|| line.finish(&c, errno, after)));
    }
    Errno(saved).set();
    c
}

/// Declares exported C functions: `fn name(args) -> Convention { body returning Result }`.
#[macro_export]
macro_rules! entry {
    ($(
        $(#[$attr:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $conv:ty $(, then $hook:path)? $body:block
    )*) => {$(
        $(#[$attr])*
        ///
        /// # Safety
        /// Pointer arguments are checked (NULL and dead handles give an error); pointers to
        /// caller memory must be valid for the sizes the man page states.
        #[no_mangle]
        #[allow(clippy::missing_safety_doc, unused_unsafe)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> <$conv as $crate::abi::Convention>::C {
            // Passthrough (provider::native): the native library's function of the same name,
            // where it has one, called with the same arguments (and traced like ours).
            // With `both`, only a call whose object is the native library's ([`route`]).
            if $crate::forwarded!($($arg),*) {
                static NATIVE: $crate::provider::native::Symbol =
                    $crate::provider::native::Symbol::new(
                        match ::std::ffi::CStr::from_bytes_with_nul(
                            concat!(stringify!($name), "\0").as_bytes(),
                        ) {
                            Ok(c) => c,
                            Err(_) => panic!("a function name has no NUL"),
                        },
                    );
                if let Some(p) = NATIVE.get() {
                    type F = unsafe extern "C" fn($($ty),*) -> <$conv as $crate::abi::Convention>::C;
                    // SAFETY: p is rdma-core's function of this name, which its headers declare
                    // with this signature (ours are the same, from the same headers).
                    let f = unsafe { ::std::mem::transmute::<*mut ::std::ffi::c_void, F>(p) };
                    let _args = ($($arg,)*);
                    let r = $crate::entry_body!($name($($arg),*) -> $crate::abi::Forward<$conv> {
                        // SAFETY: the caller's arguments, passed on unchanged under the contract
                        // the native function has (the same man page).
                        Ok($crate::provider::native::as_one_libc(|| unsafe { f($($arg),*) }))
                    });
                    // `then`: a hook that looks at what the native call made (`native_trace`).
                    // SAFETY: the hook gets the native call's result (NULL, an error or a
                    // live object of its own) and the caller's arguments, valid per the man page.
                    $( unsafe { $hook(r, _args) }; )?
                    return r;
                }
            }
            $crate::entry_body!($name($($arg),*) -> $conv $body)
        }
    )*};
}

/// The body of an exported function (what [`entry!`] expands to, and what the hand-written
/// exports of `rdma_verbs.rs` and the ops-table callbacks use): [`crate::abi::call`], or
/// [`crate::abi::traced`] with the function's name and its arguments when tracing is on; the
/// one place calls are traced. `entry_body!(name(args) -> Convention {..})`, or with a string
/// for the name (a callback, named as the program calls it).
#[macro_export]
macro_rules! entry_body {
    ($name:ident($($arg:ident),* $(,)?) -> $conv:ty $body:block) => {
        $crate::entry_body!(@ stringify!($name), ($($arg),*) -> $conv $body)
    };
    // An ops-table callback, named as the program calls it: `"ibv_start_poll"(cq, attr) -> ..`.
    ($label:literal($($arg:ident),* $(,)?) -> $conv:ty $body:block) => {
        $crate::entry_body!(@ $label, ($($arg),*) -> $conv $body)
    };
    (@ $label:expr, ($($arg:ident),*) -> $conv:ty $body:block) => {{
        let body = move || $body;
        // Tracing off: one relaxed load, then the plain call.
        if !$crate::trace::on() {
            $crate::abi::call::<$conv>(body)
        } else {
            #[allow(unused_imports)]
            use $crate::trace::decode::{Plain as _, Typed as _};
            $crate::abi::traced::<$conv>(
                $label,
                |_l| {
                    $((&$crate::trace::decode::Arg(&$arg)).put($label, stringify!($arg), _l);)*
                },
                |_l, _ret| {
                    $((&$crate::trace::decode::Arg(&$arg))
                        .after($label, stringify!($arg), _ret, _l);)*
                },
                body,
            )
        }
    }};
}

/// Declares exported functions that exist for ABI completeness but are not implemented yet:
/// each fails cleanly with its convention and the given errno, never crashes.
#[macro_export]
macro_rules! unimplemented_entry {
    ($errno:expr => $(
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $conv:ty;
    )*) => {$(
        $crate::entry! {
            /// Not implemented yet: fails with the errno given in its declaration.
            fn $name($($arg: $ty),*) -> $conv {
                $(let _ = $arg;)*
                Err($errno)
            }
        }
    )*};
}

/// A handle that a formerly inline function uses as its inline body does: one of ours that
/// `lookup` finds alive (the guard it returns holds it meanwhile), or, in passthrough
/// ([`crate::provider::native`]), any non-NULL handle, which is the native library's (`None`:
/// only that library knows its objects, and its inline body trusts them as rdma-core's does).
/// With `both`, a non-NULL handle that `lookup` does not find is the native library's.
pub fn inline_handle<T, G>(
    p: *mut T,
    lookup: impl FnOnce(*mut T) -> Result<G>,
) -> Result<Option<G>> {
    use crate::provider::native;
    if native::forwards_all() {
        return if p.is_null() { Err(Errno::EINVAL) } else { Ok(None) };
    }
    match lookup(p) {
        // With `both`, a handle that is not ours is the native library's ([`route`]).
        Err(_) if native::on() && !p.is_null() => Ok(None),
        r => r.map(Some),
    }
}

/// Borrows a C out-parameter, `EINVAL` if NULL.
///
/// # Safety
/// `p` is NULL or valid for writes of `T`.
pub unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T> {
    // SAFETY: per the function's contract.
    unsafe { p.as_mut() }.ok_or(Errno::EINVAL)
}

/// Borrows a C in-parameter, `EINVAL` if NULL.
///
/// # Safety
/// `p` is NULL or valid for reads of `T`.
pub unsafe fn arg<'a, T>(p: *const T) -> Result<&'a T> {
    // SAFETY: per the function's contract.
    unsafe { p.as_ref() }.ok_or(Errno::EINVAL)
}
