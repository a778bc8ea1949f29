//! Sending, receiving and readiness of datagram rsockets.

use super::*;

impl Dgram {
    /// `rsendto` / `rsend`: one datagram to `to` (or the connected address).
    pub fn sendto(
        &self,
        data: &[u8],
        to: Option<libc::sockaddr_storage>,
        flags: i32,
    ) -> Result<usize> {
        let mut st = lock(&self.st);
        let to = to.or(st.conn).ok_or(Errno(libc::EDESTADDRREQ))?;
        self.ensure_qp(&mut st, &to)?;
        let hdr_len = st.qp.as_ref().map_or(0, |q| q.hdr.len());
        if data.len() + hdr_len > SNDLOWAT {
            return Err(Errno(libc::EMSGSIZE));
        }
        self.service_udp(&mut st);
        let dest = st.dests.get(&key_of(&to)).map(|d| (d.qpn, d.ah));
        let Some((qpn, ah)) = dest else {
            // The peer's QP is not known yet: over UDP, which teaches it ours.
            return self.send_udp(&st, &to, OP_DATA, data);
        };
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        loop {
            Self::poll_cq(&mut st);
            if st.qp.as_ref().is_some_and(|q| !q.free.is_empty()) {
                break;
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            st = self.sleep(st);
        }
        let q = st.qp.as_mut().expect("made above");
        let slot = q.free.pop().expect("checked");
        // SAFETY: the slot is free (its send completed) and inside sbuf.
        unsafe {
            let p = q.sbuf.ptr.add(slot * SNDLOWAT);
            ptr::copy_nonoverlapping(q.hdr.as_ptr(), p, hdr_len);
            ptr::copy_nonoverlapping(data.as_ptr(), p.add(hdr_len), data.len());
        }
        // SAFETY: reading our MR's lkey.
        let lkey = unsafe { (*q.smr).lkey };
        let mut sge = ibv_sge {
            addr: q.sbuf.ptr as u64 + (slot * SNDLOWAT) as u64,
            length: (hdr_len + data.len()) as u32,
            lkey,
        };
        // SAFETY: all-zero is a valid send request; the UD fields are set below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.wr.ud = ud_t { ah, remote_qpn: qpn, remote_qkey: QKEY };
        let mut bad = ptr::null_mut();
        // SAFETY: our QP; the request, its SGE and the registered slot are live.
        match unsafe { capi::ibv_post_send(q.qp, &mut wr, &mut bad) } {
            0 => Ok(data.len()),
            e => {
                q.free.push(slot);
                Err(Errno(e))
            }
        }
    }

    /// `rrecvfrom`: one datagram (truncated to `buf`), and its source.
    pub fn recvfrom(&self, buf: &mut [u8], flags: i32) -> Result<(usize, libc::sockaddr_storage)> {
        let mut st = lock(&self.st);
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        loop {
            self.service_udp(&mut st);
            Self::poll_cq(&mut st);
            if !st.rq.is_empty() {
                break;
            }
            if nonblock {
                // Datagrams reach our receive queue through this process's progress thread;
                // a program that spins on EAGAIN (udpong's server) would keep it off the CPU
                // on a busy host. Let it run.
                drop(st);
                std::thread::yield_now();
                return Err(Errno::EAGAIN);
            }
            st = self.sleep(st);
        }
        let peek = flags & libc::MSG_PEEK != 0;
        let taken = if peek { None } else { st.rq.pop_front() };
        let m = match &taken {
            Some(m) => m,
            None => st.rq.front().expect("queue not empty"),
        };
        let (n, from) = match m {
            Msg::Udp { data, from } => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                (n, *from)
            }
            Msg::Slot { off, len, from, .. } => {
                let q = st.qp.as_ref().expect("a slot message has a QP");
                let n = (*len).min(buf.len());
                // SAFETY: off+len lies inside the slot (checked when it was queued).
                unsafe { ptr::copy_nonoverlapping(q.rbuf.ptr.add(*off), buf.as_mut_ptr(), n) };
                (n, *from)
            }
        };
        if let Some(Msg::Slot { slot, .. }) = taken {
            if let Some(q) = st.qp.as_ref() {
                let _ = q.post_recv(slot);
            }
        }
        Ok((n, from))
    }

    /// Sleeps until the UDP socket or the completion channel has something.
    fn sleep<'a>(
        &'a self,
        mut st: std::sync::MutexGuard<'a, DState>,
    ) -> std::sync::MutexGuard<'a, DState> {
        let cfd = st.qp.as_mut().map(|q| {
            if !q.armed {
                // SAFETY: our CQ.
                unsafe { capi::ibv_req_notify_cq(q.cq, 0) };
                q.armed = true;
            }
            // SAFETY: our completion channel.
            unsafe { (*q.comp).fd }
        });
        Self::poll_cq(&mut st);
        if !st.rq.is_empty()
            || st.qp.as_ref().is_some_and(|q| !q.free.is_empty() && q.free.len() < QUEUE)
        {
            return st;
        }
        drop(st);
        let mut fds = [
            libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: cfd.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds on the stack.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        let mut st = lock(&self.st);
        self.drain_events(&mut st);
        st
    }

    fn drain_events(&self, st: &mut DState) {
        if let Some(q) = st.qp.as_mut() {
            let (mut cq, mut ctx) = (ptr::null_mut(), ptr::null_mut());
            // SAFETY: our non-blocking channel; each event is acknowledged at once.
            while unsafe { capi::ibv_get_cq_event(q.comp, &mut cq, &mut ctx) } == 0 {
                // SAFETY: q.cq is our live CQ, of the event just taken.
                unsafe { capi::ibv_ack_cq_events(q.cq, 1) };
                q.armed = false;
            }
        }
    }

    /// rpoll: revents now, and the descriptors to sleep on.
    pub fn poll_state(&self, events: i16) -> (i16, Vec<i32>) {
        let mut st = lock(&self.st);
        self.drain_events(&mut st);
        // Armed before the CQ is polled: a completion that came between the poll and a later
        // arming would raise no event, and rpoll would sleep past the datagram.
        if let Some(q) = st.qp.as_mut() {
            if !q.armed {
                // SAFETY: our CQ.
                unsafe { capi::ibv_req_notify_cq(q.cq, 0) };
                q.armed = true;
            }
        }
        self.service_udp(&mut st);
        Self::poll_cq(&mut st);
        let mut r = 0;
        if events & libc::POLLIN != 0 && !st.rq.is_empty() {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && st.qp.as_ref().is_none_or(|q| !q.free.is_empty()) {
            r |= libc::POLLOUT;
        }
        let mut fds = vec![self.fd];
        if let Some(q) = st.qp.as_ref() {
            // SAFETY: our completion channel.
            fds.push(unsafe { (*q.comp).fd });
        }
        (r, fds)
    }
}

impl Drop for Dgram {
    fn drop(&mut self) {
        let mut st = lock(&self.st);
        for (_, d) in st.dests.drain() {
            if !d.ah.is_null() {
                // SAFETY: our AH, destroyed once.
                unsafe { capi::ibv_destroy_ah(d.ah) };
            }
        }
        st.qp = None;
        // SAFETY: our socket, closed once.
        unsafe { libc::close(self.fd) };
    }
}
