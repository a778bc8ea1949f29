//! `rdmashim devinfo`: each device as `ibv_devinfo -v` shows it, read through the verbs calls a
//! C program makes (the exported functions, and the context's extension ops that the inline
//! `ibv_query_device_ex`/`ibv_query_port` of verbs.h call). The layout is ibv_devinfo's, line for
//! line, for the capabilities our devices report; a test compares the two outputs.

use super::device::{gid_entry, guid, Ctx};
use rdmashim::abi::verbs as v;
use rdmashim::sys::*;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::process::ExitCode;

pub fn print() -> ExitCode {
    match devices() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("rdmashim devinfo: {why}");
            ExitCode::FAILURE
        }
    }
}

fn devices() -> Result<String, String> {
    let mut n = 0;
    // SAFETY: n is a valid out-pointer; the list is freed below.
    let list = unsafe { v::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!("ibv_get_device_list: {}", std::io::Error::last_os_error()));
    }
    let mut out = String::new();
    let mut result = Ok(());
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n device pointers.
        let dev = unsafe { *list.add(i) };
        if let Err(e) = device(dev, &mut out) {
            result = Err(e);
            break;
        }
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { v::ibv_free_device_list(list) };
    if n == 0 {
        return Err("no RDMA devices (see `rdmashim doctor`)".into());
    }
    result.map(|()| out)
}

fn device(dev: *mut ibv_device, o: &mut String) -> Result<(), String> {
    // SAFETY: dev comes from the device list, which is still allocated.
    let name = unsafe { v::ibv_get_device_name(dev) };
    let name = if name.is_null() {
        "?".into()
    } else {
        // SAFETY: a non-NULL name is a NUL-terminated string owned by the device.
        unsafe { CStr::from_ptr(name) }.to_string_lossy()
    };
    // SAFETY: dev is a device of the list.
    let ctx = unsafe { v::ibv_open_device(dev) };
    if ctx.is_null() {
        return Err(format!("ibv_open_device({name}): {}", std::io::Error::last_os_error()));
    }
    let ctx = Ctx(ctx);
    let ax = ctx.device_ex()?;
    let a = &ax.orig_attr;
    // SAFETY: dev is live; transport_type is a plain field.
    let transport = unsafe { (*dev).transport_type };
    let w = |o: &mut String, s: String| o.push_str(&s);
    w(o, format!("hca_id:\t{name}\n"));
    w(o, format!("\ttransport:\t\t\t{} ({transport})\n", transport_str(transport)));
    let fw = c_chars(&a.fw_ver);
    if !fw.is_empty() {
        w(o, format!("\tfw_ver:\t\t\t\t{fw}\n"));
    }
    w(o, format!("\tnode_guid:\t\t\t{}\n", guid(a.node_guid)));
    w(o, format!("\tsys_image_guid:\t\t\t{}\n", guid(a.sys_image_guid)));
    w(o, format!("\tvendor_id:\t\t\t0x{:04x}\n", a.vendor_id));
    w(o, format!("\tvendor_part_id:\t\t\t{}\n", a.vendor_part_id));
    w(o, format!("\thw_ver:\t\t\t\t0x{:X}\n", a.hw_ver));
    w(o, format!("\tphys_port_cnt:\t\t\t{}\n", a.phys_port_cnt));
    device_limits(o, &ax);
    // SAFETY: the context is live; num_comp_vectors is a plain field.
    let vectors = unsafe { (*ctx.0).num_comp_vectors };
    w(o, format!("\tnum_comp_vectors:\t\t{vectors}\n"));
    for port in 1..=a.phys_port_cnt {
        port_info(o, &ctx, port)?;
    }
    o.push('\n');
    Ok(())
}

fn device_limits(o: &mut String, ax: &ibv_device_attr_ex) {
    let a = &ax.orig_attr;
    let mut line = |label: &str, tabs: usize, value: String| {
        let _ = writeln!(o, "\t{label}:{}{value}", "\t".repeat(tabs));
    };
    line("max_mr_size", 3, format!("0x{:x}", a.max_mr_size));
    line("page_size_cap", 3, format!("0x{:x}", a.page_size_cap));
    line("max_qp", 4, a.max_qp.to_string());
    line("max_qp_wr", 3, a.max_qp_wr.to_string());
    let flags = format!("0x{:08x}{}", a.device_cap_flags, cap_flag_names(a.device_cap_flags));
    line("device_cap_flags", 2, flags);
    line("max_sge", 3, a.max_sge.to_string());
    line("max_sge_rd", 3, a.max_sge_rd.to_string());
    line("max_cq", 4, a.max_cq.to_string());
    line("max_cqe", 3, a.max_cqe.to_string());
    line("max_mr", 4, a.max_mr.to_string());
    line("max_pd", 4, a.max_pd.to_string());
    line("max_qp_rd_atom", 3, a.max_qp_rd_atom.to_string());
    line("max_ee_rd_atom", 3, a.max_ee_rd_atom.to_string());
    line("max_res_rd_atom", 2, a.max_res_rd_atom.to_string());
    line("max_qp_init_rd_atom", 2, a.max_qp_init_rd_atom.to_string());
    line("max_ee_init_rd_atom", 2, a.max_ee_init_rd_atom.to_string());
    line("atomic_cap", 3, format!("{} ({})", atomic_str(a.atomic_cap), a.atomic_cap));
    line("max_ee", 4, a.max_ee.to_string());
    line("max_rdd", 3, a.max_rdd.to_string());
    line("max_mw", 4, a.max_mw.to_string());
    line("max_raw_ipv6_qp", 2, a.max_raw_ipv6_qp.to_string());
    line("max_raw_ethy_qp", 2, a.max_raw_ethy_qp.to_string());
    line("max_mcast_grp", 3, a.max_mcast_grp.to_string());
    line("max_mcast_qp_attach", 2, a.max_mcast_qp_attach.to_string());
    line("max_total_mcast_qp_attach", 1, a.max_total_mcast_qp_attach.to_string());
    line("max_ah", 4, a.max_ah.to_string());
    line("max_fmr", 3, a.max_fmr.to_string());
    if a.max_fmr != 0 {
        line("max_map_per_fmr", 2, a.max_map_per_fmr.to_string());
    }
    line("max_srq", 3, a.max_srq.to_string());
    if a.max_srq != 0 {
        line("max_srq_wr", 3, a.max_srq_wr.to_string());
        line("max_srq_sge", 3, a.max_srq_sge.to_string());
    }
    line("max_pkeys", 3, a.max_pkeys.to_string());
    line("local_ca_ack_delay", 2, a.local_ca_ack_delay.to_string());
    extended(o, ax);
}

/// Writes one capability word as ibv_devinfo does: a line per known bit, in `names`' order,
/// then the bits left over.
fn flag_lines(o: &mut String, caps: u64, names: &[(u64, &str)]) {
    for (bit, name) in names {
        if caps & bit != 0 {
            let _ = writeln!(o, "\t\t\t\t\t{name}");
        }
    }
    let unknown = names.iter().fold(caps, |c, (bit, _)| c & !bit);
    if unknown != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{unknown:X}");
    }
}

/// The extended attributes, in ibv_devinfo's order. Our devices set no TSO, RSS, pacing or
/// tag-matching capability.
fn extended(o: &mut String, ax: &ibv_device_attr_ex) {
    let odp = &ax.odp_caps;
    o.push_str("\tgeneral_odp_caps:\n");
    let general = [
        (ibv_odp_general_caps::IBV_ODP_SUPPORT.0 as u64, "ODP_SUPPORT"),
        (ibv_odp_general_caps::IBV_ODP_SUPPORT_IMPLICIT.0 as u64, "ODP_SUPPORT_IMPLICIT"),
    ];
    flag_lines(o, odp.general_caps, &general);
    type Bits = ibv_odp_transport_cap_bits;
    let transport = [
        (Bits::IBV_ODP_SUPPORT_SEND.0 as u64, "SUPPORT_SEND"),
        (Bits::IBV_ODP_SUPPORT_RECV.0 as u64, "SUPPORT_RECV"),
        (Bits::IBV_ODP_SUPPORT_WRITE.0 as u64, "SUPPORT_WRITE"),
        (Bits::IBV_ODP_SUPPORT_READ.0 as u64, "SUPPORT_READ"),
        (Bits::IBV_ODP_SUPPORT_ATOMIC.0 as u64, "SUPPORT_ATOMIC"),
        (Bits::IBV_ODP_SUPPORT_SRQ_RECV.0 as u64, "SUPPORT_SRQ"),
    ];
    let t = &odp.per_transport_caps;
    for (name, caps) in [
        ("rc_odp_caps", t.rc_odp_caps),
        ("uc_odp_caps", t.uc_odp_caps),
        ("ud_odp_caps", t.ud_odp_caps),
        ("xrc_odp_caps", ax.xrc_odp_caps),
    ] {
        let _ = writeln!(o, "\t{name}:");
        if caps == 0 {
            o.push_str("\t\t\t\t\tNO SUPPORT\n");
        } else {
            flag_lines(o, caps as u64, &transport);
        }
    }
    if ax.completion_timestamp_mask != 0 {
        let _ = writeln!(
            o,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            ax.completion_timestamp_mask
        );
    }
    if ax.hca_core_clock != 0 {
        let _ = writeln!(o, "\thca_core_clock:\t\t\t{}kHZ", ax.hca_core_clock);
    }
    let _ = writeln!(o, "\tdevice_cap_flags_ex:\t\t0x{:X}", ax.device_cap_flags_ex);
    let _ = writeln!(o, "\ttso_caps:\n\t\tmax_tso:\t\t\t{}", ax.tso_caps.max_tso);
    let r = &ax.rss_caps;
    let _ = writeln!(o, "\trss_caps:");
    let _ = writeln!(o, "\t\tmax_rwq_indirection_tables:\t\t\t{}", r.max_rwq_indirection_tables);
    let _ = writeln!(
        o,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        r.max_rwq_indirection_table_size
    );
    let _ = writeln!(o, "\t\trx_hash_function:\t\t\t\t0x{:x}", r.rx_hash_function);
    let _ = writeln!(o, "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}", r.rx_hash_fields_mask);
    let _ = writeln!(o, "\tmax_wq_type_rq:\t\t\t{}", ax.max_wq_type_rq);
    let p = &ax.packet_pacing_caps;
    let _ = writeln!(o, "\tpacket_pacing_caps:");
    let _ = writeln!(o, "\t\tqp_rate_limit_min:\t{}kbps", p.qp_rate_limit_min);
    let _ = writeln!(o, "\t\tqp_rate_limit_max:\t{}kbps", p.qp_rate_limit_max);
    if ax.tm_caps.max_num_tags == 0 {
        o.push_str("\ttag matching not supported\n");
    } else {
        let _ = writeln!(o, "\ttag matching: max_num_tags {}", ax.tm_caps.max_num_tags);
    }
    // Only a device that moderates CQs has the section (ibv_modify_cq's limits).
    let m = &ax.cq_mod_caps;
    if m.max_cq_count != 0 && m.max_cq_period != 0 {
        let _ = writeln!(o, "\n\tcq moderation caps:");
        let _ = writeln!(o, "\t\tmax_cq_count:\t{}", m.max_cq_count);
        let _ = writeln!(o, "\t\tmax_cq_period:\t{} us\n", m.max_cq_period);
    }
    // Only a device with device memory (ibv_alloc_dm) has the line.
    if ax.max_dm_size != 0 {
        let _ = writeln!(o, "\tmaximum available device memory:\t{}Bytes\n", ax.max_dm_size);
    }
}

fn port_info(o: &mut String, ctx: &Ctx, port: u8) -> Result<(), String> {
    let p = ctx.port(port)?;
    let _ = writeln!(o, "\t\tport:\t{port}");
    let mut line = |label: &str, tabs: usize, value: String| {
        let _ = writeln!(o, "\t\t\t{label}:{}{value}", "\t".repeat(tabs));
    };
    line("state", 3, format!("{} ({})", port_state_str(p.state), p.state));
    line("max_mtu", 2, format!("{} ({})", mtu_str(p.max_mtu), p.max_mtu));
    line("active_mtu", 2, format!("{} ({})", mtu_str(p.active_mtu), p.active_mtu));
    line("sm_lid", 3, p.sm_lid.to_string());
    line("port_lid", 2, p.lid.to_string());
    line("port_lmc", 2, format!("0x{:02x}", p.lmc));
    line("link_layer", 2, link_layer_str(p.link_layer).to_string());
    line("max_msg_sz", 2, format!("0x{:x}", p.max_msg_sz));
    line("port_cap_flags", 2, format!("0x{:08x}", p.port_cap_flags));
    line("port_cap_flags2", 1, format!("0x{:04x}", p.port_cap_flags2));
    line("max_vl_num", 2, format!("{} ({})", vl_str(p.max_vl_num), p.max_vl_num));
    line("bad_pkey_cntr", 2, format!("0x{:x}", p.bad_pkey_cntr));
    line("qkey_viol_cntr", 2, format!("0x{:x}", p.qkey_viol_cntr));
    line("sm_sl", 3, p.sm_sl.to_string());
    line("pkey_tbl_len", 2, p.pkey_tbl_len.to_string());
    line("gid_tbl_len", 2, p.gid_tbl_len.to_string());
    line("subnet_timeout", 2, p.subnet_timeout.to_string());
    line("init_type_reply", 1, p.init_type_reply.to_string());
    line("active_width", 2, format!("{}X ({})", width_str(p.active_width), p.active_width));
    line("active_speed", 2, format!("{} ({})", speed_str(p.active_speed), p.active_speed));
    line("phys_state", 2, format!("{} ({})", phys_state_str(p.phys_state), p.phys_state));
    for index in 0..p.gid_tbl_len.max(0) as u32 {
        if let Some((gid, ty)) = gid_entry(ctx, port, index) {
            let _ = writeln!(o, "\t\t\tGID[{index:3}]:\t\t{gid}, {ty}");
        }
    }
    Ok(())
}

/// The names ibv_devinfo prints under `device_cap_flags`, one a line, in bit order (the flags
/// we advertise).
fn cap_flag_names(flags: u32) -> String {
    use ibv_device_cap_flags as f;
    let known = [
        (f::IBV_DEVICE_MEM_WINDOW.0, "MEM_WINDOW"),
        (f::IBV_DEVICE_XRC.0, "XRC"),
        (f::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0, "MEM_WINDOW_TYPE_2B"),
    ];
    let mut s = String::new();
    for (bit, name) in known {
        if flags & bit != 0 {
            s.push_str("\n\t\t\t\t\t");
            s.push_str(name);
        }
    }
    s
}

fn c_chars(s: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = s.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn transport_str(t: ibv_transport_type::Type) -> &'static str {
    match t {
        ibv_transport_type::IBV_TRANSPORT_IB => "InfiniBand",
        ibv_transport_type::IBV_TRANSPORT_IWARP => "iWARP",
        ibv_transport_type::IBV_TRANSPORT_USNIC => "usNIC",
        ibv_transport_type::IBV_TRANSPORT_USNIC_UDP => "usNIC UDP",
        _ => "invalid transport",
    }
}

fn atomic_str(a: ibv_atomic_cap::Type) -> &'static str {
    match a {
        ibv_atomic_cap::IBV_ATOMIC_NONE => "ATOMIC_NONE",
        ibv_atomic_cap::IBV_ATOMIC_HCA => "ATOMIC_HCA",
        ibv_atomic_cap::IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

fn port_state_str(s: ibv_port_state::Type) -> &'static str {
    match s {
        ibv_port_state::IBV_PORT_DOWN => "PORT_DOWN",
        ibv_port_state::IBV_PORT_INIT => "PORT_INIT",
        ibv_port_state::IBV_PORT_ARMED => "PORT_ARMED",
        ibv_port_state::IBV_PORT_ACTIVE => "PORT_ACTIVE",
        ibv_port_state::IBV_PORT_ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
        _ => "invalid state",
    }
}

fn mtu_str(m: ibv_mtu::Type) -> &'static str {
    match m {
        ibv_mtu::IBV_MTU_256 => "256",
        ibv_mtu::IBV_MTU_512 => "512",
        ibv_mtu::IBV_MTU_1024 => "1024",
        ibv_mtu::IBV_MTU_2048 => "2048",
        ibv_mtu::IBV_MTU_4096 => "4096",
        _ => "invalid MTU",
    }
}

/// verbs.h's `IBV_LINK_LAYER_*` is an anonymous enum, which rdma-sys does not carry:
/// 0 unspecified, 1 InfiniBand, 2 Ethernet.
fn link_layer_str(l: u8) -> &'static str {
    match l {
        0 | 1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unknown",
    }
}

fn vl_str(n: u8) -> &'static str {
    match n {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}
