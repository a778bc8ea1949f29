//! `rpoll` and `rselect` over rsockets and ordinary descriptors together.
//!
//! An rsocket's readiness comes from its protocol state, so each round first checks every
//! rsocket without blocking (arming its CQ), then sleeps in one `poll(2)` over the ordinary
//! descriptors and the rsockets' completion and CM channels, then checks again.

use super::stream::{Phase, State, Stream};
use super::xfer::{can_send, conn_have_rdata};
use crate::errno::{Errno, Result};
use crate::runtime::lock;
use libc::{pollfd, POLLERR, POLLHUP, POLLIN, POLLOUT};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An rsocket's revents for `events`, after taking what is there (never blocks).
fn revents(s: &Stream, st: &mut State, events: i16, cm_ready: bool) -> i16 {
    match st.phase {
        Phase::Listening => {
            if cm_ready {
                events & POLLIN
            } else {
                0
            }
        }
        Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => {
            let _ = s.cm_events(st);
            match st.phase {
                Phase::Connected => revents(s, st, events, false),
                Phase::ConnectError(_) => (events & (POLLIN | POLLOUT)) | POLLERR,
                _ => 0,
            }
        }
        Phase::Connected | Phase::Disconnected => {
            if cm_ready {
                let _ = s.cm_events(st);
            }
            s.progress(st);
            let mut r = 0;
            if events & POLLIN != 0 && conn_have_rdata(st) {
                r |= POLLIN;
            }
            if events & POLLOUT != 0 && can_send(st) {
                r |= POLLOUT;
            }
            // Hang-up only once the data that came before it is read: as a TCP socket, whose
            // peer's FIN is not a hang-up while bytes wait (librdmacm raises POLLHUP at once,
            // and programs that treat POLLHUP as an error, such as rstream, then fail when the
            // last data and the peer's close arrive together).
            if st.phase == Phase::Disconnected && !super::xfer::have_rdata(st) {
                r |= POLLHUP;
            }
            if st.err.is_some() {
                r |= POLLERR;
            }
            r
        }
        Phase::ConnectError(_) => (events & (POLLIN | POLLOUT)) | POLLERR,
        Phase::Init | Phase::Bound => 0,
    }
}

pub fn rpoll(fds: &mut [pollfd], timeout: i32) -> Result<i32> {
    let socks: Vec<Option<Arc<Stream>>> = fds.iter().map(|p| super::lookup(p.fd)).collect();
    let dgrams: Vec<Option<Arc<super::dgram::Dgram>>> =
        fds.iter().map(|p| super::lookup_dgram(p.fd)).collect();
    if socks.iter().all(Option::is_none) && dgrams.iter().all(Option::is_none) {
        // SAFETY: a valid array of fds.len() pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        return crate::errno::check(r);
    }
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    // Real descriptors: (index into fds, fd, events); rsockets contribute up to two.
    let mut real: Vec<pollfd> = Vec::with_capacity(fds.len() * 2);
    let mut owner: Vec<usize> = Vec::with_capacity(fds.len() * 2);
    loop {
        let mut ready = 0;
        real.clear();
        owner.clear();
        for (i, p) in fds.iter_mut().enumerate() {
            p.revents = 0;
            match &socks[i] {
                Some(s) => {
                    let mut st = lock(&s.st);
                    p.revents = revents(s, &mut st, p.events, false);
                    if let Some(cfd) = s.arm(&mut st) {
                        // Completions that came before the arm.
                        if p.revents == 0 {
                            p.revents = revents(s, &mut st, p.events, false);
                        }
                        real.push(pollfd { fd: cfd, events: POLLIN, revents: 0 });
                        owner.push(i);
                    }
                    real.push(pollfd { fd: s.fd, events: POLLIN, revents: 0 });
                    owner.push(i);
                }
                None => match &dgrams[i] {
                    Some(d) => {
                        let (rv, wait_fds) = d.poll_state(p.events);
                        p.revents = rv;
                        for fd in wait_fds {
                            real.push(pollfd { fd, events: POLLIN, revents: 0 });
                            owner.push(i);
                        }
                    }
                    None => {
                        real.push(pollfd { fd: p.fd, events: p.events, revents: 0 });
                        owner.push(i);
                    }
                },
            }
            if p.revents != 0 {
                ready += 1;
            }
        }
        let wait = if ready > 0 {
            0
        } else {
            match deadline {
                None => -1,
                // Rounded up: a wait shorter than a millisecond still sleeps (poll's unit).
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now()).as_micros();
                    left.div_ceil(1000).min(i32::MAX as u128) as i32
                }
            }
        };
        // SAFETY: a valid array of real.len() pollfds.
        let r = unsafe { libc::poll(real.as_mut_ptr(), real.len() as libc::nfds_t, wait) };
        if r < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR && ready == 0 {
                return Err(e);
            }
        }
        let mut fired = vec![false; fds.len()];
        let mut cm_fired = vec![false; fds.len()];
        for (k, q) in real.iter().enumerate() {
            let i = owner[k];
            if q.revents == 0 {
                continue;
            }
            match &socks[i] {
                None if dgrams[i].is_some() => fired[i] = true,
                None => fds[i].revents = q.revents,
                Some(s) => {
                    fired[i] = true;
                    if q.fd == s.fd {
                        cm_fired[i] = true;
                    }
                }
            }
        }
        for i in 0..fds.len() {
            if let (true, Some(d)) = (fired[i], &dgrams[i]) {
                fds[i].revents |= d.poll_state(fds[i].events).0;
            }
            if let Some(s) = &socks[i] {
                if fired[i] {
                    let mut st = lock(&s.st);
                    let cm = cm_fired[i] && st.phase != Phase::Listening;
                    s.after_poll(&mut st, cm);
                    let rv = revents(s, &mut st, fds[i].events, cm_fired[i]);
                    fds[i].revents |= rv;
                    drop(st);
                    s.cv.notify_all();
                }
            }
        }
        let n = fds.iter().filter(|p| p.revents != 0).count() as i32;
        if n > 0 || wait == 0 && (ready > 0 || timeout == 0) {
            return Ok(n);
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                return Ok(0);
            }
        }
    }
}

pub fn rselect(
    nfds: i32,
    readfds: Option<&mut libc::fd_set>,
    writefds: Option<&mut libc::fd_set>,
    exceptfds: Option<&mut libc::fd_set>,
    timeout: Option<&libc::timeval>,
) -> Result<i32> {
    if !(0..=libc::FD_SETSIZE as i32).contains(&nfds) {
        return Err(Errno::EINVAL);
    }
    let ms = match timeout {
        None => -1,
        Some(t) => {
            if t.tv_sec < 0 || t.tv_usec < 0 {
                return Err(Errno::EINVAL);
            }
            (t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000).min(i32::MAX as i64) as i32
        }
    };
    let isset = |s: &Option<&mut libc::fd_set>, fd: i32| {
        // SAFETY: fd < FD_SETSIZE; the set is valid.
        s.as_ref().is_some_and(|s| unsafe { libc::FD_ISSET(fd, *s) })
    };
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(&readfds, fd) {
            ev |= POLLIN;
        }
        if isset(&writefds, fd) {
            ev |= POLLOUT;
        }
        if ev != 0 || isset(&exceptfds, fd) {
            fds.push(pollfd { fd, events: ev, revents: 0 });
        }
    }
    let r = rpoll(&mut fds, ms)?;
    // select(2) fails on a descriptor that is not open, where poll(2) reports POLLNVAL.
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        return Err(Errno::EBADF);
    }
    let mut sets = [readfds, writefds, exceptfds];
    for s in sets.iter_mut().flatten() {
        // SAFETY: a valid set.
        unsafe { libc::FD_ZERO(*s) };
    }
    if r <= 0 {
        return Ok(0);
    }
    let [mut readfds, mut writefds, mut exceptfds] = sets;
    let mut cnt = 0;
    for p in &fds {
        let want = |e: i16| p.events & e != 0;
        if let Some(s) = readfds.as_deref_mut() {
            if want(POLLIN) && p.revents & (POLLIN | POLLHUP | POLLERR) != 0 {
                // SAFETY: fd < nfds ≤ FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, s) };
                cnt += 1;
            }
        }
        if let Some(s) = writefds.as_deref_mut() {
            if want(POLLOUT) && p.revents & (POLLOUT | POLLERR) != 0 {
                // SAFETY: fd < nfds ≤ FD_SETSIZE, checked when the set was read.
                unsafe { libc::FD_SET(p.fd, s) };
                cnt += 1;
            }
        }
        if let Some(s) = exceptfds.as_deref_mut() {
            if p.revents & libc::POLLPRI != 0 {
                // SAFETY: fd < nfds ≤ FD_SETSIZE, checked when the set was read.
                unsafe { libc::FD_SET(p.fd, s) };
                cnt += 1;
            }
        }
    }
    Ok(cnt)
}
