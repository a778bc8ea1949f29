//! `RDMASHIM_NET_DEBUG=<file>`: each RC QP on the network path keeps its last packets in and
//! out and appends them, with its engine's state and counters, to the file when the engine
//! fails, an IB timeout fires, the QP is flushed or destroyed, or its responder keeps dropping
//! packets ahead of a gap. Off (nothing recorded) unless the variable is set; for diagnosing
//! a transport stall.

use crate::provider::soft::roce::Packet;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::io::Write;

/// Packets remembered per QP.
const KEEP: usize = 64;

pub struct Trace {
    path: std::ffi::OsString,
    lines: VecDeque<String>,
}

impl Trace {
    /// A trace if `RDMASHIM_NET_DEBUG` names a file.
    pub fn from_env() -> Option<Trace> {
        let path = std::env::var_os("RDMASHIM_NET_DEBUG")?;
        Some(Trace { path, lines: VecDeque::with_capacity(KEEP) })
    }

    /// Remembers one packet (`dir`: "in" or "out").
    pub fn note(&mut self, dir: &str, p: &Packet<'_>) {
        if self.lines.len() >= KEEP {
            self.lines.pop_front();
        }
        self.lines.push_back(format!(
            "{}us {dir} op={:#04x} psn={} ackreq={} len={} aeth={:?}",
            super::now_ns() / 1000,
            p.bth.opcode(),
            p.bth.psn(),
            p.bth.ack_req(),
            p.payload.len(),
            p.ext.aeth.map(|a| (a.syndrome(), a.msn()))
        ));
    }

    /// Appends `why`, the engine's `state` and the packets remembered to the file.
    pub fn dump(&self, qpn: u32, why: &str, state: &dyn Debug) {
        let mut e = format!(
            "pid {} qpn={qpn:#x} ({why}) at {}us: {state:?} recv-dropped={}\n",
            std::process::id(),
            super::now_ns() / 1000,
            super::recv::DROPPED.load(std::sync::atomic::Ordering::Relaxed)
        );
        for l in &self.lines {
            e.push_str("  ");
            e.push_str(l);
            e.push('\n');
        }
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path);
        if let Ok(mut f) = f {
            let _ = f.write_all(e.as_bytes());
        }
    }
}
