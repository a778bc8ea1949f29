//! UD addressing in the verbs layer: resolving an address handle into the destination a
//! provider sends to, and `ibv_init_ah_from_wc` (the address that answers a received message).
//! The datagram transport itself is the provider's (`provider/soft/ud.rs`).

use super::ah::Ah;
use super::device;
use crate::errno::{Errno, Result};
use crate::provider::UdDest;
pub use crate::provider::GRH_LEN;
use crate::sys::*;
use std::net::IpAddr;

/// `ibv_flow_label_to_udp_sport`: the RoCEv2 UDP source port of a GRH flow label, as verbs.h
/// folds it: the label's upper 6 of 20 bits XORed into its lower 14, in the range 0xC000..=0xFFFF.
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low | 0xc000) as u16
}

/// The destination of a UD send through `ah`: the GIDs of its address vector (the source GID
/// by index in the GID table, the first one if out of range).
pub fn resolve(ah: &Ah, remote_qpn: u32, remote_qkey: u32) -> UdDest {
    let table = device::gids();
    let attr = &ah.attr;
    let sgid = table.get(attr.grh.sgid_index as usize).or(table.get(0)).unwrap_or([0; 16]);
    // SAFETY: ibv_gid is a union of byte views; raw is always valid.
    let dgid = if attr.is_global != 0 { unsafe { attr.grh.dgid.raw } } else { sgid };
    UdDest { remote_qpn, remote_qkey, sgid, dgid }
}

/// `ibv_init_ah_from_wc`: the address that answers the sender of a received UD message.
pub fn ah_attr_from_wc(
    port: u8,
    wc: &ibv_wc,
    grh: Option<&[u8; GRH_LEN]>,
    out: &mut ibv_ah_attr,
) -> Result<()> {
    // SAFETY: all-zero is a valid ibv_ah_attr.
    *out = unsafe { std::mem::zeroed() };
    out.dlid = wc.slid;
    out.sl = wc.sl;
    out.src_path_bits = wc.dlid_path_bits;
    out.port_num = port;
    if wc.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0 {
        let g = grh.ok_or(Errno::EINVAL)?;
        let mut sgid = [0u8; 16];
        let mut dgid = [0u8; 16];
        if g[20] >> 4 == 4 && g[..20].iter().all(|b| *b == 0) {
            // RoCEv2 over IPv4 (as rxe fills it): 20 zero bytes, then the IPv4 header.
            let v4 =
                |at: usize| device::gid_of(IpAddr::from([g[at], g[at + 1], g[at + 2], g[at + 3]]));
            sgid = v4(32);
            dgid = v4(36);
        } else if g[0] >> 4 == 6 {
            sgid.copy_from_slice(&g[8..24]);
            dgid.copy_from_slice(&g[24..40]);
        } else {
            return Err(Errno::EINVAL);
        }
        out.is_global = 1;
        out.grh.dgid.raw = sgid;
        out.grh.sgid_index = device::gids().position(&dgid).unwrap_or(0) as u8;
        out.grh.hop_limit = 0xff;
        out.grh.traffic_class = ((u32::from_be_bytes([g[0], g[1], g[2], g[3]]) >> 20) & 0xff) as u8;
        out.grh.flow_label = u32::from_be_bytes([g[0], g[1], g[2], g[3]]) & 0xfffff;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::flow_label_to_udp_sport;

    #[test]
    fn udp_sport_folds_the_flow_label() {
        assert_eq!(flow_label_to_udp_sport(0), 0xc000);
        assert_eq!(flow_label_to_udp_sport(0x3fff), 0xffff);
        assert_eq!(flow_label_to_udp_sport(0x4000), 0xc001, "bit 14 folds onto bit 0");
        assert_eq!(flow_label_to_udp_sport(0xf_ffff), 0xffc0);
        assert_eq!(flow_label_to_udp_sport(0xfff0_0000), 0xc000, "only 20 bits count");
    }
}
