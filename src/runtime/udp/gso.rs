//! Segmentation offload for bursts: datagrams of one length to one destination go as one
//! `UDP_SEGMENT` send, which the kernel (or the NIC) cuts into the same datagrams on the wire;
//! a receiving socket with `UDP_GRO` gets such a burst (or datagrams a NIC's GRO merged) as one
//! buffer and the segment length. A veth or loopback hop carries the burst as one packet, so
//! its cost is paid once per burst, not per datagram.
//!
//! On the wire nothing changes but one header field: Linux numbers the IPv4 IDs of a segmented
//! send's datagrams 0, 1, 2, … where single sends of an unconnected DF socket all carry 0.
//! Whoever computes checksums over the IP header (the RoCEv2 ICRC) must know the segment's
//! position: [`runs`] is the one place that decides it.

use super::{mapped, msghdr, sockaddr6};
use crate::errno::{Errno, Result};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Most datagrams in one segmented send (the kernel's `UDP_MAX_SEGMENTS` is 64 or 128).
pub const MAX_SEGMENTS: usize = 64;
/// Most bytes in one segmented send: it is one IP datagram until it is cut.
pub const MAX_BYTES: usize = 65_000;
/// Most datagrams one [`send_runs_from`] call takes, over all its runs.
const MAX_DATAGRAMS: usize = 256;
/// Most runs one call takes.
const MAX_RUNS: usize = 64;

/// Cleared when the kernel refuses a segmented send (no `UDP_SEGMENT`, or a device path that
/// cannot take one): from then on every datagram goes alone.
static USABLE: AtomicBool = AtomicBool::new(true);

/// Whether segmented sends are worth trying.
pub fn usable() -> bool {
    USABLE.load(Ordering::Relaxed)
}

/// Cuts datagrams of lengths `lens` (in sending order) into runs that one segmented send
/// carries: all of one length except the last, which may be shorter; at most
/// [`MAX_SEGMENTS`] datagrams and [`MAX_BYTES`] bytes. A datagram's index in its run is the
/// IPv4 ID the kernel gives it.
pub fn runs(lens: &[usize], out: &mut Vec<Range<usize>>) {
    out.clear();
    let mut i = 0;
    while i < lens.len() {
        let (seg, start) = (lens[i], i);
        let mut bytes = seg;
        i += 1;
        while i < lens.len()
            && i - start < MAX_SEGMENTS
            && bytes + lens[i] <= MAX_BYTES
            && lens[i] <= seg
            && seg > 0
        {
            bytes += lens[i];
            i += 1;
            if lens[i - 1] < seg {
                break;
            }
        }
        out.push(start..i);
    }
}

/// Lets the kernel hand `fd` a burst as one buffer (`UDP_GRO`); whether it agreed.
pub fn enable_gro(fd: RawFd) -> bool {
    super::setopt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Sends `data[r]` for each run `r` of `runs` (from [`runs`]) as one segmented send each, from
/// `src` to `dst`, without blocking and with one system call: how many runs went (the first
/// ones), or the error if the first could not go. `EOPNOTSUPP` when the kernel refuses
/// segmented sends (then [`usable`] turns false and nothing of this call was sent).
pub fn send_runs_from(
    fd: RawFd,
    src: IpAddr,
    dst: SocketAddr,
    data: &[&[u8]],
    runs: &[Range<usize>],
) -> Result<usize> {
    let mut count = 0;
    let mut datagrams = 0;
    for r in runs.iter().take(MAX_RUNS) {
        if r.is_empty() || r.end > data.len() || datagrams + r.len() > MAX_DATAGRAMS {
            break;
        }
        datagrams += r.len();
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    let mut sa = sockaddr6(dst);
    let info = libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr { s6_addr: mapped(src).octets() },
        ipi6_ifindex: 0,
    };
    let mut iovs = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_DATAGRAMS];
    let mut cbufs = [[0u64; 8]; MAX_RUNS];
    // SAFETY: all-zero is a valid mmsghdr; each is filled in below.
    let mut hdrs: [libc::mmsghdr; MAX_RUNS] = unsafe { std::mem::zeroed() };
    let mut at = 0;
    for (k, r) in runs.iter().take(count).enumerate() {
        for (j, d) in data[r.clone()].iter().enumerate() {
            iovs[at + j] = libc::iovec { iov_base: d.as_ptr() as *mut _, iov_len: d.len() };
        }
        let segmented = r.len() > 1;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe {
            libc::CMSG_SPACE(std::mem::size_of::<libc::in6_pktinfo>() as u32)
                + if segmented { libc::CMSG_SPACE(2) } else { 0 }
        };
        let mut iov0 = iovs[at];
        let mut msg = msghdr(&mut sa, &mut iov0, &mut cbufs[k], space as usize);
        msg.msg_iov = &mut iovs[at];
        msg.msg_iovlen = r.len();
        // SAFETY: msg_control points at cbufs[k] (64 bytes), room for the pktinfo message
        // (32 bytes) and a u16 segment-size message (16 bytes); CMSG_NXTHDR stays inside
        // msg_controllen, which counts both.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::IPPROTO_IPV6;
            (*c).cmsg_type = libc::IPV6_PKTINFO;
            (*c).cmsg_len =
                libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
            if segmented {
                let c = libc::CMSG_NXTHDR(&msg, c);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                let seg = data[r.start].len() as u16;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
        hdrs[k].msg_hdr = msg;
        at += r.len();
    }
    let Some(_wire) = super::super::pcap::wire() else { return Ok(count) };
    // SAFETY: every header points at the shared name, its own control buffer and its own
    // iovecs, all alive and unmoved until the call returns; the data are borrowed slices.
    let n = unsafe {
        libc::sendmmsg(
            fd,
            hdrs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        let e = Errno::last();
        // EIO: the route's device cannot take a segmented send; EINVAL/ENOPROTOOPT: a kernel
        // without UDP_SEGMENT. A segmented first run is what failed only if it was segmented.
        let refused = matches!(e.0, libc::EIO | libc::EINVAL | libc::ENOPROTOOPT);
        if refused && runs[0].len() > 1 {
            USABLE.store(false, Ordering::Relaxed);
            return Err(Errno::EOPNOTSUPP);
        }
        return Err(e);
    }
    if super::super::pcap::on() {
        // Segment k of a run leaves with IPv4 ID k (see the module's comment).
        let sent = runs[..n as usize].iter().flat_map(|r| data[r.clone()].iter().enumerate());
        super::captured_sent(fd, src, dst, sent.map(|(k, d)| (k as u16, *d)));
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::udp::{local_port, open, RecvBatch};
    use std::os::fd::AsRawFd;

    fn cut(lens: &[usize]) -> Vec<Range<usize>> {
        let mut v = Vec::new();
        runs(lens, &mut v);
        v
    }

    #[test]
    fn runs_are_equal_lengths_with_a_shorter_last() {
        assert_eq!(cut(&[]), Vec::<Range<usize>>::new());
        assert_eq!(cut(&[100]), vec![0..1]);
        assert_eq!(cut(&[100, 100, 100, 40, 100, 100]), vec![0..4, 4..6]);
        // A longer datagram starts a new run; so does one after the shorter last.
        assert_eq!(cut(&[40, 100, 100]), vec![0..1, 1..3]);
        assert_eq!(cut(&[100, 40, 40]), vec![0..2, 2..3]);
        // At most MAX_SEGMENTS datagrams and MAX_BYTES bytes.
        assert_eq!(cut(&[10; 130]), vec![0..64, 64..128, 128..130]);
        let big = cut(&[1040; 100]);
        assert!(big.iter().all(|r| r.len() * 1040 <= MAX_BYTES), "{big:?}");
        assert_eq!(big.iter().map(|r| r.len()).sum::<usize>(), 100);
        // Zero-length datagrams go alone.
        assert_eq!(cut(&[0, 0]), vec![0..1, 1..2]);
    }

    #[test]
    fn a_segmented_send_arrives_as_its_datagrams() {
        let a = open(0, None).unwrap();
        let b = open(0, Some(1 << 20)).unwrap();
        let gro = enable_gro(b.as_raw_fd());
        let pb = local_port(b.as_raw_fd()).unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let msgs: Vec<Vec<u8>> =
            (0..70u8).map(|i| vec![i; if i == 39 || i == 69 { 17 } else { 300 }]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        let lens: Vec<usize> = refs.iter().map(|m| m.len()).collect();
        let rs = cut(&lens);
        assert_eq!(rs, vec![0..40, 40..70]);
        assert_eq!(
            send_runs_from(a.as_raw_fd(), lo, SocketAddr::new(lo, pb), &refs, &rs).unwrap(),
            2
        );
        let mut batch = RecvBatch::new(8, 1 << 16);
        let mut seen: Vec<Vec<u8>> = Vec::new();
        for _ in 0..1000 {
            let n = batch.recv(b.as_raw_fd()).unwrap();
            for i in 0..n {
                let (r, data) = batch.get(i).unwrap();
                let r = r.unwrap();
                assert_eq!(r.to, Some(lo));
                if !gro {
                    assert_eq!(r.segment, data.len());
                }
                seen.extend(data.chunks(r.segment).map(|c| c.to_vec()));
            }
            if seen.len() >= 70 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(seen, msgs);
    }
}
