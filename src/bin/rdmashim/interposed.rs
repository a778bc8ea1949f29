//! The device view without a mount namespace: the view's files are written to a private
//! directory, and `librdmashim-view.so`, preloaded beside the chosen loading mode, redirects the
//! program's file calls under `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and
//! `/dev/infiniband` there (`RDMASHIM_VIEW_ROOT`). The launcher stays as the program's parent
//! to remove the directory when the program ends, and exits as the program did.

use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

/// The interposing library's file name, beside `librdmashim.so`.
pub const LIBRARY: &str = "librdmashim-view.so";

/// A view directory, removed when dropped.
pub struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the view into a new private directory and sets `cmd` up to see it through
/// `lib_dir/librdmashim-view.so`.
pub fn prepare(lib_dir: &Path, cmd: &mut Command) -> Result<Tree, String> {
    let lib = lib_dir.join(LIBRARY);
    if !lib.is_file() {
        return Err(format!("{} does not exist", lib.display()));
    }
    let tree = Tree(private_dir()?);
    let root = tree.0.to_str().ok_or("the temporary directory's name is not UTF-8")?;
    super::view::write_tree(root)?;
    cmd.env("RDMASHIM_VIEW_ROOT", &tree.0);
    // After what the loading mode preloads (or what we were given): our libraries first.
    let preload = super::set_for(cmd, "LD_PRELOAD")
        .or_else(|| std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()));
    let mut v = OsString::new();
    if let Some(p) = preload {
        v.push(p);
        v.push(":");
    }
    v.push(lib);
    cmd.env("LD_PRELOAD", v);
    Ok(tree)
}

/// A new directory only we can read, under `$TMPDIR` (or /tmp).
fn private_dir() -> Result<PathBuf, String> {
    let template = std::env::temp_dir().join("rdmashim-view-XXXXXX");
    let c = CString::new(template.as_os_str().as_encoded_bytes())
        .map_err(|_| "the temporary directory's name holds a NUL")?;
    let mut bytes = c.into_bytes_with_nul();
    // SAFETY: `bytes` is a writable NUL-terminated template ending in XXXXXX, as mkdtemp needs;
    // it rewrites those six bytes in place and creates the directory with mode 0700.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(format!("{}: {e}", template.display()));
    }
    bytes.pop();
    Ok(PathBuf::from(OsString::from(String::from_utf8_lossy(&bytes).into_owned())))
}

/// The running program, for the signal handler to forward signals to (0 before it starts).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that came before the program started, to pass on once it has.
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes plain integers.
        unsafe { libc::kill(pid, sig) };
    } else {
        PENDING.store(sig, Ordering::SeqCst);
    }
}

/// Runs `cmd` as our child with the view `tree`, removes the tree when it ends, and exits as
/// it did: its status, or the signal that killed it raised on ourselves.
pub fn run(mut cmd: Command, tree: Tree, name: &str) -> ExitCode {
    // What is sent to us alone goes on to the program: the handlers are in place before it
    // starts (a signal meanwhile waits in PENDING), so none can end us and leave the tree
    // behind. exec gives the program the default actions back.
    let handler = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: installs a handler that only touches atomics and calls kill
        // (async-signal-safe).
        unsafe { libc::signal(sig, handler) };
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rdmashim: cannot run {name}: {e}");
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let early = PENDING.swap(0, Ordering::SeqCst);
    if early != 0 {
        // SAFETY: kill with plain integers, to the child we just started.
        unsafe { libc::kill(child.id() as i32, early) };
    }
    // A terminal sends SIGINT and SIGQUIT to the program too (one process group): we only
    // outlive it. Ignored only now: an ignored signal would stay ignored across exec.
    // SAFETY: signal() with SIG_IGN.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let status = child.wait();
    drop(tree);
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) if s.code().is_some() => ExitCode::from(s.code().unwrap_or(1) as u8),
        Ok(s) => {
            let sig = s.signal().unwrap_or(libc::SIGKILL);
            // SAFETY: restores the default action and raises the signal the program died of,
            // so our parent sees the same end; plain integers only.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            ExitCode::from(128 + sig as u8)
        }
        Err(e) => {
            eprintln!("rdmashim: waiting for {name}: {e}");
            ExitCode::from(1)
        }
    }
}
