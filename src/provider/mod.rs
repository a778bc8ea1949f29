//! RDMA providers: the fabric under the verbs layer, behind one seam shaped like rdma-core's
//! `verbs_context_ops`.
//!
//! * [`Provider`] creates transport QPs and wakes its progress; [`TransportQp`] is one QP's data
//!   path (state changes, post send/recv, progress, multicast, destroy).
//! * What a provider needs from the layer above is a trait defined here and implemented by
//!   verbs, so no import runs upwards: [`CompletionSink`] (a CQ), [`MemoryKeys`] (the MR key
//!   table of a PD), [`SharedRecvQueue`] (an SRQ) and [`EventSink`] (a QP's async events and the
//!   state changes the provider causes).
//! * The vocabulary ([`wr`]): work requests, scatter/gather lists, inline data, completions.
//!
//! The QP handle holds its `Arc<dyn TransportQp>` and the provider holds its sinks as
//! `Arc<dyn …>`: nothing is looked up per message. Lock order across the seam: docs/DESIGN-NOTES.md.
//!
//! `soft` is the embedded software provider; `native` passes every call through to the system's
//! rdma-core (`RDMASHIM_PROVIDER=native`, or `auto` where hardware is present), see [`native`].

pub mod gate;
pub mod native;
pub mod soft;
pub mod wr;

pub use wr::{
    Completion, InlineData, Payload, RecvWqe, SendWqe, Sge, Sgl, UdDest, GRH_LEN, INLINE_SMALL,
    MCAST_QPN,
};

use crate::errno::Result;
use std::sync::Arc;

/// Access rights (the values of `ibv_access_flags`).
pub const ACCESS_LOCAL_WRITE: u32 = 1;
pub const ACCESS_REMOTE_WRITE: u32 = 2;
pub const ACCESS_REMOTE_READ: u32 = 4;
pub const ACCESS_REMOTE_ATOMIC: u32 = 8;

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// Unknown key, other PD, or outside the region: a protection error.
    Protection,
    /// The region lacks the access right.
    Access,
}

/// A checked region's gate ([`gate::Gate`]): the provider touches the region's memory for a
/// peer only inside it, so deregistration can wait for the access under way and refuse later
/// ones, however long the provider keeps this.
pub type Region = Arc<gate::Gate>;

/// The address space a key is used in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySpace {
    /// An lkey with an SGE's address: this process's addresses (verbs translated the SGEs of a
    /// region registered with another iova when they were posted).
    Local,
    /// An rkey with a peer's address: the region's iova space (`ibv_reg_mr_iova`, ZERO_BASED).
    Remote,
}

/// A checked access: the region's gate (to enter around each copy) and the address in this
/// process of the access's first byte, which is the one to touch.
pub struct Checked {
    pub region: Region,
    pub addr: u64,
}

/// The memory keys of one protection domain (verbs keeps the table).
pub trait MemoryKeys: Send + Sync {
    /// Checks that `[addr, addr+len)` (in `space`) lies in region `key` of this PD with rights
    /// `need`, and translates `addr` to this process's address.
    fn lookup(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
        space: KeySpace,
    ) -> std::result::Result<Checked, AccessError>;

    /// Runs `f` on this process's address of `[addr, addr+len)`, checked as by
    /// [`MemoryKeys::lookup`], while the region cannot be deregistered: once a deregistration
    /// returns, no `f` on its region is under way and none starts. `f` is one bounded copy
    /// (a segment, a packet, a chunk), or nothing (a check that needs only the answer: the
    /// one a request's local entries get before it executes); it must not reach the key
    /// table.
    fn access(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
        space: KeySpace,
        f: &mut dyn FnMut(u64),
    ) -> std::result::Result<(), AccessError> {
        let c = self.lookup(key, addr, len, need, space)?;
        let Some(_inside) = c.region.enter() else { return Err(AccessError::Protection) };
        f(c.addr);
        Ok(())
    }

    /// What the provider made of region `key` of this PD when it was registered (see
    /// [`Provider::share_memory`]), if anything.
    fn shared(&self, key: u32) -> Option<Arc<dyn SharedRegion>> {
        let _ = key;
        None
    }

    /// A SEND with invalidate arrived naming `rkey` (from the peer: untrusted): invalidates it
    /// if it is a window of this PD that may be invalidated so (a bound type 2 window).
    fn invalidate(&self, rkey: u32) -> std::result::Result<(), AccessError> {
        let _ = rkey;
        Err(AccessError::Protection)
    }
}

/// A provider's hold on a registered region that peers may reach without this process's CPU
/// (the soft provider's direct path). Verbs keeps it with the MR and revokes it when the MR is
/// deregistered: once `revoke` returns, no peer can reach the region's memory any more.
pub trait SharedRegion: Send + Sync + std::any::Any {
    fn revoke(&self);
    /// The file the region's pages are on, for another process to map: the descriptor, and
    /// the address range `[base, base + len)` of ours that the file holds from its offset 0.
    fn file(&self) -> (std::os::fd::RawFd, usize, usize);
    /// For the provider to find its own type again.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Where a QP's completions go (a CQ). `push` takes only the CQ's own locks.
pub trait CompletionSink: Send + Sync {
    fn push(&self, c: Completion);
}

/// A shared receive queue the QP takes receives from. Its locks are leaves under the QP's.
pub trait SharedRecvQueue: Send + Sync {
    /// Takes the oldest receive (raising the SRQ limit event if armed and crossed).
    fn pop(&self) -> Option<RecvWqe>;
    fn is_empty(&self) -> bool;
    /// A message waits for a receive (RNR): the next post must wake the provider's progress.
    fn set_starved(&self);
}

/// The receive side of one XRC request: the SRQ the sender named, the CQ its receives complete
/// on, and the memory keys of its PD (an XRC target QP has no PD: a request's remote access is
/// checked against the PD of the SRQ it names).
#[derive(Clone)]
pub struct XrcTarget {
    pub srq: Arc<dyn SharedRecvQueue>,
    pub cq: Arc<dyn CompletionSink>,
    pub keys: Arc<dyn MemoryKeys>,
}

/// An XRC domain's SRQs by number (verbs keeps the table).
pub trait XrcSrqs: Send + Sync {
    /// The SRQ `srqn` (from the peer: untrusted) if it is one of this domain's.
    fn target(&self, srqn: u32) -> Option<XrcTarget>;
}

/// A QP's part in XRC.
#[derive(Clone, Default)]
pub enum Xrc {
    #[default]
    None,
    /// `IBV_QPT_XRC_SEND`: a requester whose requests name the target's SRQ (`SendWqe::xrc_srqn`).
    Send,
    /// `IBV_QPT_XRC_RECV`: a responder that takes each request's receive, CQ and memory keys
    /// from the SRQ the request names, in this domain.
    Recv(Arc<dyn XrcSrqs>),
}

/// QP states (IBA 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

/// The affiliated asynchronous errors a provider reports for a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// The QP moved to ERR because of an error (`IBV_EVENT_QP_FATAL`).
    Fatal,
    /// A responder refused a remote access (`IBV_EVENT_QP_ACCESS_ERR`).
    AccessError,
    /// A responder refused an invalid request (`IBV_EVENT_QP_REQ_ERR`).
    RequestError,
}

/// A QP's owner, told about events. Called with the provider's QP lock held: an implementation
/// takes no lock that is held while calling into the provider.
pub trait EventSink: Send + Sync {
    /// The QP's state changed (through `modify`, or by the provider itself, e.g. to ERR).
    fn state_changed(&self, s: QpState);
    fn qp_event(&self, e: QpEvent);
}

/// The attributes of a QP the transport uses (the verbs layer keeps the full record).
#[derive(Debug, Clone, Copy, Default)]
pub struct QpAttrs {
    pub qkey: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub min_rnr_timer: u8,
    pub rnr_retry: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub max_rd_atomic: u8,
    /// READ/atomic requests the peer may have outstanding at us.
    pub max_dest_rd_atomic: u8,
    /// First PSN of our requests and first PSN we expect from the peer (24 bits).
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// Path MTU in bytes (256..4096; 0 if never set).
    pub path_mtu: u32,
    /// The address vector carries a GRH (RoCE: always for a routed peer).
    pub has_grh: bool,
    /// Our GID (the address vector's sgid_index resolved through the GID table) and the
    /// peer's (the GRH's dgid); all zero without a GRH.
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

/// A modify as the verbs layer decides it: given the current state, the target state and the
/// attributes to apply, or an errno (the transition is invalid).
pub type ModifyFn<'a> = &'a mut dyn FnMut(QpState) -> Result<(QpState, QpAttrs)>;

/// Admission of a send request, decided by the verbs layer from the current state (send-queue
/// accounting): the request's send queue position, or an errno.
pub type AdmitFn<'a> = &'a mut dyn FnMut(QpState) -> Result<u64>;

/// What a transport QP is created with.
pub struct QpInit {
    pub ud: bool,
    /// Unreliable Connected (`IBV_QPT_UC`): connected like RC, without acknowledgements.
    pub uc: bool,
    pub max_recv_wr: u32,
    pub sq_sig_all: bool,
    pub send_cq: Arc<dyn CompletionSink>,
    pub recv_cq: Arc<dyn CompletionSink>,
    pub keys: Arc<dyn MemoryKeys>,
    pub srq: Option<Arc<dyn SharedRecvQueue>>,
    pub events: Arc<dyn EventSink>,
    pub xrc: Xrc,
}

/// One QP's data path.
pub trait TransportQp: Send + Sync {
    fn qpn(&self) -> u32;
    fn state(&self) -> QpState;
    /// Applies a state change under the QP's lock: `decide` gets the current state.
    fn modify(&self, decide: ModifyFn<'_>) -> Result<()>;
    /// Queues (or, in ERR, flushes) a request that `admit` accepts, taking it from `wqe`.
    fn post_send(&self, wqe: &mut SendWqe, admit: AdmitFn<'_>) -> Result<()>;
    fn post_recv(&self, wqe: RecvWqe) -> Result<()>;
    /// One pass of the data path; returns whether anything moved.
    fn progress(&self) -> bool;
    fn attach_mcast(&self, gid: [u8; 16]) -> Result<()>;
    fn detach_mcast(&self, gid: [u8; 16]) -> Result<()>;
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: our own multicast sends are not looped back.
    fn set_block_self_mcast(&self, v: bool);
    /// Releases the QP's transport resources (its QPN, socket, link).
    fn destroy(&self);
}

/// A provider: the device's data-path operations.
pub trait Provider: Send + Sync {
    fn name(&self) -> &'static str;
    fn create_qp(&self, init: QpInit) -> Result<Arc<dyn TransportQp>>;
    /// Makes pending work move soon even if nobody polls (wakes the progress thread).
    fn progress(&self);
    /// Called by `ibv_reg_mr` for a region with remote rights (`access`, the values of
    /// `ibv_access_flags`) that peers address from `iova`: the provider may prepare it for
    /// peers to reach directly (in iova space).
    fn share_memory(
        &self,
        addr: usize,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Option<Arc<dyn SharedRegion>> {
        let _ = (addr, len, iova, access);
        None
    }

    /// Called by `ibv_import_mr` in another process (`verbs/import_remote/`): puts every
    /// page `[addr, addr + len)` touches on a file that process may map, revoked with the MR.
    /// `EOPNOTSUPP` where the memory cannot be moved (not private anonymous memory, or pages
    /// already on another file).
    fn export_memory(&self, addr: usize, len: usize, access: u32) -> Result<Arc<dyn SharedRegion>> {
        let _ = (addr, len, access);
        Err(crate::errno::Errno::EOPNOTSUPP)
    }
}

/// The name of the soft provider's one device.
pub const SOFT_DEVICE_NAME: &str = "soft0";

/// The provider that serves calls in this process: the soft one, unless `RDMASHIM_PROVIDER`
/// (see [`native`]) forwards every call to the native library or selects no provider. (With
/// `both` it serves our own objects beside the native library's.)
pub fn selected() -> Option<&'static dyn Provider> {
    matches!(native::mode(), native::Mode::Soft | native::Mode::Both)
        .then_some(&soft::SOFT as &dyn Provider)
}
