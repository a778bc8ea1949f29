//! `RDMASHIM_FAULTS`: drop, duplicate, reorder and delay a fraction of the RoCEv2 packets this
//! process sends, so the transport's recovery can be tested without netem (e.g.
//! `RDMASHIM_FAULTS=drop=0.05,dup=0.05,reorder=0.05,delay=0.05:2ms`; any subset, each key at
//! most once, fractions in [0, 1], delays in `us`, `ms` or `s`). A bad spec gives one line on
//! stderr and no faults.

use super::endpoint::{self, Sock};
use crate::runtime::engine::engine;
use crate::runtime::fork::PerProcess;
use crate::runtime::lock;
use std::cell::Cell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What to do to the packets sent (fractions of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    pub drop: f64,
    pub dup: f64,
    pub reorder: f64,
    pub delay: f64,
    pub delay_by: Duration,
}

fn fraction(key: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{key}={v}: want a fraction between 0 and 1")),
    }
}

fn duration(v: &str) -> Result<Duration, String> {
    let (num, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = num.parse().map_err(|_| format!("{v}: want a whole number and us, ms or s"))?;
    match unit {
        "us" => Ok(Duration::from_micros(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(format!("{v}: want a whole number and us, ms or s")),
    }
}

/// Parses a spec strictly: every item `key=value`, known keys once each.
pub fn parse(spec: &str) -> Result<Faults, String> {
    let mut f = Faults::default();
    let mut seen: Vec<&str> = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (key, v) = item.split_once('=').ok_or_else(|| format!("{item}: want key=value"))?;
        if seen.contains(&key) {
            return Err(format!("{key} given twice"));
        }
        seen.push(key);
        match key {
            "drop" => f.drop = fraction(key, v)?,
            "dup" => f.dup = fraction(key, v)?,
            "reorder" => f.reorder = fraction(key, v)?,
            "delay" => {
                let (p, d) = v.split_once(':').ok_or_else(|| format!("delay={v}: want P:TIME"))?;
                f.delay = fraction(key, p)?;
                f.delay_by = duration(d)?;
            }
            _ => return Err(format!("{key}: unknown (drop, dup, reorder, delay)")),
        }
    }
    Ok(f)
}

/// The faults of this process (`None`: unset, empty, all zero, or invalid).
pub fn active() -> Option<&'static Faults> {
    static F: OnceLock<Option<Faults>> = OnceLock::new();
    F.get_or_init(|| {
        let v = std::env::var("RDMASHIM_FAULTS").ok()?;
        match parse(&v) {
            Ok(f) if f != Faults::default() => Some(f),
            Ok(_) => None,
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "rdmashim: RDMASHIM_FAULTS={v}: {e}; no faults injected"
                );
                None
            }
        }
    })
    .as_ref()
}

/// A uniform draw in [0, 1) (xorshift64*, seeded per thread).
fn draw() -> f64 {
    thread_local! {
        static S: Cell<u64> = Cell::new({
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            (t ^ ((std::process::id() as u64) << 32)) | 1
        });
    }
    S.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}

struct Held {
    sock: Arc<Sock>,
    buf: Vec<u8>,
    src: IpAddr,
    dst: SocketAddr,
}

impl Held {
    fn send(&self) {
        let _ = endpoint::send_from(self.sock.as_raw_fd(), &self.buf, self.src, self.dst);
    }
}

/// A packet held back to be sent after the next one (reorder).
static HELD: PerProcess<Mutex<Option<Held>>> = PerProcess::new(|| Mutex::new(None));

/// How long a held-back packet waits for a successor before it goes out anyway.
const HOLD_MAX: Duration = Duration::from_millis(1);

/// What becomes of one packet.
enum Fate {
    Go,
    GoTwice,
    /// Sent later (delay, or held back until the next packet: reorder).
    Later,
    Dropped,
}

fn fate_of(f: &Faults, sock: &Arc<Sock>, buf: &[u8], src: IpAddr, dst: SocketAddr) -> Fate {
    let held = || Held { sock: sock.clone(), buf: buf.to_vec(), src, dst };
    if draw() < f.drop {
        return Fate::Dropped;
    }
    if draw() < f.delay {
        if let Ok(e) = engine() {
            let h = held();
            e.after(f.delay_by, Box::new(move || h.send()));
            return Fate::Later;
        }
    }
    if draw() < f.reorder {
        let mut slot = lock(HELD.get());
        if slot.is_none() {
            *slot = Some(held());
            drop(slot);
            if let Ok(e) = engine() {
                e.after(HOLD_MAX, Box::new(release_held));
            }
            return Fate::Later;
        }
    }
    if draw() < f.dup {
        Fate::GoTwice
    } else {
        Fate::Go
    }
}

/// Sends packets to one destination, batched, through the faults if any are set: what
/// survives them still leaves in batches (a packet held back for reordering goes after the
/// next one that leaves).
pub fn send_all(sock: &Arc<Sock>, bufs: &[&[u8]], src: IpAddr, dst: SocketAddr) {
    let Some(f) = active() else {
        endpoint::send_all_from(sock.as_raw_fd(), bufs, src, dst);
        return;
    };
    // Packets that leave now, in order: ours (by index) and released held ones (owned).
    enum Out {
        Ours(usize),
        Released(usize),
    }
    let (mut order, mut released) = (Vec::with_capacity(bufs.len() + 2), Vec::new());
    for (i, b) in bufs.iter().enumerate() {
        match fate_of(f, sock, b, src, dst) {
            Fate::Dropped | Fate::Later => continue,
            Fate::Go => order.push(Out::Ours(i)),
            Fate::GoTwice => order.extend([Out::Ours(i), Out::Ours(i)]),
        }
        if let Some(h) = lock(HELD.get()).take() {
            released.push(h.buf);
            order.push(Out::Released(released.len() - 1));
        }
    }
    let now: Vec<&[u8]> = order
        .iter()
        .map(|o| match *o {
            Out::Ours(i) => bufs[i],
            Out::Released(j) => released[j].as_slice(),
        })
        .collect();
    endpoint::send_all_from(sock.as_raw_fd(), &now, src, dst);
}

/// Sends one packet, through the faults if any are set.
pub fn send(sock: &Arc<Sock>, buf: &[u8], src: IpAddr, dst: SocketAddr) {
    let Some(f) = active() else {
        let _ = endpoint::send_from(sock.as_raw_fd(), buf, src, dst);
        return;
    };
    let times = match fate_of(f, sock, buf, src, dst) {
        Fate::Dropped | Fate::Later => return,
        Fate::Go => 1,
        Fate::GoTwice => 2,
    };
    for _ in 0..times {
        let _ = endpoint::send_from(sock.as_raw_fd(), buf, src, dst);
    }
    release_held();
}

fn release_held() {
    let h = lock(HELD.get()).take();
    if let Some(h) = h {
        h.send();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_spec_parses() {
        let f = parse("drop=0.05,dup=0.1,reorder=0,delay=0.05:2ms").unwrap();
        assert_eq!(f.drop, 0.05);
        assert_eq!(f.dup, 0.1);
        assert_eq!(f.reorder, 0.0);
        assert_eq!(f.delay, 0.05);
        assert_eq!(f.delay_by, Duration::from_millis(2));
        assert_eq!(parse("delay=1:250us").unwrap().delay_by, Duration::from_micros(250));
        assert_eq!(parse("").unwrap(), Faults::default());
        assert_eq!(parse("drop=1").unwrap().drop, 1.0);
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in [
            "drop",
            "drop=",
            "drop=1.5",
            "drop=-0.1",
            "drop=x",
            "drop=0.1,drop=0.2",
            "loss=0.1",
            "delay=0.1",
            "delay=0.1:2",
            "delay=0.1:2h",
            "delay=0.1:ms",
            "dup=NaN",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn draws_are_fractions() {
        for _ in 0..1000 {
            let d = draw();
            assert!((0.0..1.0).contains(&d));
        }
    }
}
