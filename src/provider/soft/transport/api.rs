//! What the engine needs from the layer above (memory, receive queue, output) and the types it
//! exchanges with it: work requests, completions, async events, QP configuration.

pub use super::super::roce::opcode::Transport;
use super::super::roce::Packet;

/// Bytes of the GRH a UD receive reserves at the start of its buffer.
pub const GRH_LEN: u32 = 40;

/// A local scatter/gather list, named by the layer above (it resolved and checked the SGEs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sgl(pub u64);

/// Remote access rights a request needs on an rkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    RemoteRead,
    RemoteWrite,
    RemoteAtomic,
}

/// An atomic operation on 8 aligned bytes of remote memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    CmpSwap { compare: u64, swap: u64 },
    FetchAdd { add: u64 },
}

/// Why the memory layer refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// Unknown key, out of bounds, missing rights, or misaligned atomic.
    Access,
}

/// Memory, owned by the layer above. Every remote access is checked there against the region
/// the rkey names (bounds and rights); the engine never computes a pointer.
pub trait Memory {
    /// Copies bytes `[off, off + dst.len())` of local list `sgl` into `dst`.
    fn read_local(&mut self, sgl: Sgl, off: u64, dst: &mut [u8]) -> Result<(), MemError>;
    /// Copies `src` into local list `sgl` at offset `off`.
    fn write_local(&mut self, sgl: Sgl, off: u64, src: &[u8]) -> Result<(), MemError>;
    /// Whether `[va, va + len)` lies in the region of `rkey` and the region grants `access`.
    fn check_remote(
        &mut self,
        rkey: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemError>;
    /// Reads remote-readable memory at `va` (checked again).
    fn read_remote(&mut self, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), MemError>;
    /// Writes remote-writable memory at `va` (checked again).
    fn write_remote(&mut self, rkey: u32, va: u64, src: &[u8]) -> Result<(), MemError>;
    /// Executes `op` on the 8 bytes at `va` (aligned, atomic rights); returns the original value.
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// Invalidates `rkey` (SEND with invalidate).
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError>;
}

/// A posted receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recv {
    pub wr_id: u64,
    pub sgl: Sgl,
    /// Total bytes of the list.
    pub len: u32,
}

/// The receive queue (the QP's own or an SRQ).
pub trait RecvQueue {
    /// The oldest posted receive, removed from the queue; `None` means RNR.
    fn pop(&mut self) -> Option<Recv>;
}

/// Completion status (mapped to `ibv_wc_status` by the verbs layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    LocLenErr,
    LocProtErr,
    WrFlushErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
}

/// Completion opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CmpSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: Status,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    pub imm: Option<u32>,
    /// The rkey a SEND with invalidate invalidated.
    pub invalidated: Option<u32>,
    /// Source QP (UD receives).
    pub src_qp: u32,
    pub solicited: bool,
    /// A UD receive: the first [`GRH_LEN`] bytes of the buffer are the caller's to fill.
    pub grh: bool,
    /// Receive completion (receive queue) or send completion (send queue).
    pub is_recv: bool,
}

impl Completion {
    pub(crate) fn send(wr_id: u64, status: Status, opcode: WcOpcode, byte_len: u32) -> Self {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm: None,
            invalidated: None,
            src_qp: 0,
            solicited: false,
            grh: false,
            is_recv: false,
        }
    }
    pub(crate) fn recv(wr_id: u64, status: Status, opcode: WcOpcode, byte_len: u32) -> Self {
        Completion { is_recv: true, ..Completion::send(wr_id, status, opcode, byte_len) }
    }
}

/// Affiliated asynchronous events the engine raises (the QP has gone to the error state).
/// The verbs layer maps them as main's same-host responder does: `QpAccessErr` →
/// `IBV_EVENT_QP_ACCESS_ERR`, `QpReqErr` → `IBV_EVENT_QP_REQ_ERR`, `QpFatal` → `IBV_EVENT_QP_FATAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    QpAccessErr,
    QpReqErr,
    QpFatal,
}

/// Where the engine's output goes.
pub trait Sink {
    /// A packet to encode (`roce::encode`) and send; its payload borrows engine scratch.
    fn packet(&mut self, pkt: &Packet<'_>);
    fn completion(&mut self, c: Completion);
    fn event(&mut self, e: QpEvent);
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    Send,
    SendImm(u32),
    /// SEND with invalidate of the given rkey.
    SendInv(u32),
    Write,
    WriteImm(u32),
    Read,
    CmpSwap {
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        add: u64,
    },
}

impl WrOp {
    /// Operations the responder answers with data (READ and atomics: bounded by max_rd_atomic).
    pub fn is_rd_atomic(self) -> bool {
        matches!(self, WrOp::Read | WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. })
    }
    pub fn is_atomic(self) -> bool {
        matches!(self, WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. })
    }
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOp::Send | WrOp::SendImm(_) | WrOp::SendInv(_) => WcOpcode::Send,
            WrOp::Write | WrOp::WriteImm(_) => WcOpcode::RdmaWrite,
            WrOp::Read => WcOpcode::RdmaRead,
            WrOp::CmpSwap { .. } => WcOpcode::CmpSwap,
            WrOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A send work request as the provider sees it (the verbs layer maps `ibv_send_wr` to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: WrOp,
    /// Local data: the source of SEND/WRITE, the destination of READ (and of the 8 bytes an
    /// atomic returns).
    pub sgl: Sgl,
    /// Bytes (8 for atomics).
    pub len: u32,
    pub remote_va: u64,
    pub rkey: u32,
    pub signaled: bool,
    pub solicited: bool,
    /// XRC: the SRQ at the target the request is for (its XRCETH); 0 elsewhere.
    pub xrc_srqn: u32,
}

/// Why a post was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The send queue is full.
    QueueFull,
    /// A length the operation cannot have (atomic not 8 bytes, UD beyond the MTU).
    Invalid,
}

/// The attributes of a connected QP the engine uses (from `ibv_modify_qp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcConfig {
    /// `Rc`; `Uc`: the same segmentation and placement with UC opcodes, no ACKs, no
    /// retransmission, no READ or atomics; a request completes once its last packet is out, and
    /// the responder drops a message it cannot take whole (no NAK, no QP error); `Xrc`: RC with
    /// XRC opcodes, each request carrying its `SendWr::xrc_srqn` (the layer above picks the
    /// target SRQ's receive queue, memory keys and CQ for each request it hands in).
    pub transport: Transport,
    pub qpn: u32,
    pub dest_qpn: u32,
    /// First PSN of our requests (`sq_psn`).
    pub sq_psn: u32,
    /// First PSN we expect from the peer (`rq_psn`).
    pub rq_psn: u32,
    /// Path MTU in bytes (256..4096).
    pub mtu: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = no timeout.
    pub timeout: u8,
    /// Retransmissions after a timeout before `RetryExcErr` (0..=7).
    pub retry_cnt: u8,
    /// Resends after RNR NAKs before `RnrRetryExcErr`; 7 = forever.
    pub rnr_retry: u8,
    /// Encoded RNR timer this responder sends in its RNR NAKs.
    pub min_rnr_timer: u8,
    /// READ/atomic requests outstanding at once (ours).
    pub max_rd_atomic: u8,
    /// READ/atomic results the responder remembers for duplicates (theirs to us).
    pub max_dest_rd_atomic: u8,
    /// Send queue depth (work requests).
    pub sq_depth: u32,
    /// Unacknowledged packets in flight at most.
    pub window: u32,
    /// The responder ACKs at least every this many packets (and whenever AckReq is set).
    pub ack_every: u32,
}

impl RcConfig {
    /// Defaults for tests and callers that only know the QPNs and PSNs.
    pub fn new(qpn: u32, dest_qpn: u32, sq_psn: u32, rq_psn: u32) -> Self {
        RcConfig {
            transport: Transport::Rc,
            qpn,
            dest_qpn,
            sq_psn,
            rq_psn,
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            sq_depth: 256,
            window: 128,
            ack_every: 16,
        }
    }
    /// The path MTU, clamped to what IB allows.
    pub fn mtu(&self) -> u32 {
        self.mtu.clamp(256, 4096)
    }
}

/// Nanoseconds of the local ACK timeout `t` (4.096 µs × 2^t); `None` for 0 (infinite).
pub fn ack_timeout_ns(t: u8) -> Option<u64> {
    (t != 0).then(|| 4096u64 << t.min(31))
}

/// Nanoseconds an encoded RNR timer stands for (IBA table 45).
pub fn rnr_delay_ns(timer: u8) -> u64 {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    u64::from(US[usize::from(timer & 31)]) * 1000
}
