//! What carries an id's CM messages to its peer, chosen by where the peer is:
//! * [`Carrier::Unix`]: a unix stream connection to the listener's abstract rendezvous name
//!   (peer in our network namespace; fast, and its hang-up tells a vanished peer at once);
//! * [`Carrier::Mad`]: an association of InfiniBand CM MADs over RoCEv2/UDP ([`super::net`])
//!   (peer in another namespace or host; a vanished peer shows as a retry budget running out).
//!
//! The id's state machine ([`super::id`]) sees only the internal [`Msg`] either way: it sends
//! with [`CmId::send`] and gets `on_msg` / `on_hangup` back. A MAD carrier has no hang-up, so
//! there the id's QP failing on its own ([`CmId::watch_qp`]) ends the connection too.

use super::id::{lock, CmId, State};
use super::net::Assoc;
use super::proto::{self, Msg};
use crate::errno::{Errno, Result};
use crate::runtime::engine::engine;
use crate::runtime::unix::{self, Pod};
use crate::verbs::qp::Qp;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// A CM connection of one id.
#[derive(Clone)]
pub enum Carrier {
    Unix(Arc<OwnedFd>),
    Mad(Arc<Assoc>),
}

impl Carrier {
    /// Stops delivering to the id (it is destroyed, or the exchange needs no more messages).
    pub fn close(&self) {
        match self {
            Carrier::Unix(fd) => {
                if let Ok(e) = engine() {
                    e.unwatch(fd.as_raw_fd());
                }
            }
            Carrier::Mad(a) => a.close(),
        }
    }
}

/// The rendezvous name of a bound id; an IPv6 wildcard with AFONLY gets its own name, which
/// IPv4 connections do not try.
pub(super) fn rendezvous_for(ps: u32, ip: IpAddr, port: u16, v6only: bool) -> String {
    let only = if v6only { "/v6only" } else { "" };
    format!("rdmashim/cm/{ps:x}/{port}/{ip}{only}")
}

/// The rendezvous names of the listeners of port space `ps` that take a connection to
/// `remote`, most specific first: the exact address, then the wildcards that cover it.
pub(super) fn listener_names(ps: u32, remote: SocketAddr) -> Vec<String> {
    let port = remote.port();
    let mut names = vec![rendezvous_for(ps, remote.ip(), port, false)];
    if remote.is_ipv4() {
        names.push(rendezvous_for(ps, IpAddr::V4(Ipv4Addr::UNSPECIFIED), port, false));
    }
    names.push(rendezvous_for(ps, IpAddr::V6(Ipv6Addr::UNSPECIFIED), port, false));
    if remote.is_ipv6() {
        // An AFONLY [::] listener takes IPv6 connections only.
        names.push(rendezvous_for(ps, IpAddr::V6(Ipv6Addr::UNSPECIFIED), port, true));
    }
    names
}

/// Opens a unix CM connection to the listener of port space `ps` for `remote`.
pub(super) fn dial(ps: u32, remote: SocketAddr) -> Result<OwnedFd> {
    let mut last = Errno::ECONNREFUSED;
    for n in listener_names(ps, remote) {
        match unix::connect(&n) {
            Ok(fd) => return Ok(fd),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl CmId {
    /// Takes ownership of a unix CM connection and watches it for messages and hang-up.
    pub(super) fn adopt_conn(&self, conn: OwnedFd) -> Result<()> {
        unix::set_nonblocking(conn.as_raw_fd())?;
        let conn = Arc::new(conn);
        let fd = conn.as_raw_fd();
        lock(&self.st).conn = Some(Carrier::Unix(conn.clone()));
        let me = self.weak();
        engine()?.watch(
            fd,
            Arc::new(move |_| {
                // Holding the Arc keeps the descriptor open (and its number ours) while we run.
                let fd = conn.as_raw_fd();
                let Some(id) = me.upgrade() else { return };
                let mut buf = vec![0u8; std::mem::size_of::<Msg>()];
                loop {
                    match unix::recv(fd, &mut buf) {
                        Ok(Some((n, _))) => {
                            if let Some(m) = proto::decode(&buf[..n]) {
                                id.on_msg(m);
                            }
                        }
                        Err(e) if e == Errno::EAGAIN => return,
                        _ => {
                            if let Ok(e) = engine() {
                                e.unwatch(fd);
                            }
                            id.on_hangup(-libc::ECONNRESET);
                            return;
                        }
                    }
                }
            }),
        )
    }

    /// Takes a MAD association as this id's carrier (it delivers to the id from now on).
    pub(super) fn adopt_assoc(self: &Arc<Self>, a: Arc<Assoc>) {
        a.attach(Arc::downgrade(self));
        lock(&self.st).conn = Some(Carrier::Mad(a));
    }

    /// Sends `m` to the peer over the id's carrier.
    pub(super) fn send(&self, m: &Msg) -> Result<()> {
        let conn = lock(&self.st).conn.clone().ok_or(Errno::ENOTCONN)?;
        match conn {
            Carrier::Unix(fd) => {
                unix::send(fd.as_raw_fd(), m.as_bytes(), &[])?;
                if crate::runtime::pcap::on() {
                    self.capture_unix(m);
                }
                Ok(())
            }
            Carrier::Mad(a) => a.send(m),
        }
    }

    /// Writes `m`, just sent on the unix carrier, to the capture as its CM MAD.
    fn capture_unix(&self, m: &Msg) {
        let c = {
            let st = lock(&self.st);
            let (Some(local), Some(remote)) = (st.local, st.remote) else { return };
            super::net::capture::UnixConn {
                ps: self.ps,
                local,
                remote,
                path_mtu: st.path_mtu,
                peer_qpn: st.peer_qpn,
                passive: st.passive,
            }
        };
        super::net::capture::unix_message(m, &c);
    }

    /// Hears of the id's QP failing on its own (see `on_qp_failed`). The hook runs under the
    /// provider's QP lock: the CM's part runs later, on the progress thread.
    pub(super) fn watch_qp(&self, q: &Qp) {
        let me = self.weak();
        q.on_fatal(Box::new(move || {
            let me = me.clone();
            if let Ok(e) = engine() {
                e.after(
                    Duration::ZERO,
                    Box::new(move || {
                        if let Some(id) = me.upgrade() {
                            id.on_qp_failed();
                        }
                    }),
                );
            }
        }));
    }

    /// The connected QP failed (its requester ran out of retries, or a NAK). Across namespaces
    /// nothing else tells a dead peer (a killed process, a deleted namespace sends no DREQ and
    /// closes no socket), and without this the id would see nothing until the application
    /// disconnects. So the connection ends as a hang-up ends it in one namespace: a DREQ (resent
    /// as usual, for a peer that is alive) and DISCONNECTED now. One namespace keeps the
    /// unix carrier's hang-up as its only sign, as before.
    pub(super) fn on_qp_failed(&self) {
        if self.is_ud() {
            return;
        }
        {
            let mut st = lock(&self.st);
            if !matches!(st.conn, Some(Carrier::Mad(_))) || st.state != State::Connected {
                return;
            }
            st.state = State::Disconnecting;
        }
        let _ = self.send(&Msg::new(proto::DREQ));
        self.report_disconnect();
    }

    /// Drops the id's carrier (SIDR needs none once answered).
    pub(super) fn drop_conn(&self) {
        let conn = lock(&self.st).conn.take();
        if let Some(c) = conn {
            c.close();
        }
    }
}

/// The carrier a request arrived on, handed to the request's new id.
pub enum Incoming {
    Unix(OwnedFd),
    Mad(Arc<Assoc>),
}

impl CmId {
    pub(super) fn adopt_incoming(self: &Arc<Self>, inc: Incoming) -> Result<()> {
        lock(&self.st).passive = true;
        match inc {
            Incoming::Unix(fd) => self.adopt_conn(fd),
            Incoming::Mad(a) => {
                self.adopt_assoc(a);
                Ok(())
            }
        }
    }
}
