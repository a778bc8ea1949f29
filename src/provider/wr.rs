//! The vocabulary of the seam: work requests as the provider executes them, their
//! scatter/gather lists and inline data, and the completions it produces.

/// The largest message (`ibv_port_attr.max_msg_sz`).
pub const MAX_MSG: u32 = 1 << 31;

/// The destination QPN of a multicast send (IBA: the multicast QP, 0xFFFFFF).
pub const MCAST_QPN: u32 = 0x00ff_ffff;

/// The size of the Global Routing Header at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// One scatter/gather entry (the layout of `ibv_sge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// A scatter/gather list; one entry (the common case) needs no allocation.
#[derive(Clone)]
pub enum Sgl {
    One(Sge),
    Many(Vec<Sge>),
}

impl Sgl {
    pub fn empty() -> Sgl {
        Sgl::Many(Vec::new())
    }

    pub fn as_slice(&self) -> &[Sge] {
        match self {
            Sgl::One(s) => std::slice::from_ref(s),
            Sgl::Many(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    pub fn total(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }
}

/// A posted receive.
#[derive(Clone)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Sgl,
}

/// What a send carries.
// The inline variant is large on purpose: small inline sends are posted without allocating.
#[allow(clippy::large_enum_variant)]
pub enum Payload {
    /// Registered memory, read when the request executes (or, for READ and atomics, written).
    Sges(Sgl),
    /// Copied at post time (`IBV_SEND_INLINE`).
    Inline(InlineData),
}

/// Inline data up to this size stays inside the request: posting it allocates nothing.
pub const INLINE_SMALL: usize = 256;

/// The bytes of an inline send.
#[allow(clippy::large_enum_variant)] // see `Payload`
pub enum InlineData {
    Small(usize, [u8; INLINE_SMALL]),
    Large(Vec<u8>),
}

impl InlineData {
    /// Concatenates caller buffers (`EINVAL` for a NULL buffer of non-zero length or a total
    /// beyond the largest message).
    ///
    /// # Safety
    /// Every buffer is readable for its length.
    pub unsafe fn gather(
        bufs: impl Iterator<Item = (*const u8, usize)> + Clone,
    ) -> crate::Result<InlineData> {
        let total: usize = bufs.clone().map(|b| b.1).sum();
        if total > MAX_MSG as usize {
            return Err(crate::Errno::EINVAL);
        }
        let mut d = if total <= INLINE_SMALL {
            InlineData::Small(0, [0; INLINE_SMALL])
        } else {
            InlineData::Large(Vec::with_capacity(total))
        };
        for (p, n) in bufs {
            if n == 0 {
                continue;
            }
            if p.is_null() {
                return Err(crate::Errno::EINVAL);
            }
            // SAFETY: per the function's contract.
            let src = unsafe { std::slice::from_raw_parts(p, n) };
            match &mut d {
                InlineData::Small(len, buf) => {
                    buf[*len..*len + n].copy_from_slice(src);
                    *len += n;
                }
                InlineData::Large(v) => v.extend_from_slice(src),
            }
        }
        Ok(d)
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            InlineData::Small(len, buf) => &buf[..*len],
            InlineData::Large(v) => v,
        }
    }
}

/// Where a UD send goes, resolved from its address handle by the verbs layer.
pub struct UdDest {
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    /// Source and destination GIDs of the address vector.
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

/// A posted send-queue request (opcodes are `ibv_wr_opcode` values).
pub struct SendWqe {
    pub wr_id: u64,
    pub opcode: u32,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: Option<u32>,
    pub payload: Payload,
    pub len: u64,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// UD destination (`wr.ud`).
    pub ud: Option<UdDest>,
    /// XRC_SEND: the SRQ number at the target (`wr.qp_type.xrc.remote_srqn`).
    pub xrc_srqn: u32,
    /// Send queue position, assigned at admission (see `TransportQp::post_send`).
    pub seq: u64,
    /// A local operation (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`), executed by verbs when it was
    /// posted: the status its completion carries once it reaches the front of the send queue.
    /// (`IBV_WR_SEND_WITH_INV` carries the rkey to invalidate in `rkey`.)
    pub local_status: u32,
}

impl SendWqe {
    /// A request with no data and nothing to complete (what [`SendWqe::take`] leaves).
    pub fn empty() -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode: 0,
            signaled: false,
            solicited: false,
            imm: None,
            payload: Payload::Sges(Sgl::empty()),
            len: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            xrc_srqn: 0,
            seq: 0,
            local_status: 0,
        }
    }

    /// Moves the request out, leaving an empty one: a request is built once and taken where
    /// it is queued, not copied on the way (it holds up to `INLINE_SMALL` bytes of inline
    /// data).
    pub fn take(&mut self) -> SendWqe {
        std::mem::replace(self, SendWqe::empty())
    }
}

/// A work completion as the provider produces it (status, opcode and flags are the
/// `ibv_wc_status`, `ibv_wc_opcode` and `ibv_wc_flags` values); verbs turns it into an `ibv_wc`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub solicited: bool,
    /// Send completions: the send queue position of the request (the verbs layer frees the
    /// send queue entries up to it when the completion is polled), 0 else.
    pub sq_seq: u64,
}
