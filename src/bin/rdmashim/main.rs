//! `rdmashim`: the launcher and the diagnostics of the rdmashim library (issue 12).
//!
//! * `rdmashim run [--mode preload|dropin] [--trace FILE] [--pcap FILE] [--faults SPEC]
//!   [--provider NAME] -- PROGRAM ARGS…`
//!   runs an unmodified program on rdmashim; its exit status is the program's (we exec it,
//!   or wait for it when the device view is interposed).
//! * `rdmashim devinfo` prints what `ibv_devinfo -v` prints for the device, through the same
//!   verbs calls a program makes (this binary links the library itself).
//! * `rdmashim doctor` explains which paths this machine offers and why.
//!
//! The command sits above the C boundary: it calls the library the way a C program does.

mod device;
mod devinfo;
mod doctor;
mod interposed;
mod libdir;
mod view;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage: rdmashim <command> [options]

commands:
  run      run an unmodified RDMA program on rdmashim
  devinfo  print the RDMA device as ibv_devinfo -v shows it
  doctor   explain what this machine offers rdmashim, and why
  help     this text (also: rdmashim <command> --help)
";

const RUN_USAGE: &str = "\
usage: rdmashim run [--mode preload|dropin] [--trace FILE] [--pcap FILE] [--faults SPEC]
                    [--provider NAME] [--device-view auto|mount|interpose|none]
                    [--lib-dir DIR] -- PROGRAM [ARGS...]

Runs PROGRAM unmodified on rdmashim and exits with its status.
  --mode preload   LD_PRELOAD=<lib-dir>/librdmashim.so (default): the program's own librdmacm
                   and libibverbs stay loaded, ours take precedence
  --mode dropin    LD_LIBRARY_PATH=<lib-dir>/dropin: our librdmacm.so.1 and libibverbs.so.1
                   load instead of the system's
  --trace FILE     RDMASHIM_TRACE=FILE: one line per rdma_*/ibv_* call (arguments, result,
                   errno, duration), CM event and work completion, appended to FILE
                   (stderr or - for standard error)
  --pcap FILE      RDMASHIM_PCAP=FILE: the RoCEv2 packets the program sends and receives on
                   the network path (data, UD, CM MADs), as Ethernet frames in a pcap file
                   appended to FILE (%p: the process ID); read it with tshark -r FILE
                   -d udp.port==PORT,infiniband for the QPs' ports. The same-host path is
                   written as the RoCEv2 packets it stands for
  --faults SPEC    RDMASHIM_FAULTS=SPEC: drop/duplicate/reorder/delay RoCEv2 packets, e.g.
                   drop=0.05,dup=0.05,reorder=0.05,delay=0.05:2ms (network path only)
  --provider NAME  RDMASHIM_PROVIDER=NAME (auto, soft: the embedded provider, native, both:
                   rdma-core's devices and soft0 in one list)
  --device-view HOW
                   how to show the device where frameworks look for it:
                   /sys/class/infiniband/<dev>, /sys/class/infiniband_verbs and
                   /dev/infiniband/uverbs0, for the program only (nothing changes outside it).
                   mount: a private mount namespace (a user namespace too when not root);
                   interpose: librdmashim-view.so, preloaded, sends the program's file calls
                   under those directories to a private copy (dynamically linked programs,
                   through libc); auto (default): mount, else interpose; none: no view
  --no-device-view the same as --device-view none
  --lib-dir DIR    where librdmashim.so and dropin/ are (default: found next to this command,
                   then in ../lib, ../lib/<multiarch>, then the directory it was installed to)
";

const DEVINFO_USAGE: &str = "\
usage: rdmashim devinfo

Prints every RDMA device rdmashim offers as `ibv_devinfo -v` prints it (device attributes,
extended attributes, each port and its GID table), through the same verbs calls.
RDMASHIM_PROVIDER chooses the provider as it does for programs.
";

const DOCTOR_USAGE: &str = "\
usage: rdmashim doctor

Explains the environment: which data paths are available here and why (ptrace rules for
one-sided operations on one host, the memlock limit, user namespaces, UDP port 4791 for the
connection manager, shared memory, the interfaces and the GIDs they give).
Each line starts with ok, note or problem. Exits 0 unless rdmashim cannot work here.
";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(cmd) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest: Vec<OsString> = args.collect();
    let wants_help = rest.iter().any(|a| a == "--help" || a == "-h");
    match cmd.to_str() {
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("run") => run(rest),
        Some("devinfo") if wants_help => help(DEVINFO_USAGE),
        Some("devinfo") if !rest.is_empty() => bad(DEVINFO_USAGE, "devinfo takes no arguments"),
        Some("devinfo") => devinfo::print(),
        Some("doctor") if wants_help => help(DOCTOR_USAGE),
        Some("doctor") if !rest.is_empty() => bad(DOCTOR_USAGE, "doctor takes no arguments"),
        Some("doctor") => doctor::run(),
        _ => bad(USAGE, &format!("unknown command {}", cmd.to_string_lossy())),
    }
}

fn help(text: &str) -> ExitCode {
    print!("{text}");
    ExitCode::SUCCESS
}

fn bad(usage: &str, why: &str) -> ExitCode {
    eprint!("rdmashim: {why}\n{usage}");
    ExitCode::from(2)
}

/// `rdmashim run`: sets the environment for the chosen loading mode and execs the program.
fn run(args: Vec<OsString>) -> ExitCode {
    let mut mode = "preload".to_string();
    let mut faults: Option<OsString> = None;
    let mut trace: Option<OsString> = None;
    let mut pcap: Option<OsString> = None;
    let mut provider: Option<OsString> = None;
    let mut lib_dir: Option<std::path::PathBuf> = None;
    let mut device_view = "auto".to_string();
    let mut it = args.into_iter();
    let mut program: Vec<OsString> = Vec::new();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let r = match a.to_str() {
            Some("--help" | "-h") => return help(RUN_USAGE),
            Some("--") => {
                program = it.by_ref().collect();
                Ok(())
            }
            Some("--mode") => value("--mode").and_then(|v| match v.to_str() {
                Some(m @ ("preload" | "dropin")) => {
                    mode = m.to_string();
                    Ok(())
                }
                _ => Err(format!("--mode must be preload or dropin, not {}", v.to_string_lossy())),
            }),
            Some("--faults") => value("--faults").map(|v| faults = Some(v)),
            Some("--trace") => value("--trace").map(|v| trace = Some(v)),
            Some("--pcap") => value("--pcap").map(|v| pcap = Some(v)),
            Some("--provider") => value("--provider").map(|v| provider = Some(v)),
            Some("--lib-dir") => value("--lib-dir").map(|v| lib_dir = Some(v.into())),
            Some("--no-device-view") => {
                device_view = "none".into();
                Ok(())
            }
            Some("--device-view") => value("--device-view").and_then(|v| match v.to_str() {
                Some(h @ ("auto" | "mount" | "interpose" | "none")) => {
                    device_view = h.to_string();
                    Ok(())
                }
                _ => Err(format!(
                    "--device-view must be auto, mount, interpose or none, not {}",
                    v.to_string_lossy()
                )),
            }),
            Some(s) if s.starts_with('-') => Err(format!("unknown option {s}")),
            _ => {
                // The program may also follow the options without `--`.
                program.push(a);
                program.extend(it.by_ref());
                Ok(())
            }
        };
        if let Err(why) = r {
            return bad(RUN_USAGE, &why);
        }
    }
    let Some((prog, prog_args)) = program.split_first() else {
        return bad(RUN_USAGE, "no program to run");
    };
    let dir = match lib_dir.map(Ok).unwrap_or_else(libdir::find) {
        Ok(d) => d,
        Err(why) => return bad(RUN_USAGE, &why),
    };
    let mut cmd = Command::new(prog);
    cmd.args(prog_args);
    if mode == "preload" {
        let lib = dir.join("librdmashim.so");
        if !lib.is_file() {
            return bad(RUN_USAGE, &format!("{} does not exist", lib.display()));
        }
        cmd.env("LD_PRELOAD", prepend(lib.into_os_string(), "LD_PRELOAD", ":"));
    } else {
        let drop = dir.join("dropin");
        if !drop.join("librdmacm.so.1").is_file() || !drop.join("libibverbs.so.1").is_file() {
            return bad(RUN_USAGE, &format!("{} has no drop-in libraries", drop.display()));
        }
        cmd.env("LD_LIBRARY_PATH", prepend(drop.into_os_string(), "LD_LIBRARY_PATH", ":"));
    }
    if let Some(f) = faults {
        cmd.env("RDMASHIM_FAULTS", f);
    }
    if let Some(p) = provider {
        cmd.env("RDMASHIM_PROVIDER", p);
    }
    if let Some(t) = trace {
        cmd.env("RDMASHIM_TRACE", t);
    }
    if let Some(p) = pcap {
        cmd.env("RDMASHIM_PCAP", p);
    }
    let mut tree = None;
    if device_view != "none" {
        // The view reads the device in this process: it must see what the program will.
        if let Some(p) = set_for(&cmd, "RDMASHIM_PROVIDER") {
            std::env::set_var("RDMASHIM_PROVIDER", p);
        }
        // On RDMA hardware (passthrough, or both) programs read the real sysfs: the view
        // describes the soft device only, and would hide the hardware's.
        if !rdmashim::provider::native::on() {
            tree = match show_view(&device_view, &dir, &mut cmd) {
                Ok(t) => t,
                Err(why) => {
                    eprintln!("rdmashim: running without the device view ({why})");
                    None
                }
            };
        }
    }
    if let Some(tree) = tree {
        return interposed::run(cmd, tree, &prog.to_string_lossy());
    }
    // exec replaces this process, so the program's exit status (or signal) is ours.
    let err = cmd.exec();
    eprintln!("rdmashim: cannot run {}: {err}", prog.to_string_lossy());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}

/// Shows the device view `how` (auto, mount, interpose) to the program `cmd` will run: a mount
/// namespace entered here, or a tree for `librdmashim-view.so` (returned: it lives as long as
/// the program). Auto falls back to interposition, saying why in one line.
fn show_view(
    how: &str,
    lib_dir: &std::path::Path,
    cmd: &mut Command,
) -> Result<Option<interposed::Tree>, String> {
    if how != "interpose" {
        match view::enter() {
            Ok(()) => return Ok(None),
            Err(why) if how == "mount" => return Err(why),
            Err(why) => {
                let tree = interposed::prepare(lib_dir, cmd).map_err(|e| format!("{why}; {e}"))?;
                eprintln!("rdmashim: device view by interposition ({why})");
                return Ok(Some(tree));
            }
        }
    }
    interposed::prepare(lib_dir, cmd).map(Some)
}

/// The value `cmd` sets for `var`, if it sets one.
fn set_for(cmd: &Command, var: &str) -> Option<OsString> {
    cmd.get_envs().find(|(k, _)| *k == var).and_then(|(_, v)| v.map(OsString::from))
}

/// `first` followed by the current value of `var`, if it has one.
fn prepend(first: OsString, var: &str, sep: &str) -> OsString {
    let mut v = first;
    if let Some(old) = std::env::var_os(var).filter(|o| !o.is_empty()) {
        v.push(sep);
        v.push(old);
    }
    v
}
