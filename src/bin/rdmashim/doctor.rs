//! `rdmashim doctor`: what this machine offers rdmashim, each line `ok`, `note` or `problem`
//! with the reason. It probes (binds, creates, reads /proc) rather than guessing, and changes
//! nothing: every probe's socket or descriptor is closed again.

use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::process::ExitCode;

#[derive(Default)]
struct Report {
    problems: usize,
}

impl Report {
    fn ok(&mut self, what: &str, why: String) {
        println!("ok       {what}: {why}");
    }
    fn note(&mut self, what: &str, why: String) {
        println!("note     {what}: {why}");
    }
    fn problem(&mut self, what: &str, why: String) {
        self.problems += 1;
        println!("problem  {what}: {why}");
    }
}

pub fn run() -> ExitCode {
    let mut r = Report::default();
    library(&mut r);
    provider(&mut r);
    shared_memory(&mut r);
    unix_names(&mut r);
    ptrace(&mut r);
    memlock(&mut r);
    user_namespaces(&mut r);
    port_4791(&mut r);
    gids(&mut r);
    if r.problems == 0 {
        println!("rdmashim can run RDMA programs here.");
        ExitCode::SUCCESS
    } else {
        println!("{} problem(s): rdmashim cannot work fully here (see above).", r.problems);
        ExitCode::FAILURE
    }
}

fn library(r: &mut Report) {
    match super::libdir::find() {
        Ok(d) => {
            let drop = d.join("dropin");
            let dropin =
                drop.join("librdmacm.so.1").is_file() && drop.join("libibverbs.so.1").is_file();
            let modes =
                if dropin { "preload and drop-in" } else { "preload (no dropin/ directory)" };
            r.ok("library", format!("{} ({modes})", d.join("librdmashim.so").display()));
        }
        Err(why) => r.problem("library", format!("{why}; `rdmashim run` needs --lib-dir")),
    }
}

fn provider(r: &mut Report) {
    use rdmashim::provider::native::{mode, Mode};
    let asked = std::env::var("RDMASHIM_PROVIDER").unwrap_or_default();
    let asked = if asked.is_empty() { "auto (unset)".to_string() } else { asked };
    let dir = std::env::var("RDMASHIM_NATIVE_LIBDIR").unwrap_or_else(|_| "the system's".into());
    match mode() {
        Mode::Soft => r.ok(
            "provider",
            format!("soft, the embedded provider (RDMASHIM_PROVIDER={asked}; no RDMA hardware found, or soft asked for)"),
        ),
        Mode::Native => r.ok(
            "provider",
            format!("native: calls pass through to rdma-core ({dir} libibverbs.so.1; RDMASHIM_PROVIDER={asked})"),
        ),
        Mode::Both => r.ok(
            "provider",
            format!("both: rdma-core's devices ({dir} libibverbs.so.1), then soft0; each call goes where its object lives (RDMASHIM_PROVIDER={asked})"),
        ),
        Mode::Nothing => r.problem(
            "provider",
            format!("RDMASHIM_PROVIDER={asked} gives no provider: programs see no device"),
        ),
    }
}

fn shared_memory(r: &mut Report) {
    // SAFETY: a NUL-terminated name and valid flags; the descriptor is owned below.
    let fd = unsafe {
        libc::memfd_create(c"rdmashim-doctor".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        r.problem("shared memory", format!("memfd_create failed ({e}): same-host QPs cannot link"));
        return;
    }
    // SAFETY: fd was just created and is owned by nothing else.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    r.ok("shared memory", "memfd_create works: same-host QPs link through shared rings".into());
}

fn unix_names(r: &mut Report) {
    let name = format!("rdmashim/doctor/{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes());
    match addr.and_then(|a| std::os::unix::net::UnixDatagram::bind_addr(&a)) {
        Ok(_) => r.ok(
            "abstract unix sockets",
            "available: QPNs and CM listeners are reachable by processes of this network namespace"
                .into(),
        ),
        Err(e) => r.problem("abstract unix sockets", format!("cannot bind one ({e})")),
    }
}

fn ptrace(r: &mut Report) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let what = "ptrace rules (process_vm_readv/writev between processes)";
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Err(_) => r.ok(what, "no Yama module: processes of one user may read and write each other's memory".into()),
        Ok(s) => match (s.trim(), root) {
            ("0", _) => r.ok(what, "Yama scope 0: processes of one user may access each other".into()),
            (_, true) => r.ok(what, format!("Yama scope {}, but running as root", s.trim())),
            (n, false) => r.note(
                what,
                format!("Yama scope {n}: only a parent may access its children; rdmashim never relaxes it"),
            ),
        },
    }
}

fn memlock(r: &mut Report) {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: l is a valid out-pointer for getrlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut l) } != 0 {
        r.note("memlock limit", "getrlimit failed".into());
        return;
    }
    let shown = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{} KiB", v / 1024)
        }
    };
    r.ok(
        "memlock limit",
        format!(
            "{} (rdmashim pins no memory, so registrations never hit it; some programs warn when it is small)",
            shown(l.rlim_cur)
        ),
    );
}

fn user_namespaces(r: &mut Report) {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").ok();
    let unpriv = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone").ok();
    let what = "user namespaces";
    match (max.as_deref().map(str::trim), unpriv.as_deref().map(str::trim)) {
        (Some("0"), _) => r.note(
            what,
            "disabled (max_user_namespaces is 0): `rdmashim run` shows the device view by \
             interposition (librdmashim-view.so)"
                .into(),
        ),
        (_, Some("0")) => r.note(
            what,
            "unprivileged ones are disabled (unprivileged_userns_clone is 0): `rdmashim run` \
             shows the device view by interposition when not root"
                .into(),
        ),
        (Some(n), _) => r.ok(
            what,
            format!(
                "available (max_user_namespaces {n}): `rdmashim run` shows the device view in \
                 a mount namespace of its own (a seccomp or LSM policy may still refuse one; \
                 then by interposition)"
            ),
        ),
        _ => r.note(what, "not reported by this kernel".into()),
    }
}

fn port_4791(r: &mut Report) {
    let what = "UDP port 4791 (RoCEv2; connection requests from other namespaces and hosts, \
                everything from other RoCE stacks)";
    match UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 4791)) {
        Ok(_) => {
            r.ok(what, "free: the first rdmashim process with a QP or a listener takes it".into())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => r.note(
            what,
            "in use (an rdmashim process, rxe or another program): if it is not rdmashim, \
             listeners here cannot be reached from other namespaces and hosts, nor QPs here \
             from rxe or RoCE NICs"
                .into(),
        ),
        Err(e) => r.note(what, format!("cannot bind ({e})")),
    }
}

fn gids(r: &mut Report) {
    let gids = match super::device::first_device_gids() {
        Ok(g) => g,
        Err(why) => return r.problem("GID table", why),
    };
    if gids.is_empty() {
        return r.problem("GID table", "empty: no interface address to name this host".into());
    }
    let addrs = interfaces().unwrap_or_default();
    for (index, gid) in gids {
        let ip = gid.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(gid));
        let Some((name, _)) = addrs.iter().find(|(_, a)| *a == ip) else {
            r.note(&format!("GID[{index}] {gid}"), "no interface has this address now".into());
            continue;
        };
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok();
        let mtu = mtu.as_deref().map(str::trim).unwrap_or("?");
        r.ok(&format!("GID[{index}] {gid}"), format!("{ip} on {name} (MTU {mtu}), RoCE v2"));
    }
}

/// The addresses of the interfaces that are up, in getifaddrs order.
pub fn interfaces() -> std::io::Result<Vec<(String, IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        // SAFETY: ifa_addr is non-NULL; its family says which sockaddr it is.
        let ip = match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let a = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let a = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                IpAddr::from(a.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        out.push((name, ip));
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}
