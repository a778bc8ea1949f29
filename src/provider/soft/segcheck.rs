//! Validation of the ring segments a peer writes: a pure function of the receiver's local state
//! and one header, with no I/O and no side effects (a fuzzer calls it as it is).
//!
//! Every header field is the peer's to choose. The receiver keeps the state of the message in
//! progress itself (opened at its first segment), and every later segment's offset and length
//! are derived from that state; the header only has to agree with it. Responses and NAKs must
//! name one of the receiver's own outstanding requests, and their lengths come from that
//! request. Anything else is a protocol violation: the caller breaks the link.

use super::ring::{
    SegHdr, OP_ATOMIC_RESP, OP_CMP_SWAP, OP_FETCH_ADD, OP_NAK, OP_READ_REQ, OP_READ_RESP, OP_SEND,
    OP_WRITE, SEG_DATA, SEG_FIRST, SEG_IMM, SEG_INV, SEG_LAST, SEG_SOLICITED,
};
use crate::sys::ibv_wc_status::{IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR};

const KNOWN_FLAGS: u32 = SEG_FIRST | SEG_LAST | SEG_IMM | SEG_INV | SEG_SOLICITED;
const WHOLE: u32 = SEG_FIRST | SEG_LAST;
/// Payload of an atomic response: the original value.
const ATOMIC_LEN: u32 = 8;

/// The incoming request message in progress (SEND or WRITE), as recorded at its first segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    pub opcode: u32,
    /// Total length, from the first segment (already checked against the MR or receive).
    pub len: u32,
    /// Bytes received so far.
    pub got: u32,
    pub imm: bool,
}

/// What a local request expects back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaits {
    /// Only the acknowledgement (SEND, WRITE): a NAK may answer it, no response.
    Ack,
    Read,
    Atomic,
}

/// The receiver's own record of the request a response or NAK names (`req_seq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outstanding {
    pub awaits: Awaits,
    /// Length of the local request (READ: bytes to receive).
    pub len: u32,
    /// Response bytes received so far.
    pub got: u32,
    /// Already answered in full or failed: nothing more may arrive for it.
    pub settled: bool,
}

/// A valid segment and what it asks of the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// SEND or WRITE payload: `n` bytes at offset `off` of the message; `first` opens it (the
    /// caller checks `len` against its receive or MR), `last` closes it.
    Data { opcode: u32, len: u32, off: u32, n: u32, first: bool, last: bool, imm: bool },
    /// A READ request or an atomic: one segment, no payload. The caller checks rkey, address
    /// and length against its MRs.
    Single { opcode: u32 },
    /// Response payload for the outstanding request: `n` bytes at offset `off` of its local
    /// buffers; `last` completes it.
    Response { off: u32, n: u32, last: bool },
    /// The outstanding request failed at the responder with `status` (one of the remote error
    /// statuses, never another value).
    Nak { status: u32 },
}

impl Step {
    /// The message in progress after this step, given the one before it.
    pub fn next_open(&self, before: Option<Open>) -> Option<Open> {
        match *self {
            Step::Data { last: true, .. } => None,
            Step::Data { opcode, len, off, n, imm, .. } => {
                Some(Open { opcode, len, got: off + n, imm })
            }
            _ => before,
        }
    }
}

/// Why a segment was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Not one of the ring opcodes.
    Opcode,
    /// Unknown flag bits, or FIRST/LAST/IMM that do not fit the message.
    Flags,
    /// A segment length beyond the slot or what remains of the message, or a short middle
    /// segment.
    Length,
    /// A continuation with no message open, or a new request while one is open, or one of
    /// another kind.
    Sequence,
    /// `msg_len` differs from the length recorded at the first segment (or the local request).
    MsgLen,
    /// A response or NAK that names no outstanding local request (or one already settled).
    Unmatched,
    /// A NAK status that is not a remote error status.
    Status,
}

/// Checks one segment against the local state: `open` is the request message in progress,
/// `find(req_seq)` looks up the local request a response or NAK names.
pub fn check(
    open: Option<Open>,
    h: &SegHdr,
    find: impl FnOnce(u64) -> Option<Outstanding>,
) -> Result<Step, Violation> {
    if h.flags & !KNOWN_FLAGS != 0 {
        return Err(Violation::Flags);
    }
    if h.seg_len as usize > SEG_DATA {
        return Err(Violation::Length);
    }
    match h.opcode {
        OP_SEND | OP_WRITE => data(open, h),
        OP_READ_REQ | OP_CMP_SWAP | OP_FETCH_ADD => {
            if open.is_some() {
                return Err(Violation::Sequence);
            }
            if h.flags != WHOLE {
                return Err(Violation::Flags);
            }
            if h.seg_len != 0 {
                return Err(Violation::Length);
            }
            Ok(Step::Single { opcode: h.opcode })
        }
        OP_READ_RESP | OP_ATOMIC_RESP | OP_NAK => response(h, find),
        _ => Err(Violation::Opcode),
    }
}

/// The offset, length and last-ness of a segment of a `len`-byte message of which `got` bytes
/// arrived: every segment but the last is full, and none goes past the end.
fn span(h: &SegHdr, len: u32, got: u32) -> Result<(u32, bool), Violation> {
    let remaining = len.checked_sub(got).ok_or(Violation::Length)?;
    let n = h.seg_len;
    if n > remaining {
        return Err(Violation::Length);
    }
    let last = n == remaining;
    if last != (h.flags & SEG_LAST != 0) {
        return Err(Violation::Flags);
    }
    if !last && n as usize != SEG_DATA {
        return Err(Violation::Length);
    }
    Ok((n, last))
}

fn data(open: Option<Open>, h: &SegHdr) -> Result<Step, Violation> {
    let first = h.flags & SEG_FIRST != 0;
    let imm = h.flags & SEG_IMM != 0;
    // Invalidate rides on a SEND only, never with immediate data.
    if h.flags & SEG_INV != 0 && (h.opcode != OP_SEND || imm) {
        return Err(Violation::Flags);
    }
    // The solicited event rides on requests that consume a receive only.
    if h.flags & SEG_SOLICITED != 0 && h.opcode == OP_WRITE && !imm {
        return Err(Violation::Flags);
    }
    let (len, got) = match open {
        None if first => (h.msg_len, 0),
        None => return Err(Violation::Sequence),
        Some(_) if first => return Err(Violation::Sequence),
        Some(o) if o.opcode != h.opcode => return Err(Violation::Sequence),
        Some(o) if o.imm != imm => return Err(Violation::Flags),
        Some(o) if o.len != h.msg_len => return Err(Violation::MsgLen),
        Some(o) => (o.len, o.got),
    };
    let (n, last) = span(h, len, got)?;
    Ok(Step::Data { opcode: h.opcode, len, off: got, n, first, last, imm })
}

fn response(h: &SegHdr, find: impl FnOnce(u64) -> Option<Outstanding>) -> Result<Step, Violation> {
    let o = find(h.req_seq).ok_or(Violation::Unmatched)?;
    if o.settled {
        return Err(Violation::Unmatched);
    }
    match h.opcode {
        OP_NAK => {
            if h.flags != WHOLE {
                return Err(Violation::Flags);
            }
            if h.seg_len != 0 {
                return Err(Violation::Length);
            }
            match h.imm {
                IBV_WC_REM_ACCESS_ERR | IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_OP_ERR => {
                    Ok(Step::Nak { status: h.imm })
                }
                _ => Err(Violation::Status),
            }
        }
        OP_ATOMIC_RESP => {
            if o.awaits != Awaits::Atomic {
                return Err(Violation::Unmatched);
            }
            if h.flags != WHOLE {
                return Err(Violation::Flags);
            }
            if h.seg_len != ATOMIC_LEN {
                return Err(Violation::Length);
            }
            Ok(Step::Response { off: 0, n: ATOMIC_LEN.min(o.len), last: true })
        }
        _ => {
            if o.awaits != Awaits::Read {
                return Err(Violation::Unmatched);
            }
            if h.flags & (SEG_IMM | SEG_SOLICITED) != 0
                || (h.flags & SEG_FIRST != 0) != (o.got == 0)
            {
                return Err(Violation::Flags);
            }
            if h.msg_len != o.len {
                return Err(Violation::MsgLen);
            }
            let (n, last) = span(h, o.len, o.got)?;
            Ok(Step::Response { off: o.got, n, last })
        }
    }
}

#[cfg(test)]
#[path = "segcheck_tests.rs"]
mod tests;
