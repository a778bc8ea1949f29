//! Packets passed on from port 4791 to the process whose UDP socket owns their destination
//! ([`well_known`](super::well_known)). Each of our UDP ports has an inbox, an abstract unix
//! datagram socket `rdmashim/udp/<port>` in the same network namespace; the owner of 4791 sends
//! it the packet with the addresses it travelled between (the ICRC covers them, and a QP checks
//! who sent it). Inboxes take datagrams only from users we accept (`SCM_CREDENTIALS`), as QP
//! sockets do: otherwise a local user could claim any source address.

use crate::errno::{Errno, Result};
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::{access, lock, udp, unix};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an inbox does with a packet: `(packet, from, to)`, `to` being `ip:4791`.
pub type OnPacket = Arc<dyn Fn(&[u8], SocketAddr, SocketAddr) + Send + Sync>;

const MAGIC: &[u8; 8] = b"RSUDPRL1";
/// Magic, the sender's IPv6 (or v4-mapped) address and port, the address it was sent to.
const HEADER: usize = 8 + 16 + 2 + 16;
/// The largest packet passed on: a 4096-byte MTU's payload with every header.
const MAX_PACKET: usize = 4096 + 128;
/// Datagrams an inbox takes per readiness event (a flood cannot hold the progress thread).
const PER_EVENT: usize = 64;

/// Packets refused by an inbox (unknown user, malformed) or that could not be passed on.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

fn inbox_name(port: u16) -> String {
    format!("rdmashim/udp/{port}")
}

/// The envelope of a packet from `from` to `to`.
pub fn encode_header(from: SocketAddr, to: IpAddr) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..24].copy_from_slice(&udp::mapped(from.ip()).octets());
    h[24..26].copy_from_slice(&from.port().to_be_bytes());
    h[26..42].copy_from_slice(&udp::mapped(to).octets());
    h
}

/// The packet and its addresses (`to` at port 4791, both as `udp::recv` gives them) from an
/// envelope, or `None`.
pub fn decode(b: &[u8]) -> Option<(&[u8], SocketAddr, SocketAddr)> {
    if b.len() <= HEADER || !b.starts_with(MAGIC) {
        return None;
    }
    let ip = |r: std::ops::Range<usize>| -> Option<Ipv6Addr> {
        Some(Ipv6Addr::from(<[u8; 16]>::try_from(b.get(r)?).ok()?))
    };
    let port = u16::from_be_bytes([b[24], b[25]]);
    // As `udp::recv` reports them: IPv4 as IPv4.
    let from = SocketAddr::new(udp::unmapped(ip(8..24)?), port);
    let to = SocketAddr::new(udp::unmapped(ip(26..42)?), super::super::roce::ROCE_UDP_PORT);
    Some((&b[HEADER..], from, to))
}

/// The inbox of one of our UDP ports, watched by the progress engine until dropped.
pub struct Inbox {
    fd: Arc<OwnedFd>,
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Unwatched before the descriptor closes: its number may be reused by another watch.
        if let Ok(e) = engine() {
            e.unwatch(self.fd.as_raw_fd());
        }
    }
}

/// Opens the inbox of our UDP `port`, read by the progress engine: each accepted packet goes
/// to `on`. Keep it as long as the port.
pub fn open_inbox(port: u16, on: OnPacket) -> Result<Inbox> {
    let fd = Arc::new(unix::bind_dgram(&inbox_name(port))?);
    let weak = Arc::downgrade(&fd);
    engine()?.watch(
        fd.as_raw_fd(),
        Arc::new(move |_| {
            let Some(fd) = weak.upgrade() else { return };
            let mut buf = [0u8; HEADER + MAX_PACKET];
            for _ in 0..PER_EVENT {
                match unix::recv_dgram(fd.as_raw_fd(), &mut buf) {
                    Ok(Some((n, uid))) => {
                        match (uid.filter(|&u| access::allowed(u)), decode(&buf[..n])) {
                            (Some(_), Some((pkt, from, to))) => on(pkt, from, to),
                            _ => {
                                DROPPED.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        DROPPED.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }),
    )?;
    Ok(Inbox { fd })
}

/// The socket packets are passed on from (unbound; the receiver sees our credentials).
static SENDER: PerProcess<Mutex<Option<OwnedFd>>> = PerProcess::new(|| Mutex::new(None));

/// Passes `pkt` (from `from` to our `to`) to the inbox of UDP port `port` in this namespace.
/// `ECONNREFUSED` if no such inbox (no process of ours owns that port), `EAGAIN` if its queue
/// is full (a loss, as on the wire).
pub fn forward(port: u16, pkt: &[u8], from: SocketAddr, to: IpAddr) -> Result<()> {
    if pkt.len() > MAX_PACKET {
        return Err(Errno::EINVAL);
    }
    let mut s = lock(SENDER.get());
    if s.is_none() {
        *s = Some(unix::unbound_dgram()?);
    }
    let fd = s.as_ref().ok_or(Errno::EBADF)?.as_raw_fd();
    let header = encode_header(from, to);
    unix::send_dgram(fd, &inbox_name(port), &[&header, pkt])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_round_trips_and_garbage_is_refused() {
        let from: SocketAddr = "10.1.2.3:50123".parse().unwrap();
        let to: IpAddr = "10.1.2.4".parse().unwrap();
        let mut b = encode_header(from, to).to_vec();
        b.extend_from_slice(b"packet");
        let (pkt, f, t) = decode(&b).expect("decodes");
        assert_eq!(pkt, b"packet");
        assert_eq!(f, from);
        assert_eq!(t, SocketAddr::new(to, 4791));
        assert!(decode(&b[..HEADER]).is_none(), "no packet");
        assert!(decode(&b[1..]).is_none(), "no magic");
        assert!(decode(b"").is_none());
    }

    #[test]
    fn a_packet_reaches_the_inbox_of_its_port_and_nowhere_else() {
        let port = 1; // nobody's UDP port here: no inbox of the real ones collides
        type Got = Vec<(Vec<u8>, SocketAddr)>;
        let got: Arc<Mutex<Got>> = Arc::default();
        let g = got.clone();
        let _inbox = open_inbox(
            port,
            Arc::new(move |p: &[u8], from, _to| g.lock().unwrap().push((p.to_vec(), from))),
        )
        .expect("inbox");
        let from: SocketAddr = "[fd00::7]:4000".parse().unwrap();
        forward(port, b"hello", from, "fd00::8".parse().unwrap()).expect("sent");
        assert_eq!(forward(2, b"x", from, "fd00::8".parse().unwrap()), Err(Errno::ECONNREFUSED));
        let t0 = std::time::Instant::now();
        while got.lock().unwrap().is_empty() && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.lock().unwrap().as_slice(), &[(b"hello".to_vec(), from)]);
    }
}
