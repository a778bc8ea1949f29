//! The device as a program sees it, through the verbs calls a C program makes: the exported
//! functions, and the context's extension ops that the inline `ibv_query_device_ex` and
//! `ibv_query_port` of verbs.h call. `devinfo`, `doctor` and the device view read it here.

use rdmashim::abi::verbs as v;
use rdmashim::sys::*;
use std::net::Ipv6Addr;

/// Opens the first device of the list: its context and name.
pub fn open_first() -> Result<(Ctx, String), String> {
    let mut n = 0;
    // SAFETY: n is a valid out-pointer; the list is freed below.
    let list = unsafe { v::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!("ibv_get_device_list: {}", std::io::Error::last_os_error()));
    }
    let mut found = Err("no RDMA devices".to_string());
    if n > 0 {
        // SAFETY: a non-empty list holds at least one device pointer.
        let dev = unsafe { *list };
        // SAFETY: dev is a device of the list, which is still allocated.
        let name = unsafe { v::ibv_get_device_name(dev) };
        let name = if name.is_null() {
            "?".to_string()
        } else {
            // SAFETY: a non-NULL name is a NUL-terminated string owned by the device.
            unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
        };
        // SAFETY: dev is a device of the list.
        let ctx = unsafe { v::ibv_open_device(dev) };
        found = if ctx.is_null() {
            Err(format!("ibv_open_device({name}): {}", std::io::Error::last_os_error()))
        } else {
            Ok((Ctx(ctx), name))
        };
    }
    // SAFETY: list came from ibv_get_device_list and is freed once; an open context outlives it.
    unsafe { v::ibv_free_device_list(list) };
    found
}

/// An open context, closed when dropped.
pub struct Ctx(pub *mut ibv_context);

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: self.0 is a context this value opened and nobody else closes.
        unsafe { v::ibv_close_device(self.0) };
    }
}

impl Ctx {
    /// The `verbs_context` in front of the context: where the inline wrappers of verbs.h find
    /// the extension ops (`verbs_get_ctx`).
    fn ext(&self) -> Result<&verbs_context, String> {
        // SAFETY: the context is live; abi_compat is a plain field of it.
        let extended = unsafe { (*self.0).abi_compat } as usize == usize::MAX;
        if !extended {
            return Err("the context is not an extended verbs context".into());
        }
        let off = std::mem::offset_of!(verbs_context, context);
        // SAFETY: an extended context (abi_compat all ones) is the `context` member of a
        // verbs_context allocation, which lives as long as the context.
        Ok(unsafe { &*(self.0.cast::<u8>().sub(off).cast::<verbs_context>()) })
    }

    pub fn device_ex(&self) -> Result<ibv_device_attr_ex, String> {
        let q = self.ext()?.query_device_ex.ok_or("no query_device_ex op")?;
        // SAFETY: all-zero is a valid ibv_device_attr_ex.
        let mut a: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: the op is the context's own; a is valid for writes of its size.
        let r = unsafe { q(self.0, std::ptr::null(), &mut a, std::mem::size_of_val(&a)) };
        if r != 0 {
            return Err(format!("ibv_query_device_ex: errno {r}"));
        }
        Ok(a)
    }

    pub fn port(&self, port: u8) -> Result<ibv_port_attr, String> {
        let q = self.ext()?.query_port.ok_or("no query_port op")?;
        // SAFETY: all-zero is a valid ibv_port_attr.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the op is the context's own; a is valid for writes of its size.
        let r = unsafe { q(self.0, port, &mut a, std::mem::size_of_val(&a)) };
        if r != 0 {
            return Err(format!("ibv_query_port({port}): errno {r}"));
        }
        Ok(a)
    }
}

/// The GIDs of port 1 of the first device, by index (what `rdmashim doctor` lists).
pub fn first_device_gids() -> Result<Vec<(u32, Ipv6Addr)>, String> {
    let (ctx, _) = open_first()?;
    let p = ctx.port(1)?;
    Ok((0..p.gid_tbl_len.max(0) as u32)
        .filter_map(|i| gid_entry(&ctx, 1, i).map(|e| (i, e.0)))
        .collect())
}

/// GID `index` of `port` and its type's name, or None for an empty entry.
pub fn gid_entry(ctx: &Ctx, port: u8, index: u32) -> Option<(Ipv6Addr, &'static str)> {
    // SAFETY: all-zero is a valid ibv_gid_entry.
    let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of_val(&e);
    // SAFETY: the context is live; e is valid for writes of `size` bytes (what the inline
    // ibv_query_gid_ex of verbs.h passes).
    if unsafe { v::_ibv_query_gid_ex(ctx.0, port as u32, index, &mut e, 0, size) } != 0 {
        return None; // an empty entry (ENODATA)
    }
    // SAFETY: every bit pattern of the union's raw bytes is valid.
    let raw = unsafe { e.gid.raw };
    if raw == [0; 16] {
        return None;
    }
    let ty = match e.gid_type {
        IBV_GID_TYPE_IB => "IB",
        IBV_GID_TYPE_ROCE_V1 => "RoCE v1",
        IBV_GID_TYPE_ROCE_V2 => "RoCE v2",
        _ => "unknown",
    };
    Some((Ipv6Addr::from(raw), ty))
}

/// A GUID as ibv_devinfo shows it: four groups of four hex digits, network order.
pub fn guid(be: u64) -> String {
    let g = u64::from_be(be);
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}
