//! The soft device and its contexts.
//!
//! One device, `soft0`, port 1, RoCE-style: Ethernet link layer, transport IB (librdmacm checks
//! it), active MTU 4096, GIDs are this host's IP addresses in IPv4-mapped IPv6 form.

use super::objects;
use crate::errno::{Errno, Result};
use crate::handle::CBox;
use crate::runtime::fork::PerProcess;
use crate::runtime::{read_lock, write_lock};
use crate::sys::*;
use once_cell::sync::Lazy;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub const DEVICE_NAME: &str = crate::provider::SOFT_DEVICE_NAME;
pub const PORT: u8 = 1;
/// `vendor_id` (no IEEE OUI of a vendor: all ones, as soft devices report), also the ECE
/// vendor of its QPs.
pub const VENDOR_ID: u32 = 0xffffff;
pub const MAX_QP_WR: u32 = 16384;
pub const MAX_SGE: u32 = 32;
pub const MAX_CQE: u32 = 0x3fffff;
pub const MAX_INLINE: u32 = 1024;
pub const MAX_MSG: u32 = crate::provider::wr::MAX_MSG;
pub const GID_TABLE_LEN: usize = 16;
/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h, so bindgen does not emit it).
pub const LINK_LAYER_ETHERNET: u8 = 2;
pub const NODE_GUID: u64 = 0x0200_5eff_fe00_0001;

/// The one soft device, a static C struct for the lifetime of the process.
pub struct Device {
    pub raw: CBox<ibv_device>,
}

fn copy_str(dst: &mut [libc::c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as libc::c_char;
    }
}

pub static DEVICE: Lazy<Device> = Lazy::new(|| {
    let mut raw: CBox<ibv_device> = CBox::zeroed();
    let d = raw.init();
    d.node_type = ibv_node_type::IBV_NODE_CA;
    d.transport_type = ibv_transport_type::IBV_TRANSPORT_IB;
    copy_str(&mut d.name, DEVICE_NAME);
    copy_str(&mut d.dev_name, "uverbs0");
    copy_str(&mut d.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    copy_str(&mut d.ibdev_path, "/sys/class/infiniband/soft0");
    Device { raw }
});

pub fn device_ptr() -> *mut ibv_device {
    DEVICE.raw.as_ptr()
}

pub fn is_device(p: *const ibv_device) -> bool {
    !p.is_null() && std::ptr::eq(p, DEVICE.raw.as_ptr())
}

pub use crate::runtime::ifaddrs::local_addresses;

/// GID `index` of the port for `ibv_query_gid_ex`: `EINVAL` beyond the table, `ENODATA` for an
/// empty entry inside it.
pub fn gid_entry(index: u32) -> Result<[u8; 16]> {
    if index as usize >= GID_TABLE_LEN {
        return Err(Errno::EINVAL);
    }
    gid_lookup(|t| t.get(index as usize)).ok_or(Errno::ENODATA)
}

/// The interface index of the net device behind a GID (0 if no interface holds its address).
pub fn gid_ifindex(gid: &[u8; 16]) -> u32 {
    crate::runtime::ifaddrs::ifindex_of(ip_of_gid(gid))
}

/// The GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

pub fn ip_of_gid(gid: &[u8; 16]) -> IpAddr {
    let a = std::net::Ipv6Addr::from(*gid);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// The GID table: this host's addresses as GIDs, at most `GID_TABLE_LEN`, in a fixed array so
/// that a copy costs no allocation.
#[derive(Clone, Copy)]
pub struct Gids {
    gids: [[u8; 16]; GID_TABLE_LEN],
    len: usize,
}

impl Gids {
    fn read_host() -> Gids {
        let mut t = Gids { gids: [[0; 16]; GID_TABLE_LEN], len: 0 };
        for (slot, ip) in t.gids.iter_mut().zip(local_addresses()) {
            *slot = gid_of(ip);
            t.len += 1;
        }
        t
    }

    pub fn as_slice(&self) -> &[[u8; 16]] {
        &self.gids[..self.len]
    }

    pub fn get(&self, index: usize) -> Option<[u8; 16]> {
        self.as_slice().get(index).copied()
    }

    pub fn position(&self, gid: &[u8; 16]) -> Option<usize> {
        self.as_slice().iter().position(|g| g == gid)
    }
}

/// How long a table that answers every lookup is trusted before the host is read again.
const GIDS_TTL: Duration = Duration::from_secs(1);

/// The cached table and when it was read. Reading the host (`getifaddrs`: a netlink socket and
/// several system calls) on every UD send was the cost this cache removes.
static GIDS: PerProcess<RwLock<Option<(Gids, Instant)>>> = PerProcess::new(|| RwLock::new(None));

fn refresh() -> Gids {
    let t = Gids::read_host();
    *write_lock(GIDS.get()) = Some((t, Instant::now()));
    t
}

/// The GID table, read from the host only if the cached one is older than `GIDS_TTL`; no
/// system call otherwise (the monotonic clock is read through the vDSO). The data path (UD
/// sends, `ibv_init_ah_from_wc`) uses this: a miss there does not read the host again, so a
/// bad `sgid_index` cannot cost a scan per work request.
pub fn gids() -> Gids {
    cached().unwrap_or_else(refresh)
}

/// The cached table if it is younger than `GIDS_TTL`.
fn cached() -> Option<Gids> {
    let c = *read_lock(GIDS.get());
    c.filter(|(_, at)| at.elapsed() < GIDS_TTL).map(|(t, _)| t)
}

/// A lookup for the control path (`ibv_query_gid*`, `rdma_resolve_addr`): on a miss (an index
/// beyond the table, an address not in it) the host is read again and the lookup repeated, so
/// an address added after start answers at once, and the data path sees it from then on.
pub fn gid_lookup<T>(f: impl Fn(&Gids) -> Option<T>) -> Option<T> {
    // `just_read`: the table came from the host in this call; a miss there is an answer.
    let (t, just_read) = cached().map_or_else(|| (refresh(), true), |t| (t, false));
    match f(&t) {
        Some(v) => Some(v),
        None if just_read => None,
        None => f(&refresh()),
    }
}

/// `true` if `ip` is one of this host's addresses (its GID is in the table).
pub fn is_local_ip(ip: IpAddr) -> bool {
    let g = gid_of(ip);
    gid_lookup(|t| t.position(&g)).is_some()
}

/// An open device context. The handle is the `ibv_context` inside a `verbs_context`, as
/// libibverbs lays it out, so `verbs_get_ctx()` in inlined code finds the extended part.
pub struct Context {
    pub vctx: CBox<verbs_context>,
    /// Asynchronous events; its eventfd is `async_fd`.
    pub events: super::async_event::AsyncQueue,
    /// The provider behind the device.
    pub provider: &'static dyn crate::provider::Provider,
    /// `cmd_fd` (closed with the context): a memfd of ours, or the duplicate of one that
    /// `ibv_import_device` was given.
    _cmd: OwnedFd,
    /// The objects' namespace (the inode of `cmd`'s file): contexts imported from one another's
    /// `cmd_fd` share it, and import each other's objects by handle (`import.rs`).
    pub ucontext: u64,
}

/// The C ops tables every context carries. They are functions of the C boundary, which registers
/// them here once (so this layer fills contexts without naming the layer above it).
pub struct ContextOps {
    /// `ibv_context.ops`: the calls that programs inline (post/poll/notify).
    pub ops: ibv_context_ops,
    /// Fills the `verbs_context` extension ops.
    pub fill_ex: fn(&mut verbs_context),
}

static OPS: std::sync::OnceLock<ContextOps> = std::sync::OnceLock::new();

/// Registers the ops tables (the first registration wins; later calls cost one atomic load).
pub fn register_ops(make: impl FnOnce() -> ContextOps) {
    OPS.get_or_init(make);
}

/// The devices to list: ours, unless `RDMASHIM_PROVIDER` selects no provider.
pub fn device_list() -> Option<*mut ibv_device> {
    crate::provider::selected().map(|_| device_ptr())
}

/// `ibv_get_device_list`: a list to free with [`free_devices`], and its length. With
/// `RDMASHIM_PROVIDER=both`, the native library's devices come first, then ours; the native
/// list they came from is freed with ours.
pub fn devices() -> Result<(*mut *mut ibv_device, usize)> {
    use crate::provider::native;
    let mut items: Vec<*mut ibv_device> = Vec::new();
    let mut companion = 0;
    if native::mode() == native::Mode::Both {
        if let Some((list, n)) = native::devices() {
            // SAFETY: the native library's list holds n device pointers.
            items.extend((0..n).map(|i| unsafe { *list.add(i) }.cast::<ibv_device>()));
            companion = list as usize;
        }
    }
    items.extend(device_list());
    match super::ptr_list::alloc_all(&items, companion) {
        Ok(list) => Ok((list, items.len())),
        Err(e) => {
            if companion != 0 {
                // SAFETY: the native library's list from native::devices(), kept by nobody.
                unsafe { native::free_devices(companion as *mut *mut std::ffi::c_void) };
            }
            Err(e)
        }
    }
}

/// `ibv_free_device_list` of a list from [`devices`] (anything else is ignored).
pub fn free_devices(list: *mut *mut ibv_device) {
    let companion = super::ptr_list::free(list);
    if companion != 0 {
        // SAFETY: a companion is only ever the native list `devices` made the freed list from;
        // ptr_list hands it back once, with the list.
        unsafe { crate::provider::native::free_devices(companion as *mut *mut std::ffi::c_void) };
    }
}

impl Context {
    pub fn ptr(&self) -> *mut ibv_context {
        // SAFETY: the context field lies inside the live verbs_context allocation.
        unsafe { std::ptr::addr_of_mut!((*self.vctx.as_ptr()).context) }
    }

    /// Opens a context carrying the ops tables registered with [`register_ops`] (`ENODEV` if the
    /// C boundary never registered them, or if `RDMASHIM_PROVIDER` selects no provider).
    pub fn open(device: *mut ibv_device) -> Result<*mut ibv_context> {
        if !is_device(device) {
            return Err(Errno::EINVAL);
        }
        let cmd =
            crate::runtime::shm::token(c"rdmashim-context", &super::import_remote::owner_token())?;
        let ucontext = crate::runtime::shm::inode(cmd.as_raw_fd())?;
        Self::open_on(device, cmd, ucontext)
    }

    /// A context of `device` on the command descriptor `cmd` of namespace `ucontext`.
    pub(super) fn open_on(
        device: *mut ibv_device,
        cmd: OwnedFd,
        ucontext: u64,
    ) -> Result<*mut ibv_context> {
        let ops = OPS.get().ok_or(Errno::ENODEV)?;
        let provider = crate::provider::selected().ok_or(Errno::ENODEV)?;
        let events = super::async_event::AsyncQueue::new()?;
        let mut vctx: CBox<verbs_context> = CBox::zeroed();
        let v = vctx.init();
        v.sz = std::mem::size_of::<verbs_context>();
        v.context.device = device;
        v.context.ops = ops.ops;
        v.context.cmd_fd = cmd.as_raw_fd();
        v.context.async_fd = events.fd();
        v.context.num_comp_vectors = 1;
        // libibverbs marks an extended context with abi_compat = __VERBS_ABI_IS_EXTENDED (all ones).
        v.context.abi_compat = usize::MAX as *mut libc::c_void;
        // Extended verbs: the ops the inline wrappers of verbs.h call (ibv_query_port,
        // ibv_query_device_ex, ibv_create_cq_ex, ibv_create_qp_ex); the others stay NULL.
        (ops.fill_ex)(v);
        let ctx = Arc::new(Context { vctx, events, provider, _cmd: cmd, ucontext });
        let p = ctx.ptr();
        objects().contexts.insert(p as usize, ctx);
        Ok(p)
    }

    pub fn async_fd(&self) -> i32 {
        self.events.fd()
    }
}

/// `ibv_query_device` answers, rxe-like.
pub fn device_attr(a: &mut ibv_device_attr) {
    // SAFETY: all-zero is a valid ibv_device_attr.
    *a = unsafe { std::mem::zeroed() };
    copy_str(&mut a.fw_ver, "1.0.0");
    a.node_guid = NODE_GUID.to_be();
    a.sys_image_guid = NODE_GUID.to_be();
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 0x10000;
    a.max_qp_wr = MAX_QP_WR as i32;
    // Memory windows, type 1 and 2B (verbs/mw.rs); both flags live in device_cap_flags.
    a.device_cap_flags = ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW.0
        | ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0
        | ibv_device_cap_flags::IBV_DEVICE_XRC.0;
    a.max_sge = MAX_SGE as i32;
    a.max_sge_rd = MAX_SGE as i32;
    a.max_cq = 0x4000;
    a.max_cqe = MAX_CQE as i32;
    a.max_mr = 0x40000;
    a.max_mw = 0x10000;
    a.max_pd = 0x8000;
    a.max_qp_rd_atom = 128;
    a.max_ee_rd_atom = 0;
    a.max_res_rd_atom = 258048;
    a.max_qp_init_rd_atom = 128;
    a.atomic_cap = ibv_atomic_cap::IBV_ATOMIC_HCA;
    a.max_mcast_grp = 8192;
    a.max_mcast_qp_attach = 56;
    a.max_total_mcast_qp_attach = 458752;
    a.max_ah = 0x8000;
    a.max_srq = 0x4000;
    a.max_srq_wr = MAX_QP_WR as i32;
    a.max_srq_sge = MAX_SGE as u16 as i32;
    a.max_pkeys = 64;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
}

/// `ibv_query_port` answers for port 1.
pub fn port_attr(a: &mut ibv_port_attr) {
    // SAFETY: all-zero is a valid ibv_port_attr.
    *a = unsafe { std::mem::zeroed() };
    a.state = ibv_port_state::IBV_PORT_ACTIVE;
    a.max_mtu = ibv_mtu::IBV_MTU_4096;
    a.active_mtu = ibv_mtu::IBV_MTU_4096;
    a.gid_tbl_len = GID_TABLE_LEN as i32;
    a.port_cap_flags = 0x0001_0000 | 0x0400_0000; // CM supported, IP-based GIDs
    a.max_msg_sz = MAX_MSG;
    a.bad_pkey_cntr = 0;
    a.qkey_viol_cntr = 0;
    a.pkey_tbl_len = 1;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.sm_sl = 0;
    a.subnet_timeout = 0;
    a.init_type_reply = 0;
    a.active_width = 2; // 4x
    a.active_speed = 32; // 25 Gb/s per lane
    a.phys_state = 5; // LinkUp
    a.link_layer = LINK_LAYER_ETHERNET;
    // IBV_QPF_GRH_REQUIRED: a RoCE port routes by GID only, so ibv_create_ah refuses an AH
    // without a GRH (conformance: ibv_query_port FLAG-GRH-REQUIRED).
    a.flags = 1;
}
