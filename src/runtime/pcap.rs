//! `RDMASHIM_PCAP=FILE`: the soft provider's UDP traffic (RoCEv2 data, UD and multicast, and
//! the CM's MADs to QP1), and the packets the same-host path's requests stand for
//! (`provider/soft/ring_capture.rs`), as a classic pcap file of Ethernet frames, which tshark
//! and Wireshark decode as InfiniBand.
//!
//! The sockets see UDP payloads, not frames, so each datagram a socket of ours sent or received
//! is written as the frame a wire would carry: Ethernet (locally administered MACs made from
//! the IP addresses), IPv4 (the ID the datagram had: 0, or k for segment k of a segmented send;
//! DF, TTL 64) or IPv6, UDP, then the datagram, ICRC included. A segmented send or a burst
//! received whole is written segment by segment. Our QPNs live on their own UDP ports, so a
//! reader decodes ports other than 4791 as RoCEv2 with `-d udp.port==P,infiniband`.
//!
//! `%p` in the name is replaced by the process ID. Several processes may share one file: the
//! header goes in once, by whichever creates the file, and each record is one `write` to a
//! descriptor opened for appending. An existing capture is appended to. When the variable is
//! unset, the cost is one load of a value initialised once.

use once_cell::sync::Lazy;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{RwLock, RwLockReadGuard, TryLockError};
use std::time::{Duration, SystemTime};

const MAGIC: u32 = 0xa1b2_c3d4;
const LINKTYPE_ETHERNET: u32 = 1;
const SNAPLEN: u32 = 65535;

/// The global header of a pcap file holding Ethernet frames.
pub fn file_header() -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&MAGIC.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes()); // GMT offset
    h.extend_from_slice(&0u32.to_le_bytes()); // timestamp accuracy
    h.extend_from_slice(&SNAPLEN.to_le_bytes());
    h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// Appends one record holding `frame`, stamped `at` after the epoch.
pub fn record(out: &mut Vec<u8>, at: Duration, frame: &[u8]) {
    let secs = u32::try_from(at.as_secs()).unwrap_or(u32::MAX);
    out.extend_from_slice(&secs.to_le_bytes());
    out.extend_from_slice(&at.subsec_micros().to_le_bytes());
    out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    out.extend_from_slice(frame);
}

/// The frames of a pcap file written by [`file_header`] / [`record`] (little-endian, Ethernet).
pub fn frames(file: &[u8]) -> Result<Vec<&[u8]>, String> {
    if file.len() < 24 || file[..4] != MAGIC.to_le_bytes() {
        return Err("not a little-endian pcap file".into());
    }
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let h = file.get(at..at + 16).ok_or("truncated record header")?;
        let incl = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        out.push(file.get(at + 16..at + 16 + incl).ok_or("truncated record")?);
        at += 16 + incl;
    }
    Ok(out)
}

/// The one's complement sum of `data` as 16-bit big-endian words, added to `sum`.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

fn fold(sum: u32) -> u16 {
    let mut s = sum;
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A locally administered MAC for an address (its last four bytes).
fn mac(ip: IpAddr) -> [u8; 6] {
    let b = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

fn plain(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 => v4,
    }
}

/// The Ethernet/IP/UDP frame around `payload` sent from `src` to `dst`, as an unconnected
/// Linux socket with `IP_PMTUDISC_DO` sends it: IPv4 with ID `ipv4_id`, DF and TTL 64, and no
/// UDP checksum (allowed on IPv4); IPv6 with hop limit 64 and the UDP checksum it requires.
/// v4-mapped addresses are IPv4; a pair of two families is written as IPv6.
pub fn udp_frame(src: SocketAddr, dst: SocketAddr, ipv4_id: u16, payload: &[u8]) -> Vec<u8> {
    let (s, d) = (plain(src.ip()), plain(dst.ip()));
    let udp_len = (8 + payload.len()) as u16;
    let mut f = Vec::with_capacity(62 + payload.len());
    f.extend_from_slice(&mac(d));
    f.extend_from_slice(&mac(s));
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    match (s, d) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[4..6].copy_from_slice(&ipv4_id.to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let c = fold(sum16(0, &ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let (s, d) = (v6(s).octets(), v6(d).octets());
            f.extend_from_slice(&[0x86, 0xdd]);
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s);
            ip[24..40].copy_from_slice(&d);
            f.extend_from_slice(&ip);
            // Pseudo-header (addresses, length, next header), UDP header, payload.
            let mut sum = sum16(sum16(0, &s), &d);
            sum = sum16(sum, &u32::from(udp_len).to_be_bytes());
            sum = sum16(sum, &[0, 0, 0, 17]);
            sum = sum16(sum16(sum, &udp), payload);
            let c = match fold(sum) {
                0 => 0xffff, // zero means "no checksum", which IPv6 forbids
                c => c,
            };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
        }
    }
    f.extend_from_slice(&udp);
    f.extend_from_slice(payload);
    f
}

struct Capture {
    file: File,
}

static CAPTURE: Lazy<Option<Capture>> = Lazy::new(|| {
    let name = std::env::var_os("RDMASHIM_PCAP")?;
    let name = name.to_string_lossy().replace("%p", &std::process::id().to_string());
    match open(&name) {
        Ok(file) => {
            // SAFETY: registering a function with C linkage that takes no arguments and
            // cannot unwind; failure (no room for handlers) only reopens the race it closes.
            unsafe { libc::atexit(close_wire) };
            Some(Capture { file })
        }
        Err(e) => {
            eprintln!("rdmashim: RDMASHIM_PCAP={name}: {e}; capturing nothing");
            None
        }
    }
});

/// Opens the capture for appending. The header goes into a private temporary file that is then
/// linked into place, so a file that exists has its header whoever made it.
fn open(name: &str) -> std::io::Result<File> {
    let tmp = format!("{name}.{}.tmp", std::process::id());
    std::fs::write(&tmp, file_header())?;
    let linked = std::fs::hard_link(&tmp, name);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            // A file system without hard links: create it in place.
            if let Ok(mut f) = OpenOptions::new().write(true).create_new(true).open(name) {
                f.write_all(&file_header())?;
            }
        }
        _ => {}
    }
    let f = OpenOptions::new().read(true).append(true).open(name)?;
    // A capture that does not start with our header is not one to append to.
    let mut head = [0u8; 4];
    use std::os::unix::fs::FileExt;
    if f.read_at(&mut head, 0)? != 4 || head != MAGIC.to_le_bytes() {
        return Err(std::io::Error::other("not a pcap file written by rdmashim"));
    }
    Ok(f)
}

/// Whether traffic is being captured.
#[inline]
pub fn on() -> bool {
    CAPTURE.is_some()
}

/// Sends against the process's exit: a thread's sends hold the read side between putting
/// datagrams on the wire and recording them, and the exit takes the write side for good. A
/// thread still sending when another calls `exit(3)` (a progress thread answering a DREQ)
/// either records what it sent before the process ends, or sends nothing. Without it a capture
/// could miss a packet the wire carried.
struct ExitGate {
    wire: RwLock<()>,
    /// The thread that closed the gate (0: open): its own sends (the kept ACKs, a destructor's
    /// disconnect) go on and are recorded, in order, as before.
    closer: AtomicI32,
}

static GATE: ExitGate = ExitGate { wire: RwLock::new(()), closer: AtomicI32::new(0) };

/// Permission to send (see [`wire`]), held until the datagrams sent are recorded.
pub struct Wire(#[allow(dead_code)] Option<RwLockReadGuard<'static, ()>>);

impl ExitGate {
    fn enter(&'static self) -> Option<Wire> {
        if self.closer.load(Ordering::Acquire) == tid() {
            return Some(Wire(None));
        }
        match self.wire.try_read() {
            Ok(g) => Some(Wire(Some(g))),
            Err(TryLockError::Poisoned(e)) => Some(Wire(Some(e.into_inner()))),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Closes the gate once sends in flight are recorded. A reader's count inherited across
    /// fork() from a thread the child lacks is waited for only `patience`.
    fn close(&self, patience: Duration) {
        self.closer.store(tid(), Ordering::Release);
        let until = std::time::Instant::now() + patience;
        loop {
            match self.wire.try_write() {
                Ok(g) => return std::mem::forget(g),
                Err(TryLockError::Poisoned(e)) => return std::mem::forget(e.into_inner()),
                Err(TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(TryLockError::WouldBlock) => return,
            }
        }
    }
}

/// Whether this thread may put datagrams on the wire now: `None` once another thread is ending
/// the process with a capture on (the datagrams are then not sent, as if the process had
/// ended a moment earlier). Costs one load when capture is off.
pub fn wire() -> Option<Wire> {
    if !on() {
        return Some(Wire(None));
    }
    GATE.enter()
}

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

extern "C" fn close_wire() {
    // No panic may leave through exit(3).
    let _ = std::panic::catch_unwind(|| GATE.close(Duration::from_millis(200)));
}

/// Writes datagram `data`, sent from `src` to `dst` with IPv4 ID `ipv4_id` (or received: the
/// ID is not known then, 0 is written).
pub fn datagram(src: SocketAddr, dst: SocketAddr, ipv4_id: u16, data: &[u8]) {
    let Some(c) = CAPTURE.as_ref() else { return };
    let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let frame = udp_frame(src, dst, ipv4_id, data);
    let mut rec = Vec::with_capacity(16 + frame.len());
    record(&mut rec, at, &frame);
    // One write per record: records of several threads or processes never interleave. A full
    // disk loses records, never the program's traffic.
    let _ = (&c.file).write_all(&rec);
}

/// [`datagram`] for a received buffer: a burst the kernel kept whole (`segment` bytes each but
/// the last) is written datagram by datagram. `to` unknown: the unspecified address.
pub fn received(from: SocketAddr, to: Option<IpAddr>, port: u16, data: &[u8], segment: usize) {
    let to = SocketAddr::new(to.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), port);
    for d in data.chunks(segment.max(1)) {
        datagram(from, to, 0, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 frame: header checksum right (the header sums to 0xffff), lengths, ID, DF, TTL,
    /// ports and payload where a reader looks for them; mapped addresses are IPv4.
    #[test]
    fn an_ipv4_frame_is_what_the_wire_carries() {
        let src: SocketAddr = "[::ffff:10.0.0.1]:50000".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let f = udp_frame(src, dst, 7, b"hello");
        assert_eq!(f.len(), 14 + 20 + 8 + 5);
        assert_eq!(&f[0..6], &[2, 0, 10, 0, 0, 2], "destination MAC from the address");
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        assert_eq!(fold(sum16(0, ip)), 0, "header checksum");
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 33);
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 7, "IPv4 ID");
        assert_eq!((ip[6], ip[8], ip[9]), (0x40, 64, 17));
        assert_eq!(&ip[12..20], &[10, 0, 0, 1, 10, 0, 0, 2]);
        let udp = &f[34..42];
        assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 50000);
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791);
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 13);
        assert_eq!(&f[42..], b"hello");
    }

    /// An IPv6 frame carries the UDP checksum IPv6 requires: pseudo-header, header and payload
    /// (odd length included) sum to 0xffff.
    #[test]
    fn an_ipv6_frame_has_a_right_udp_checksum() {
        let src: SocketAddr = "[fd00::1]:1234".parse().unwrap();
        let dst: SocketAddr = "[fd00::2]:4791".parse().unwrap();
        let f = udp_frame(src, dst, 0, b"odd");
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        let ip = &f[14..54];
        assert_eq!((ip[0], ip[6], ip[7]), (0x60, 17, 64));
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 11);
        let udp = &f[54..];
        let mut sum = sum16(sum16(0, &ip[8..24]), &ip[24..40]);
        sum = sum16(sum, &11u32.to_be_bytes());
        sum = sum16(sum, &[0, 0, 0, 17]);
        assert_eq!(fold(sum16(sum, udp)), 0, "UDP checksum");
        assert_ne!(&udp[6..8], &[0, 0]);
    }

    /// Records written are read back frame by frame; a truncated file is refused.
    #[test]
    fn the_exit_waits_for_a_send_in_flight_then_stops_other_threads() {
        static G: ExitGate = ExitGate { wire: RwLock::new(()), closer: AtomicI32::new(0) };
        let sending = G.enter().expect("open");
        let closer = std::thread::spawn(|| {
            G.close(Duration::from_secs(30));
            let own = G.enter().is_some();
            (std::time::Instant::now(), own)
        });
        std::thread::sleep(Duration::from_millis(50));
        let recorded = std::time::Instant::now();
        drop(sending);
        let (closed, own) = closer.join().unwrap();
        assert!(closed >= recorded, "the exit waited for the send to be recorded");
        assert!(own, "the exiting thread still sends");
        assert!(G.enter().is_none(), "another thread sends nothing once the exit began");
    }

    #[test]
    fn the_exit_does_not_wait_forever_for_a_reader() {
        static G: ExitGate = ExitGate { wire: RwLock::new(()), closer: AtomicI32::new(0) };
        let stuck = G.enter().expect("open");
        G.close(Duration::from_millis(20));
        assert!(G.enter().is_some(), "the closer goes on");
        drop(stuck);
    }

    #[test]
    fn records_read_back() {
        let mut file = file_header();
        record(&mut file, Duration::from_micros(1_500_000), b"one");
        record(&mut file, Duration::from_secs(2), b"second");
        assert_eq!(frames(&file).unwrap(), [&b"one"[..], &b"second"[..]]);
        assert_eq!(&file[24..32], &[1, 0, 0, 0, 0x20, 0xa1, 0x07, 0], "1 s 500000 us");
        assert!(frames(&file[..file.len() - 1]).is_err());
        assert!(frames(&file[1..]).is_err());
    }
}
