//! `RDMASHIM_TRACE`: one line per librdmacm/libibverbs call that goes through the C boundary
//! (and per CM event and work completion it hands out), written to a file or to stderr.
//!
//! The abi layer's one body macro ([`crate::entry_body!`], behind every `entry!`) asks [`on`]
//! first: when tracing is off that is one relaxed atomic load and nothing else (no lock, no
//! formatting, no allocation). When it is on ([`crate::abi::traced`]), the arguments are decoded before the call (the call may free what they point at), the
//! result, errno and duration after it, and the whole line, with any follow-up lines (events,
//! completions), goes out with a single `write(2)`: lines of different threads and processes
//! never interleave (the file is opened `O_APPEND`).
//!
//! Tracing never changes a result: the writer ignores its own errors, decoders only read memory
//! the call's contract lets the library read, and a panic while formatting is caught by the
//! caller's `catch_unwind` boundary after the call's result has been computed (the line is
//! simply lost). The decoders live in [`decode`].

pub mod decode;

use std::fmt::Write as _;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

/// The environment variable naming the trace's destination: a path, or `stderr` / `-`.
pub const ENV: &str = "RDMASHIM_TRACE";

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static SINK: OnceLock<Option<RawFd>> = OnceLock::new();

/// Whether calls are traced. After the first call: one relaxed load.
#[inline(always)]
pub fn on() -> bool {
    match STATE.load(Relaxed) {
        OFF => false,
        ON => true,
        _ => init(),
    }
}

/// Reads `RDMASHIM_TRACE` once (also called at load time, so the data path never gets here).
#[cold]
pub fn init() -> bool {
    let on = sink().is_some();
    STATE.store(if on { ON } else { OFF }, Relaxed);
    on
}

fn sink() -> Option<RawFd> {
    *SINK.get_or_init(|| {
        let dest = std::env::var_os(ENV)?;
        // A copy loaded as another's native library (the passthrough stand-in) stays quiet:
        // the calls are traced once, where the program made them.
        if crate::provider::native::inside_another_namespace() {
            return None;
        }
        open(dest.to_str()?)
    })
}

fn open(dest: &str) -> Option<RawFd> {
    match dest {
        "" => None,
        "stderr" | "-" => Some(libc::STDERR_FILENO),
        path => {
            let f = std::fs::OpenOptions::new().append(true).create(true).open(path);
            match f {
                Ok(f) => Some(f.into_raw_fd()),
                Err(e) => {
                    let msg = format!("rdmashim: {ENV}={path}: cannot open it ({e}); no trace\n");
                    write_all(libc::STDERR_FILENO, msg.as_bytes());
                    None
                }
            }
        }
    }
}

fn write_all(fd: RawFd, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: b is a live byte slice of b.len() bytes; write(2) only reads it.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return; // a trace that cannot be written is dropped, never an error
        }
        b = &b[n as usize..];
    }
}

/// A line about what the library itself decided (`# ` in front, so it never reads as a call),
/// e.g. which data path a memory region takes. Nothing is formatted when tracing is off.
pub fn note(what: std::fmt::Arguments) {
    if !on() {
        return;
    }
    let mut out = format!("{} {:>7} # ", stamp(), tid());
    let _ = out.write_fmt(what);
    out.push('\n');
    if let Some(fd) = sink() {
        write_all(fd, out.as_bytes());
    }
}

/// A line being built: the call's text, then its follow-up lines (CM events, completions).
pub struct Line {
    text: String,
    outs: String,
    extra: String,
    args: usize,
    stamp: String,
}

impl Line {
    pub(crate) fn new() -> Line {
        Line {
            text: String::with_capacity(160),
            outs: String::new(),
            extra: String::new(),
            args: 0,
            stamp: stamp(),
        }
    }

    /// Starts the next argument, `name=`.
    pub fn arg(&mut self, name: &str) -> &mut String {
        if self.args > 0 {
            self.text.push_str(", ");
        }
        self.args += 1;
        self.text.push_str(name);
        self.text.push('=');
        &mut self.text
    }

    /// What the call wrote through its out-parameters, shown after the result (` name=value`).
    pub fn outs(&mut self) -> &mut String {
        &mut self.outs
    }

    /// Adds a follow-up line (` <tid>   what`), written with the call's line.
    pub fn follow(&mut self, what: std::fmt::Arguments) {
        let _ = write!(self.extra, "{} {:>7}   ", self.stamp, tid());
        let _ = self.extra.write_fmt(what);
        self.extra.push('\n');
    }
}

/// `HH:MM:SS.micros` (UTC) now.
fn stamp() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, d.subsec_micros())
}

fn tid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A call being traced: started before the call's body runs.
pub struct Call {
    name: &'static str,
    line: Line,
    t0: Instant,
}

thread_local! {
    /// The traced calls this thread is inside, innermost last, each with whether a call of the
    /// same name inside it wrote its line already.
    static ACTIVE: std::cell::RefCell<Vec<(&'static str, bool)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Call {
    /// Decodes the arguments (before the call: it may free what they point at).
    pub fn start(name: &'static str, args: impl FnOnce(&mut Line)) -> Call {
        let mut line = Line::new();
        args(&mut line);
        let _ = ACTIVE.try_with(|a| a.borrow_mut().push((name, false)));
        Call { name, line, t0: Instant::now() }
    }

    /// Writes the call's line: its C result, errno if it failed, the duration; then `after`'s
    /// follow-up lines (it sees the result as an integer, e.g. a completion count).
    ///
    /// A call that did its work through a call of the same name (an exported `ibv_wr_start`
    /// calling the QP's own `wr_start`, itself traced) writes no line of its own: one call of
    /// the program, one line.
    pub fn finish<R: Show>(self, ret: &R, errno: Option<i32>, after: impl FnOnce(&mut Line, i64)) {
        let covered = ACTIVE
            .try_with(|a| {
                let mut a = a.borrow_mut();
                let covered = a.pop().is_some_and(|(_, c)| c);
                if let Some(outer) = a.last_mut().filter(|(n, _)| *n == self.name) {
                    outer.1 = true;
                }
                covered
            })
            .unwrap_or(false);
        if covered {
            return;
        }
        let dt = self.t0.elapsed();
        let Call { name, mut line, .. } = self;
        if errno.is_none() {
            after(&mut line, ret.as_i64());
        }
        let mut out = String::with_capacity(line.text.len() + line.extra.len() + 64);
        let _ = write!(out, "{} {:>7} {}({}) = ", line.stamp, tid(), name, line.text);
        ret.show(&mut out);
        if !line.outs.is_empty() {
            let _ = write!(out, " ->{}", line.outs);
        }
        if let Some(e) = errno {
            let _ = write!(out, " errno={}", decode::errno_name(e));
        }
        let _ = writeln!(out, " <{:.1}us>", dt.as_secs_f64() * 1e6);
        out.push_str(&line.extra);
        if let Some(fd) = sink() {
            write_all(fd, out.as_bytes());
        }
    }
}

/// How a plain C value (an integer, a pointer, void) is shown.
pub trait Show {
    fn show(&self, out: &mut String);
    /// The value as an integer: the count a call returned, a pointer's address.
    fn as_i64(&self) -> i64;
}

macro_rules! show_int {
    ($($t:ty),*) => {$(
        impl Show for $t {
            fn show(&self, out: &mut String) {
                let _ = write!(out, "{}", self);
            }
            fn as_i64(&self) -> i64 {
                *self as i64
            }
        }
    )*};
}
show_int!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

impl<T> Show for *mut T {
    fn show(&self, out: &mut String) {
        let _ = write!(out, "{:#x}", *self as usize);
    }
    fn as_i64(&self) -> i64 {
        *self as usize as i64
    }
}

impl<T> Show for *const T {
    fn show(&self, out: &mut String) {
        (*self as *mut T).show(out)
    }
    fn as_i64(&self) -> i64 {
        *self as usize as i64
    }
}

impl Show for () {
    fn show(&self, out: &mut String) {
        out.push_str("void");
    }
    fn as_i64(&self) -> i64 {
        0
    }
}
