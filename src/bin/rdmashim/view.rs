//! The device view of `rdmashim run`: `/sys/class/infiniband/<dev>`, `/sys/class/infiniband_verbs`
//! and `/dev/infiniband/uverbs0`, where UCX, MPI and rdma-core's tools look for RDMA devices,
//! consistent with what the verbs calls answer, for the launched program only.
//!
//! How: a private mount namespace (inside a new user namespace when we are not root, so no
//! privilege is needed). In it, `/sys/class` and `/dev` are covered by a tmpfs that holds every
//! original entry again, bind-mounted from the covered directory (reached through a descriptor
//! opened before the cover), plus our entries. Relative symlinks in the originals still resolve,
//! as the bind mounts sit at their old paths. Nothing outside the namespace changes, and the
//! namespace ends with the program. `uverbs0` is a bind mount of `/dev/null`: frameworks check
//! that a character device is there and accessible; our libraries never open it.

use super::device::{gid_entry, guid, open_first};
use rdmashim::sys::*;
use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// Enters a private mount namespace showing the first device. Must run while the process has
/// a single thread (a user namespace requires it): before any verbs call.
pub fn enter() -> Result<(), String> {
    new_namespace()?;
    let (name, files) = device_files()?;
    cover("/sys/class", &["infiniband", "infiniband_verbs"])?;
    populate("", &name, &files)?;
    cover("/dev", &["infiniband"])?;
    fs::create_dir_all("/dev/infiniband").map_err(|e| format!("/dev/infiniband: {e}"))?;
    fs::write("/dev/infiniband/uverbs0", b"").map_err(|e| format!("uverbs0: {e}"))?;
    bind("/dev/null", "/dev/infiniband/uverbs0", false)
}

/// Writes the view under `root` (a private directory of ours), for `librdmashim-view.so` to
/// redirect the program's file calls to: the same files, and `/dev/infiniband/uverbs0` a
/// symlink to `/dev/null` (a character device, as frameworks check; making one needs root).
pub fn write_tree(root: &str) -> Result<(), String> {
    let (name, files) = device_files()?;
    populate(root, &name, &files)?;
    let dev = format!("{root}/dev/infiniband");
    fs::create_dir_all(&dev).map_err(|e| format!("{dev}: {e}"))?;
    std::os::unix::fs::symlink("/dev/null", format!("{dev}/uverbs0"))
        .map_err(|e| format!("{dev}/uverbs0: {e}"))
}

/// Writes the device's `files` and its `device/net` links under `root` ("" in the namespace).
fn populate(root: &str, name: &str, files: &[(String, String)]) -> Result<(), String> {
    for (path, content) in files {
        write(&format!("{root}{path}"), content)?;
    }
    net_links(root, name)
}

/// A mount namespace of our own, with no propagation back to the host.
fn new_namespace() -> Result<(), String> {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let flags = if uid == 0 { libc::CLONE_NEWNS } else { libc::CLONE_NEWUSER | libc::CLONE_NEWNS };
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } != 0 {
        let e = std::io::Error::last_os_error();
        let why = match (e.raw_os_error(), uid) {
            (Some(libc::ENOSPC), _) => "user.max_user_namespaces allows no new user namespace",
            (Some(libc::EPERM), 0) => "mount namespaces are not permitted here",
            (Some(libc::EPERM | libc::EACCES), _) => {
                "unprivileged user namespaces are not permitted here (a sysctl, seccomp or LSM policy)"
            }
            _ => "cannot make a private mount namespace",
        };
        return Err(format!("{why}: unshare: {e}"));
    }
    if uid != 0 {
        // Keep our own identity inside: our uid and gid map to themselves.
        let w = |f: &str, s: String| fs::write(f, s).map_err(|e| format!("{f}: {e}"));
        w("/proc/self/setgroups", "deny".into())?;
        w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        w("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE)
}

fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> Result<(), String> {
    let c = |s: &str| CString::new(s).map_err(|_| format!("{s}: NUL in path"));
    let (src_c, target_c, fs_c) = (src.map(c).transpose()?, c(target)?, fstype.map(c).transpose()?);
    let p = |o: &Option<CString>| o.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is NULL or a NUL-terminated string alive across the call.
    let r = unsafe { libc::mount(p(&src_c), target_c.as_ptr(), p(&fs_c), flags, std::ptr::null()) };
    if r != 0 {
        return Err(format!("mount {target}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn bind(src: &str, target: &str, recursive: bool) -> Result<(), String> {
    let rec = if recursive { libc::MS_REC } else { 0 };
    mount(Some(src), target, None, libc::MS_BIND | rec)
}

/// Covers `dir` with a tmpfs holding its original entries again (bind mounts and copies of
/// symlinks), except `ours`, which the caller fills.
fn cover(dir: &str, ours: &[&str]) -> Result<(), String> {
    let old: OwnedFd = fs::File::open(dir).map_err(|e| format!("{dir}: {e}"))?.into();
    let entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| format!("{dir}: {e}"))?
        .filter_map(|e| e.ok())
        .filter(|e| !ours.iter().any(|o| e.file_name() == *o))
        .collect();
    mount(Some("tmpfs"), dir, Some("tmpfs"), libc::MS_NOSUID)?;
    let root = format!("/proc/self/fd/{}", old.as_raw_fd());
    for e in entries {
        let name = e.file_name();
        let (src, dst) = (Path::new(&root).join(&name), Path::new(dir).join(&name));
        let (src_s, dst_s) =
            (src.to_string_lossy().into_owned(), dst.to_string_lossy().into_owned());
        let kind = fs::symlink_metadata(&src).map_err(|e| format!("{src_s}: {e}"))?.file_type();
        let made = if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(|e| format!("{src_s}: {e}"))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| format!("{dst_s}: {e}"))
        } else if kind.is_dir() {
            fs::create_dir(&dst)
                .map_err(|e| format!("{dst_s}: {e}"))
                .and_then(|()| bind(&src_s, &dst_s, true))
        } else {
            fs::write(&dst, b"")
                .map_err(|e| format!("{dst_s}: {e}"))
                .and_then(|()| bind(&src_s, &dst_s, false))
        };
        // An entry we cannot show again (a mount we may not bind) is left out, not fatal.
        if let Err(why) = made {
            eprintln!("rdmashim: device view: {why}");
        }
    }
    Ok(())
}

fn write(path: &str, content: &str) -> Result<(), String> {
    if let Some(parent) = Path::new(path).parent() {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    fs::write(path, content).map_err(|e| format!("{path}: {e}"))
}

/// The device's name and the files of the view, `(path, content)`, as the kernel's ib core lays
/// them out, read from the device through the verbs calls. Called inside the new namespace
/// (after `unshare`, which must see a single thread): the verbs calls may start threads.
pub fn device_files() -> Result<(String, Vec<(String, String)>), String> {
    let (ctx, name) = open_first()?;
    let ax = ctx.device_ex()?;
    let a = &ax.orig_attr;
    let d = format!("/sys/class/infiniband/{name}");
    let mut f = vec![
        (format!("{d}/node_type"), "1: CA\n".to_string()),
        (format!("{d}/node_guid"), format!("{}\n", guid(a.node_guid))),
        (format!("{d}/sys_image_guid"), format!("{}\n", guid(a.sys_image_guid))),
        (format!("{d}/fw_ver"), format!("{}\n", c_str(&a.fw_ver))),
        (format!("{d}/node_desc"), format!("rdmashim {name}\n")),
        ("/sys/class/infiniband_verbs/abi_version".into(), "6\n".into()),
        ("/sys/class/infiniband_verbs/uverbs0/ibdev".into(), format!("{name}\n")),
        ("/sys/class/infiniband_verbs/uverbs0/abi_version".into(), "1\n".into()),
    ];
    for port in 1..=a.phys_port_cnt {
        let p = ctx.port(port)?;
        let pd = format!("{d}/ports/{port}");
        let state = match p.state {
            ibv_port_state::IBV_PORT_DOWN => "1: DOWN",
            ibv_port_state::IBV_PORT_INIT => "2: INIT",
            ibv_port_state::IBV_PORT_ARMED => "3: ARMED",
            ibv_port_state::IBV_PORT_ACTIVE => "4: ACTIVE",
            _ => "0: NOP",
        };
        let phys = if p.phys_state == 5 { "5: LinkUp" } else { "3: Disabled" };
        let link = if p.link_layer == 2 { "Ethernet" } else { "InfiniBand" };
        f.push((format!("{pd}/state"), format!("{state}\n")));
        f.push((format!("{pd}/phys_state"), format!("{phys}\n")));
        f.push((format!("{pd}/link_layer"), format!("{link}\n")));
        f.push((format!("{pd}/rate"), format!("{}\n", rate(p.active_width, p.active_speed))));
        f.push((format!("{pd}/lid"), format!("0x{:x}\n", p.lid)));
        f.push((format!("{pd}/sm_lid"), format!("0x{:x}\n", p.sm_lid)));
        f.push((format!("{pd}/lid_mask_count"), format!("{}\n", p.lmc)));
        f.push((format!("{pd}/sm_sl"), format!("{}\n", p.sm_sl)));
        f.push((format!("{pd}/cap_mask"), format!("0x{:08x}\n", p.port_cap_flags)));
        f.push((format!("{pd}/pkeys/0"), "0xffff\n".into()));
        let ifaces = super::doctor::interfaces().unwrap_or_default();
        for index in 0..p.gid_tbl_len.max(0) as u32 {
            let entry = gid_entry(&ctx, port, index);
            let raw = entry.map(|(g, _)| g.octets()).unwrap_or([0; 16]);
            let groups: Vec<String> =
                raw.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
            f.push((format!("{pd}/gids/{index}"), format!("{}\n", groups.join(":"))));
            // The kernel refuses to read the type and netdev of an empty entry; we leave them out.
            if let Some((gid, ty)) = entry {
                f.push((format!("{pd}/gid_attrs/types/{index}"), format!("{ty}\n")));
                let ip = gid.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(gid.into());
                if let Some((ifname, _)) = ifaces.iter().find(|(_, a)| *a == ip) {
                    f.push((format!("{pd}/gid_attrs/ndevs/{index}"), format!("{ifname}\n")));
                }
            }
        }
    }
    Ok((name, f))
}

/// `device/net/<ifname>` under `root`: links from the device to the interfaces its GIDs come
/// from.
fn net_links(root: &str, name: &str) -> Result<(), String> {
    let mut names: Vec<String> =
        super::doctor::interfaces().unwrap_or_default().into_iter().map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let dir = format!("{root}/sys/class/infiniband/{name}/device/net");
    fs::create_dir_all(&dir).map_err(|e| format!("{dir}: {e}"))?;
    for n in names {
        let link = format!("{dir}/{n}");
        std::os::unix::fs::symlink(format!("/sys/class/net/{n}"), &link)
            .map_err(|e| format!("{link}: {e}"))?;
    }
    Ok(())
}

fn c_str(s: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = s.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `ports/N/rate` as the kernel writes it: "<Gb/s> Gb/sec (<width>X <speed name>)".
fn rate(width: u8, speed: u8) -> String {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let (per_lane, name) = match speed {
        1 => (2.5, " SDR"),
        2 => (5.0, " DDR"),
        4 => (10.0, " QDR"),
        8 => (10.0, " FDR10"),
        16 => (14.0, " FDR"),
        32 => (25.0, " EDR"),
        64 => (50.0, " HDR"),
        128 => (100.0, " NDR"),
        _ => (2.5, ""),
    };
    format!("{} Gb/sec ({lanes}X{name})", per_lane * lanes as f64)
}
