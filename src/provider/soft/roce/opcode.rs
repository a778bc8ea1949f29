//! The opcode table (IBA vol. 1, 9.2.1 table 38, and annex A14 for XRC): for each RC, UC, UD and
//! XRC opcode, which extension headers follow the BTH, in wire order, and whether a payload may
//! follow them. Encoder and decoder both read this one table.

/// An extension header that may follow the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext {
    /// XRC: the target's SRQ number, first after the BTH in every XRC request.
    XrcEth,
    Deth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
}

impl Ext {
    /// Bytes on the wire.
    pub const fn wire_len(self) -> usize {
        match self {
            Ext::XrcEth => 4,
            Ext::Deth => 8,
            Ext::Reth => 16,
            Ext::AtomicEth => 28,
            Ext::Aeth => 4,
            Ext::AtomicAckEth => 8,
            Ext::ImmDt => 4,
            Ext::Ieth => 4,
        }
    }
}

/// Transport service, the opcode's top 3 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
    Ud,
    /// Extended reliable connected (IBA vol. 1, annex A14): RC's operations, each request
    /// naming the target's SRQ in an XRCETH.
    Xrc,
}

impl Transport {
    /// The transport's bits of its opcodes.
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => op::RC,
            Transport::Uc => op::UC,
            Transport::Ud => op::UD,
            Transport::Xrc => op::XRC,
        }
    }
}

/// One row of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct OpInfo {
    pub code: u8,
    pub name: &'static str,
    pub transport: Transport,
    /// Extension headers after the BTH, in wire order.
    pub headers: &'static [Ext],
    /// Whether bytes may follow the headers (before pad and ICRC).
    pub payload: bool,
}

impl OpInfo {
    /// Bytes of extension headers.
    pub fn headers_len(&self) -> usize {
        self.headers.iter().map(|h| h.wire_len()).sum()
    }
    pub fn has(&self, e: Ext) -> bool {
        self.headers.contains(&e)
    }
}

/// The opcodes, by name (transport base + operation).
pub mod op {
    pub const RC: u8 = 0x00;
    pub const UC: u8 = 0x20;
    pub const UD: u8 = 0x60;
    pub const XRC: u8 = 0xa0;
    /// The operation's bits of an opcode (below the transport's three).
    pub const OPERATION: u8 = 0x1f;

    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const ATOMIC_ACK: u8 = 0x12;
    pub const CMP_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
}

use Ext::*;
use Transport::*;

macro_rules! row {
    ($t:expr, $base:expr, $op:expr, $name:expr, [$($h:expr),*], $p:expr) => {
        OpInfo { code: $base | $op, name: $name, transport: $t, headers: &[$($h),*], payload: $p }
    };
}

/// Every opcode this codec speaks. RD and CNP are not here and decode as unsupported.
pub static TABLE: [OpInfo; 60] = [
    row!(Rc, op::RC, op::SEND_FIRST, "RC SEND First", [], true),
    row!(Rc, op::RC, op::SEND_MIDDLE, "RC SEND Middle", [], true),
    row!(Rc, op::RC, op::SEND_LAST, "RC SEND Last", [], true),
    row!(Rc, op::RC, op::SEND_LAST_IMM, "RC SEND Last with Immediate", [ImmDt], true),
    row!(Rc, op::RC, op::SEND_ONLY, "RC SEND Only", [], true),
    row!(Rc, op::RC, op::SEND_ONLY_IMM, "RC SEND Only with Immediate", [ImmDt], true),
    row!(Rc, op::RC, op::WRITE_FIRST, "RC RDMA WRITE First", [Reth], true),
    row!(Rc, op::RC, op::WRITE_MIDDLE, "RC RDMA WRITE Middle", [], true),
    row!(Rc, op::RC, op::WRITE_LAST, "RC RDMA WRITE Last", [], true),
    row!(Rc, op::RC, op::WRITE_LAST_IMM, "RC RDMA WRITE Last with Immediate", [ImmDt], true),
    row!(Rc, op::RC, op::WRITE_ONLY, "RC RDMA WRITE Only", [Reth], true),
    row!(Rc, op::RC, op::WRITE_ONLY_IMM, "RC RDMA WRITE Only with Immediate", [Reth, ImmDt], true),
    row!(Rc, op::RC, op::READ_REQUEST, "RC RDMA READ Request", [Reth], false),
    row!(Rc, op::RC, op::READ_RESPONSE_FIRST, "RC RDMA READ response First", [Aeth], true),
    row!(Rc, op::RC, op::READ_RESPONSE_MIDDLE, "RC RDMA READ response Middle", [], true),
    row!(Rc, op::RC, op::READ_RESPONSE_LAST, "RC RDMA READ response Last", [Aeth], true),
    row!(Rc, op::RC, op::READ_RESPONSE_ONLY, "RC RDMA READ response Only", [Aeth], true),
    row!(Rc, op::RC, op::ACK, "RC Acknowledge", [Aeth], false),
    row!(Rc, op::RC, op::ATOMIC_ACK, "RC ATOMIC Acknowledge", [Aeth, AtomicAckEth], false),
    row!(Rc, op::RC, op::CMP_SWAP, "RC CmpSwap", [AtomicEth], false),
    row!(Rc, op::RC, op::FETCH_ADD, "RC FetchAdd", [AtomicEth], false),
    row!(Rc, op::RC, op::SEND_LAST_INV, "RC SEND Last with Invalidate", [Ieth], true),
    row!(Rc, op::RC, op::SEND_ONLY_INV, "RC SEND Only with Invalidate", [Ieth], true),
    row!(Uc, op::UC, op::SEND_FIRST, "UC SEND First", [], true),
    row!(Uc, op::UC, op::SEND_MIDDLE, "UC SEND Middle", [], true),
    row!(Uc, op::UC, op::SEND_LAST, "UC SEND Last", [], true),
    row!(Uc, op::UC, op::SEND_LAST_IMM, "UC SEND Last with Immediate", [ImmDt], true),
    row!(Uc, op::UC, op::SEND_ONLY, "UC SEND Only", [], true),
    row!(Uc, op::UC, op::SEND_ONLY_IMM, "UC SEND Only with Immediate", [ImmDt], true),
    row!(Uc, op::UC, op::WRITE_FIRST, "UC RDMA WRITE First", [Reth], true),
    row!(Uc, op::UC, op::WRITE_MIDDLE, "UC RDMA WRITE Middle", [], true),
    row!(Uc, op::UC, op::WRITE_LAST, "UC RDMA WRITE Last", [], true),
    row!(Uc, op::UC, op::WRITE_LAST_IMM, "UC RDMA WRITE Last with Immediate", [ImmDt], true),
    row!(Uc, op::UC, op::WRITE_ONLY, "UC RDMA WRITE Only", [Reth], true),
    row!(Uc, op::UC, op::WRITE_ONLY_IMM, "UC RDMA WRITE Only with Immediate", [Reth, ImmDt], true),
    row!(Ud, op::UD, op::SEND_ONLY, "UD SEND Only", [Deth], true),
    row!(Ud, op::UD, op::SEND_ONLY_IMM, "UD SEND Only with Immediate", [Deth, ImmDt], true),
    row!(Xrc, op::XRC, op::SEND_FIRST, "XRC SEND First", [XrcEth], true),
    row!(Xrc, op::XRC, op::SEND_MIDDLE, "XRC SEND Middle", [XrcEth], true),
    row!(Xrc, op::XRC, op::SEND_LAST, "XRC SEND Last", [XrcEth], true),
    row!(Xrc, op::XRC, op::SEND_LAST_IMM, "XRC SEND Last with Immediate", [XrcEth, ImmDt], true),
    row!(Xrc, op::XRC, op::SEND_ONLY, "XRC SEND Only", [XrcEth], true),
    row!(Xrc, op::XRC, op::SEND_ONLY_IMM, "XRC SEND Only with Immediate", [XrcEth, ImmDt], true),
    row!(Xrc, op::XRC, op::WRITE_FIRST, "XRC RDMA WRITE First", [XrcEth, Reth], true),
    row!(Xrc, op::XRC, op::WRITE_MIDDLE, "XRC RDMA WRITE Middle", [XrcEth], true),
    row!(Xrc, op::XRC, op::WRITE_LAST, "XRC RDMA WRITE Last", [XrcEth], true),
    row!(
        Xrc,
        op::XRC,
        op::WRITE_LAST_IMM,
        "XRC RDMA WRITE Last with Immediate",
        [XrcEth, ImmDt],
        true
    ),
    row!(Xrc, op::XRC, op::WRITE_ONLY, "XRC RDMA WRITE Only", [XrcEth, Reth], true),
    row!(
        Xrc,
        op::XRC,
        op::WRITE_ONLY_IMM,
        "XRC RDMA WRITE Only with Immediate",
        [XrcEth, Reth, ImmDt],
        true
    ),
    row!(Xrc, op::XRC, op::READ_REQUEST, "XRC RDMA READ Request", [XrcEth, Reth], false),
    row!(Xrc, op::XRC, op::READ_RESPONSE_FIRST, "XRC RDMA READ response First", [Aeth], true),
    row!(Xrc, op::XRC, op::READ_RESPONSE_MIDDLE, "XRC RDMA READ response Middle", [], true),
    row!(Xrc, op::XRC, op::READ_RESPONSE_LAST, "XRC RDMA READ response Last", [Aeth], true),
    row!(Xrc, op::XRC, op::READ_RESPONSE_ONLY, "XRC RDMA READ response Only", [Aeth], true),
    row!(Xrc, op::XRC, op::ACK, "XRC Acknowledge", [Aeth], false),
    row!(Xrc, op::XRC, op::ATOMIC_ACK, "XRC ATOMIC Acknowledge", [Aeth, AtomicAckEth], false),
    row!(Xrc, op::XRC, op::CMP_SWAP, "XRC CmpSwap", [XrcEth, AtomicEth], false),
    row!(Xrc, op::XRC, op::FETCH_ADD, "XRC FetchAdd", [XrcEth, AtomicEth], false),
    row!(Xrc, op::XRC, op::SEND_LAST_INV, "XRC SEND Last with Invalidate", [XrcEth, Ieth], true),
    row!(Xrc, op::XRC, op::SEND_ONLY_INV, "XRC SEND Only with Invalidate", [XrcEth, Ieth], true),
];

/// The row of `code`, or `None` for an opcode this codec does not speak.
pub fn lookup(code: u8) -> Option<&'static OpInfo> {
    TABLE.iter().find(|r| r.code == code)
}

/// Position of a packet within its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// What the immediate/invalidate variant of a SEND or WRITE carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    None,
    Imm,
    Inv,
}

/// The SEND opcode for a packet at `pos` of a message on `t`; `None` where no such opcode
/// exists (invalidate outside RC, multi-packet UD).
pub fn send_opcode(t: Transport, pos: Position, extra: Extra) -> Option<u8> {
    use Position::*;
    let base = t.base();
    let o = match (pos, extra) {
        (First, Extra::None) => op::SEND_FIRST,
        (Middle, Extra::None) => op::SEND_MIDDLE,
        (First | Middle, _) => return None,
        (Last, Extra::None) => op::SEND_LAST,
        (Last, Extra::Imm) => op::SEND_LAST_IMM,
        (Last, Extra::Inv) => op::SEND_LAST_INV,
        (Only, Extra::None) => op::SEND_ONLY,
        (Only, Extra::Imm) => op::SEND_ONLY_IMM,
        (Only, Extra::Inv) => op::SEND_ONLY_INV,
    };
    lookup(base | o).map(|r| r.code)
}

/// The RDMA WRITE opcode for a packet at `pos` (RC, UC or XRC).
pub fn write_opcode(t: Transport, pos: Position, imm: bool) -> Option<u8> {
    use Position::*;
    if t == Ud {
        return None;
    }
    let base = t.base();
    let o = match (pos, imm) {
        (First, false) => op::WRITE_FIRST,
        (Middle, false) => op::WRITE_MIDDLE,
        (First | Middle, true) => return None,
        (Last, false) => op::WRITE_LAST,
        (Last, true) => op::WRITE_LAST_IMM,
        (Only, false) => op::WRITE_ONLY,
        (Only, true) => op::WRITE_ONLY_IMM,
    };
    lookup(base | o).map(|r| r.code)
}

/// The READ response opcode for a packet at `pos`.
pub fn read_response_opcode(pos: Position) -> u8 {
    match pos {
        Position::First => op::READ_RESPONSE_FIRST,
        Position::Middle => op::READ_RESPONSE_MIDDLE,
        Position::Last => op::READ_RESPONSE_LAST,
        Position::Only => op::READ_RESPONSE_ONLY,
    }
}
