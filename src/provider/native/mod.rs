//! Passthrough: the system's rdma-core (libibverbs and librdmacm), loaded privately with
//! `dlmopen(LM_ID_NEWLM)`, so that its own calls between its libraries and into its provider
//! plugins stay inside its namespace and never land back in our exports.
//!
//! The choice is made once per process, at the first call that needs it ([`on`]):
//! * `RDMASHIM_PROVIDER=soft`: the embedded provider.
//! * `native`: every call goes to the loaded library; when it cannot be loaded there are no
//!   devices (one line on stderr), never a silent fallback to the soft device.
//! * `auto`, unset or empty: native when the library lists at least one device, the soft
//!   provider otherwise. Without `RDMASHIM_NATIVE_LIBDIR` the library is loaded only when sysfs
//!   shows a uverbs device other than our own (the device view of `rdmashim run` describes
//!   `soft0`, which is not hardware), so a machine without RDMA hardware pays nothing.
//! * `both`: the native library's devices, then the soft device, in one list. Each call goes
//!   where its object lives: an object of ours (its first argument, see `abi::route`) is
//!   served here, any other is the native library's and its call is forwarded. The objects'
//!   own ops serve the inlined data path of each. librdmacm stays ours (its ids resolve to the
//!   soft device). When the library cannot be loaded, the soft device alone is listed (one
//!   line on stderr says why).
//!
//! `RDMASHIM_NATIVE_LIBDIR=DIR` loads `DIR/libibverbs.so.1` and `DIR/librdmacm.so.1` instead of
//! the system's (the tests point it at our own drop-in libraries, standing in for hardware).
//! rdmashim loaded outside the base namespace is such a stand-in, or someone's native library:
//! it always runs the soft provider itself and never forwards (or traces) again.
//!
//! The C boundary forwards each export by name ([`Symbol`]); objects are the native library's
//! own, so the data path that programs inline (`qp->context->ops.post_send`) reaches its ops
//! with no hop through us.

use crate::errno::Errno;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// What this process runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The embedded provider.
    Soft,
    /// Every call forwarded to the loaded rdma-core.
    Native,
    /// The loaded rdma-core's devices and ours: each call goes where its object lives.
    Both,
    /// No provider: an empty device list (a bad `RDMASHIM_PROVIDER`, or `native` unloadable).
    Nothing,
}

static CHOICE: OnceLock<Mode> = OnceLock::new();

/// Whether calls may be forwarded: one load once the choice is made.
#[inline(always)]
pub fn on() -> bool {
    matches!(mode(), Mode::Native | Mode::Both)
}

/// Whether every call is forwarded, whatever its object (`native`); with `both`, only those
/// whose object is not ours are.
#[inline(always)]
pub fn forwards_all() -> bool {
    mode() == Mode::Native
}

/// The process's choice, made on the first call.
pub fn mode() -> Mode {
    *CHOICE.get_or_init(decide)
}

/// Whether this copy of rdmashim was loaded outside the base namespace (a stand-in for the
/// native library, or `dlmopen`ed by someone): it then serves calls itself.
pub fn inside_another_namespace() -> bool {
    static INSIDE: OnceLock<bool> = OnceLock::new();
    *INSIDE.get_or_init(|| {
        // SAFETY: Dl_info is plain data; dladdr fills it for an address of ours.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let me = inside_another_namespace as *const c_void;
        // SAFETY: `me` is an address in this object; `info` is a valid out-pointer.
        if unsafe { libc::dladdr(me, &mut info) } == 0 || info.dli_fname.is_null() {
            return false;
        }
        // dlopen from our code looks in our own namespace; NOLOAD only finds what is there.
        // SAFETY: dli_fname is the NUL-terminated path of this object.
        let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if h.is_null() {
            return false;
        }
        let mut lmid: libc::Lmid_t = libc::LM_ID_BASE;
        // SAFETY: a valid handle; RTLD_DI_LMID writes one Lmid_t.
        let r =
            unsafe { libc::dlinfo(h, libc::RTLD_DI_LMID, (&mut lmid as *mut libc::Lmid_t).cast()) };
        // SAFETY: the handle from dlopen above, closed once (the object stays: it is us).
        unsafe { libc::dlclose(h) };
        r == 0 && lmid != libc::LM_ID_BASE
    })
}

fn say(what: &str) {
    // A closed stderr is no reason to fail: the empty device list says it too.
    let _ = writeln!(std::io::stderr(), "rdmashim: {what}");
}

fn decide() -> Mode {
    if inside_another_namespace() {
        return Mode::Soft;
    }
    let v = std::env::var_os("RDMASHIM_PROVIDER");
    match v.as_deref().map(|s| s.to_str()) {
        None | Some(Some("" | "auto")) => auto(),
        Some(Some("soft")) => Mode::Soft,
        Some(Some("both")) => match library() {
            Ok(_) => Mode::Both,
            Err(why) => {
                say(&format!("RDMASHIM_PROVIDER=both: {why}: the soft device only"));
                Mode::Soft
            }
        },
        Some(Some("native")) => match library() {
            Ok(_) => Mode::Native,
            Err(why) => {
                say(&format!("RDMASHIM_PROVIDER=native: {why}: no RDMA devices"));
                Mode::Nothing
            }
        },
        _ => {
            let shown = v.as_deref().map(|s| s.to_string_lossy()).unwrap_or_default();
            say(&format!(
                "RDMASHIM_PROVIDER={shown} is not a known provider (auto, soft, native, both): no RDMA devices"
            ));
            Mode::Nothing
        }
    }
}

fn auto() -> Mode {
    if std::env::var_os("RDMASHIM_NATIVE_LIBDIR").is_none() && !hardware_in_sysfs() {
        return Mode::Soft;
    }
    // How many devices the library lists (the list goes back to it at once).
    let Some((list, n)) = devices() else { return Mode::Soft };
    // SAFETY: the list devices() just returned, freed once, here.
    unsafe { free_devices(list) };
    if n > 0 {
        Mode::Native
    } else {
        Mode::Soft
    }
}

/// A uverbs device in sysfs that is not ours (`ibdev` other than the soft device's name).
fn hardware_in_sysfs() -> bool {
    let Ok(dir) = std::fs::read_dir("/sys/class/infiniband_verbs") else { return false };
    dir.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("uverbs")
            && std::fs::read_to_string(e.path().join("ibdev"))
                .is_ok_and(|d| d.trim() != super::SOFT_DEVICE_NAME)
    })
}

/// The loaded rdma-core: its two libraries' handles in their own namespace.
pub struct Library {
    verbs: usize,
    cm: usize,
}

impl Library {
    /// The native function `name` (NUL-terminated), from librdmacm or libibverbs.
    fn find(&self, name: &CStr) -> *mut c_void {
        for h in [self.cm, self.verbs] {
            if h != 0 {
                // SAFETY: a live handle from dlmopen (never closed); name is NUL-terminated.
                let p = unsafe { libc::dlsym(h as *mut c_void, name.as_ptr()) };
                if !p.is_null() {
                    return p;
                }
            }
        }
        std::ptr::null_mut()
    }
}

/// The native library's function `name`, if it is loaded and has one (for the few calls that
/// `both` sends to both libraries: the device list, fork set-up).
pub fn function(name: &CStr) -> Option<*mut c_void> {
    let p = library().ok()?.find(name);
    (!p.is_null()).then_some(p)
}

/// Runs `call`, a call into the native library, as if the program and the library shared one
/// libc: the library's namespace has a copy of its own, whose `errno` the program never reads
/// and whose `environ` is the array the program had when the library was loaded.
/// * `errno`: the library's starts as the program's (a call that leaves it alone leaves it as
///   it was) and the program's ends as the library's (the `errno` of a failed `rdma_*` call,
///   a NULL from `ibv_reg_mr` …).
/// * `environ`: the library's is the program's current array. A `setenv` since the load may
///   have moved the array and freed the old one, which the library's `getenv` (rdma-core reads
///   its variables when it opens a device or starts librdmacm) would otherwise read.
pub fn as_one_libc<T>(call: impl FnOnce() -> T) -> T {
    let Some(theirs) = native_libc() else { return call() };
    extern "C" {
        static mut environ: *mut *mut c_char;
    }
    // SAFETY: `theirs.environ` is the address of the native libc's `__environ`, a pointer-sized
    // global that lives as long as the library (never unloaded); ours is read by value, and
    // `setenv` racing with this call is the program's own race, as with one libc.
    unsafe { *theirs.environ = environ };
    // SAFETY: `errno_at` is the native libc's `__errno_location`, which returns this thread's
    // `errno` in that libc, a live int for as long as the thread runs.
    unsafe { *(theirs.errno_at)() = Errno::last_raw() };
    let r = call();
    // SAFETY: the native libc's `__errno_location` again, on the thread that made the call:
    // it returns that thread's live `errno` in that libc.
    Errno(unsafe { *(theirs.errno_at)() }).set();
    r
}

/// What [`as_one_libc`] reaches in the native namespace's libc.
#[derive(Clone, Copy)]
struct NativeLibc {
    errno_at: unsafe extern "C" fn() -> *mut c_int,
    environ: *mut *mut *mut c_char,
}

// SAFETY: two addresses in the native libc (a function and a global), valid from any thread.
unsafe impl Send for NativeLibc {}
// SAFETY: the struct holds two addresses that are only read (the global behind one is
// written in `as_one_libc`, not through a shared borrow of this struct).
unsafe impl Sync for NativeLibc {}

/// The native namespace's `__errno_location` and `__environ`, looked up once through
/// libibverbs' own dependencies (that namespace's libc); `None` if the library is not loaded
/// or either is missing.
fn native_libc() -> Option<NativeLibc> {
    static LIBC: OnceLock<Option<NativeLibc>> = OnceLock::new();
    *LIBC.get_or_init(|| {
        let l = library().ok().filter(|l| l.verbs != 0)?;
        let find = |name: &CStr| {
            // SAFETY: a live handle from dlmopen (never closed); the name is NUL-terminated.
            let p = unsafe { libc::dlsym(l.verbs as *mut c_void, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let errno_at = find(c"__errno_location")?;
        let environ = find(c"__environ")?;
        Some(NativeLibc {
            // SAFETY: glibc's `__errno_location` has this signature (errno.h).
            errno_at: unsafe {
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *mut c_int>(errno_at)
            },
            environ: environ.cast(),
        })
    })
}

/// [`function`] when both libraries are in use (`both`), for the calls that go to both.
fn both_function(name: &CStr) -> Option<*mut c_void> {
    (mode() == Mode::Both).then(|| function(name)).flatten()
}

/// With `both`, the native library's `ibv_fork_init` (its devices pin memory, so it prepares
/// for fork too); `None` otherwise.
pub fn fork_init() -> Option<c_int> {
    let f = both_function(c"ibv_fork_init")?;
    // SAFETY: rdma-core's function of this name: `int ibv_fork_init(void)`.
    Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(f)() })
}

/// With `both`, the native library's `ibv_is_fork_initialized`; `None` otherwise.
pub fn fork_status() -> Option<std::ffi::c_uint> {
    type F = unsafe extern "C" fn() -> std::ffi::c_uint;
    let f = both_function(c"ibv_is_fork_initialized")?;
    // SAFETY: rdma-core's function of this name: `enum ibv_fork_status (void)`.
    Some(unsafe { std::mem::transmute::<*mut c_void, F>(f)() })
}

/// With `both`, the native library's `ibv_dontfork_range` (`dontfork`) or `ibv_dofork_range`
/// for the range at address `base`, `size` bytes (an address only: the range is advised to the
/// kernel, never read); `None` otherwise.
pub fn fork_range(dontfork: bool, base: usize, size: usize) -> Option<c_int> {
    type F = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
    let name = if dontfork { c"ibv_dontfork_range" } else { c"ibv_dofork_range" };
    let f = both_function(name)?;
    // SAFETY: rdma-core's function of this name: `int (void *base, size_t size)`; the range is
    // only recorded and advised by the kernel (madvise), never dereferenced by it.
    Some(unsafe { std::mem::transmute::<*mut c_void, F>(f)(base as *mut c_void, size) })
}

/// The native library's device list (`ibv_get_device_list`) and its length, to be handed back
/// to [`free_devices`]; `None` when no native library is loaded or the call fails.
pub fn devices() -> Option<(*mut *mut c_void, usize)> {
    type List = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
    let l = function(c"ibv_get_device_list")?;
    // SAFETY: rdma-core's ibv_get_device_list has this signature.
    let list = unsafe { std::mem::transmute::<*mut c_void, List>(l) };
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer; the list is freed through free_devices by its own library.
    let p = unsafe { list(&mut n) };
    (!p.is_null()).then_some((p, n.max(0) as usize))
}

/// Frees a list from [`devices`] with the native library's `ibv_free_device_list`.
///
/// # Safety
/// `list` came from [`devices`] and is freed once.
pub unsafe fn free_devices(list: *mut *mut c_void) {
    type Free = unsafe extern "C" fn(*mut *mut c_void);
    if let Some(f) = function(c"ibv_free_device_list") {
        // SAFETY: rdma-core's function of this name and signature, given the list it made
        // (the caller's contract).
        unsafe { std::mem::transmute::<*mut c_void, Free>(f)(list) };
    }
}

/// Where the system's libraries are: the multiarch directory first, as Debian installs them.
fn system_dirs() -> Vec<String> {
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    vec![multiarch, "/usr/lib64".into(), "/usr/lib".into()]
}

fn load(path: &str, lmid: libc::Lmid_t) -> Result<usize, String> {
    let c = CString::new(path).map_err(|_| format!("{path}: bad path"))?;
    // SAFETY: a NUL-terminated path; RTLD_LOCAL keeps its symbols out of any global scope.
    let h = unsafe { libc::dlmopen(lmid, c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let e = unsafe { libc::dlerror() };
        let why = if e.is_null() {
            "cannot be loaded".into()
        } else {
            // SAFETY: non-NULL, NUL-terminated (checked above).
            unsafe { CStr::from_ptr(e as *const c_char) }.to_string_lossy().into_owned()
        };
        return Err(why);
    }
    Ok(h as usize)
}

/// Makes the base namespace's libc count the process as multi-threaded, before the library
/// loaded into a namespace of its own (with a libc of its own) can start threads there.
///
/// glibc keeps "single-threaded" per copy of libc, and only that copy's `pthread_create`
/// clears it. The dynamic linker allocates threads' TLS blocks with the base libc's `malloc`,
/// from any thread, and that `malloc` takes no lock while its copy believes the process
/// single-threaded. A program that starts no thread itself, with a native library that does
/// (our stand-in in `tests/tools/passthrough.py` starts its progress thread), thus had two
/// threads in the base heap without its lock: about 1 in 100 traced rdma_server/rdma_client
/// runs under passthrough aborted in `malloc` or faulted on a TLS block from freed memory.
/// One thread started and joined here, through the base libc, clears the flag for good.
fn tell_our_libc_threads_exist() {
    if let Ok(t) = std::thread::Builder::new().name("rdmashim-mt".into()).spawn(|| ()) {
        let _ = t.join();
    }
}

/// Loads rdma-core once: libibverbs in a new namespace, librdmacm beside it (optional: a
/// machine may have verbs only).
pub fn library() -> Result<&'static Library, String> {
    static LIB: OnceLock<Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let dirs = match std::env::var("RDMASHIM_NATIVE_LIBDIR") {
            Ok(d) => vec![d],
            Err(_) => system_dirs(),
        };
        let dir = dirs
            .iter()
            .find(|d| std::path::Path::new(&format!("{d}/libibverbs.so.1")).exists())
            .ok_or_else(|| format!("no libibverbs.so.1 in {}", dirs.join(", ")))?;
        tell_our_libc_threads_exist();
        let verbs = load(&format!("{dir}/libibverbs.so.1"), libc::LM_ID_NEWLM)?;
        let mut lmid: libc::Lmid_t = 0;
        // SAFETY: a live handle; RTLD_DI_LMID writes one Lmid_t.
        let r = unsafe {
            libc::dlinfo(
                verbs as *mut c_void,
                libc::RTLD_DI_LMID,
                (&mut lmid as *mut libc::Lmid_t).cast(),
            )
        };
        let cm_path = format!("{dir}/librdmacm.so.1");
        let cm = if r == 0 && std::path::Path::new(&cm_path).exists() {
            load(&cm_path, lmid).unwrap_or(0)
        } else {
            0
        };
        Ok(Library { verbs, cm })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// One export's native counterpart, looked up on first use: a `static` per exported function.
pub struct Symbol {
    name: &'static CStr,
    /// The function; [`MISSING`] once looked up and absent.
    addr: AtomicPtr<c_void>,
}

/// Whether `name` is one of rdma-core's `static inline` functions, which we export under our
/// own version nodes (`RDMASHIM_*` in `abi/*.map`, docs/INLINE-API.md). rdma-core never has
/// them, so they are never forwarded: our stand-in (which exports them too) is then asked for
/// them no more than rdma-core would be, and our body runs them through the objects' own
/// function pointers.
fn inline_only(name: &CStr) -> bool {
    static NAMES: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let maps = [
            include_str!("../../../abi/libibverbs.map"),
            include_str!("../../../abi/librdmacm.map"),
        ];
        let mut set = std::collections::HashSet::new();
        for map in maps {
            let mut ours = false;
            for line in map.lines().map(str::trim) {
                if line.ends_with('{') {
                    ours = line.starts_with("RDMASHIM_");
                } else if let Some(n) = line.strip_suffix(';').filter(|n| ours && is_ident(n)) {
                    set.insert(n);
                }
            }
        }
        set
    });
    name.to_str().is_ok_and(|n| names.contains(n))
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

/// A looked-up name the native library does not have (rdma-core's `static inline` functions).
const MISSING: *mut c_void = 1 as *mut c_void;

impl Symbol {
    pub const fn new(name: &'static CStr) -> Symbol {
        Symbol { name, addr: AtomicPtr::new(std::ptr::null_mut()) }
    }

    /// The native function, if the library has one of this name.
    pub fn get(&self) -> Option<*mut c_void> {
        let mut p = self.addr.load(Ordering::Acquire);
        if p.is_null() {
            p = if inline_only(self.name) {
                std::ptr::null_mut()
            } else {
                library().map_or(std::ptr::null_mut(), |l| l.find(self.name))
            };
            if p.is_null() {
                p = MISSING;
            }
            self.addr.store(p, Ordering::Release);
        }
        (p != MISSING).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::inline_only;

    #[test]
    fn inline_only_names_come_from_our_version_nodes() {
        for n in [c"ibv_wr_start", c"__ibv_reg_mr", c"ibv_start_poll", c"rdma_get_send_comp"] {
            assert!(inline_only(n), "{n:?} is a static inline of rdma-core");
        }
        for n in [c"ibv_open_device", c"ibv_get_cq_event", c"rdma_create_id", c"global", c""] {
            assert!(!inline_only(n), "{n:?} is not");
        }
    }
}
