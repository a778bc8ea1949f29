//! The InfiniBand transport headers RoCEv2 carries (IBA vol. 1, 9.2–9.5), as big-endian wire
//! structs: every type is its exact wire image (zerocopy checks size, alignment 1 and that every
//! bit pattern is valid), and the accessors give the typed fields. Setters mask a value to its
//! field's width, so a header can never carry bits outside its field.

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Mask of a 24-bit field (QPN, PSN, MSN).
pub const MASK24: u32 = 0x00ff_ffff;

/// The traits every wire header derives.
macro_rules! wire_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[repr(C)]
        pub struct $name { $($f: $t),* }
    };
}

wire_struct! {
    /// Base Transport Header, 12 bytes: opcode · SE MigReq PadCnt(2) TVer(4) · P_Key ·
    /// FECN BECN resv6 DestQP(24) · AckReq resv7 PSN(24).
    pub struct Bth { opcode: u8, flags: u8, pkey: U16, fecn_qp: U32, ack_psn: U32 }
}

impl Bth {
    pub const LEN: usize = 12;
    pub fn opcode(&self) -> u8 {
        self.opcode
    }
    pub fn set_opcode(&mut self, v: u8) {
        self.opcode = v;
    }
    /// Solicited event.
    pub fn se(&self) -> bool {
        self.flags & 0x80 != 0
    }
    pub fn set_se(&mut self, v: bool) {
        self.flags = (self.flags & !0x80) | (u8::from(v) << 7);
    }
    pub fn mig_req(&self) -> bool {
        self.flags & 0x40 != 0
    }
    pub fn set_mig_req(&mut self, v: bool) {
        self.flags = (self.flags & !0x40) | (u8::from(v) << 6);
    }
    /// Bytes of pad (0..=3) after the payload.
    pub fn pad_cnt(&self) -> u8 {
        (self.flags >> 4) & 3
    }
    pub fn set_pad_cnt(&mut self, v: u8) {
        self.flags = (self.flags & !0x30) | ((v & 3) << 4);
    }
    /// Transport header version; 0 is the only one defined.
    pub fn tver(&self) -> u8 {
        self.flags & 0x0f
    }
    pub fn set_tver(&mut self, v: u8) {
        self.flags = (self.flags & !0x0f) | (v & 0x0f);
    }
    pub fn pkey(&self) -> u16 {
        self.pkey.get()
    }
    pub fn set_pkey(&mut self, v: u16) {
        self.pkey.set(v);
    }
    /// Forward explicit congestion notification (masked out of the ICRC).
    pub fn fecn(&self) -> bool {
        self.fecn_qp.get() & 0x8000_0000 != 0
    }
    pub fn set_fecn(&mut self, v: bool) {
        self.fecn_qp.set((self.fecn_qp.get() & !0x8000_0000) | (u32::from(v) << 31));
    }
    pub fn becn(&self) -> bool {
        self.fecn_qp.get() & 0x4000_0000 != 0
    }
    pub fn set_becn(&mut self, v: bool) {
        self.fecn_qp.set((self.fecn_qp.get() & !0x4000_0000) | (u32::from(v) << 30));
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        self.fecn_qp.get() & MASK24
    }
    pub fn set_dest_qp(&mut self, v: u32) {
        self.fecn_qp.set((self.fecn_qp.get() & !MASK24) | (v & MASK24));
    }
    pub fn ack_req(&self) -> bool {
        self.ack_psn.get() & 0x8000_0000 != 0
    }
    pub fn set_ack_req(&mut self, v: bool) {
        self.ack_psn.set((self.ack_psn.get() & !0x8000_0000) | (u32::from(v) << 31));
    }
    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        self.ack_psn.get() & MASK24
    }
    pub fn set_psn(&mut self, v: u32) {
        self.ack_psn.set((self.ack_psn.get() & !MASK24) | (v & MASK24));
    }
    /// The same header with its reserved bits cleared (what an encoder sends).
    pub fn canonical(mut self) -> Self {
        self.fecn_qp.set(self.fecn_qp.get() & 0xc0ff_ffff);
        self.ack_psn.set(self.ack_psn.get() & 0x80ff_ffff);
        self
    }
}

wire_struct! {
    /// RDMA Extended Transport Header, 16 bytes: VA · R_Key · DMA length.
    pub struct Reth { va: U64, rkey: U32, len: U32 }
}

impl Reth {
    pub const LEN: usize = 16;
    pub fn new(va: u64, rkey: u32, len: u32) -> Self {
        Reth { va: va.into(), rkey: rkey.into(), len: len.into() }
    }
    pub fn va(&self) -> u64 {
        self.va.get()
    }
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// DMA length of the whole request.
    pub fn len(&self) -> u32 {
        self.len.get()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// NAK codes of an AETH (IBA 9.7.5.2.2, table 43).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// A code the specification reserves (5..=31), kept so a decode never loses it.
    Reserved(u8),
}

impl NakCode {
    pub fn from_code(c: u8) -> Self {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

/// The AETH syndrome, decoded: bits 6:5 select the kind, bits 4:0 its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    /// ACK with the responder's credit count (31: no end-to-end credits).
    Ack {
        credits: u8,
    },
    /// RNR NAK with the encoded minimum RNR timer (IBA table 45).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
    /// Kind 0b10 or bit 7 set: reserved by the specification (raw syndrome byte).
    Reserved(u8),
}

impl Syndrome {
    pub fn from_byte(b: u8) -> Self {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => Syndrome::Ack { credits: b & 0x1f },
            1 => Syndrome::RnrNak { timer: b & 0x1f },
            3 => Syndrome::Nak(NakCode::from_code(b)),
            _ => Syndrome::Reserved(b),
        }
    }
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
}

wire_struct! {
    /// ACK Extended Transport Header, 4 bytes: syndrome(8) · MSN(24).
    pub struct Aeth { syn_msn: U32 }
}

impl Aeth {
    pub const LEN: usize = 4;
    pub fn new(syndrome: Syndrome, msn: u32) -> Self {
        Aeth { syn_msn: ((u32::from(syndrome.to_byte()) << 24) | (msn & MASK24)).into() }
    }
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte((self.syn_msn.get() >> 24) as u8)
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        self.syn_msn.get() & MASK24
    }
}

wire_struct! {
    /// Atomic Extended Transport Header, 28 bytes: VA · R_Key · swap/add data · compare data.
    pub struct AtomicEth { va: U64, rkey: U32, swap_add: U64, compare: U64 }
}

impl AtomicEth {
    pub const LEN: usize = 28;
    pub fn new(va: u64, rkey: u32, swap_add: u64, compare: u64) -> Self {
        AtomicEth {
            va: va.into(),
            rkey: rkey.into(),
            swap_add: swap_add.into(),
            compare: compare.into(),
        }
    }
    pub fn va(&self) -> u64 {
        self.va.get()
    }
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// The swap value of a CmpSwap, the addend of a FetchAdd.
    pub fn swap_add(&self) -> u64 {
        self.swap_add.get()
    }
    /// The compare value of a CmpSwap (unused by FetchAdd).
    pub fn compare(&self) -> u64 {
        self.compare.get()
    }
}

wire_struct! {
    /// Atomic ACK Extended Transport Header, 8 bytes: the original remote data.
    pub struct AtomicAckEth { orig: U64 }
}

impl AtomicAckEth {
    pub const LEN: usize = 8;
    pub fn new(orig: u64) -> Self {
        AtomicAckEth { orig: orig.into() }
    }
    pub fn orig(&self) -> u64 {
        self.orig.get()
    }
}

wire_struct! {
    /// Datagram Extended Transport Header, 8 bytes: Q_Key · resv8 · source QP(24).
    pub struct Deth { qkey: U32, src_qp: U32 }
}

impl Deth {
    pub const LEN: usize = 8;
    pub fn new(qkey: u32, src_qp: u32) -> Self {
        Deth { qkey: qkey.into(), src_qp: (src_qp & MASK24).into() }
    }
    pub fn qkey(&self) -> u32 {
        self.qkey.get()
    }
    pub fn src_qp(&self) -> u32 {
        self.src_qp.get() & MASK24
    }
    /// The same header with its reserved byte cleared.
    pub fn canonical(self) -> Self {
        Deth::new(self.qkey(), self.src_qp())
    }
}

wire_struct! {
    /// Immediate data, 4 bytes (carried opaque, in network order as the sender posted it).
    pub struct ImmDt { imm: U32 }
}

impl ImmDt {
    pub const LEN: usize = 4;
    pub fn new(imm: u32) -> Self {
        ImmDt { imm: imm.into() }
    }
    pub fn imm(&self) -> u32 {
        self.imm.get()
    }
}

wire_struct! {
    /// Invalidate Extended Transport Header, 4 bytes: the R_Key to invalidate.
    pub struct Ieth { rkey: U32 }
}

impl Ieth {
    pub const LEN: usize = 4;
    pub fn new(rkey: u32) -> Self {
        Ieth { rkey: rkey.into() }
    }
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
}

wire_struct! {
    /// XRC Extended Transport Header, 4 bytes: 8 reserved bits, then the 24-bit number of the
    /// SRQ at the target that the request is for.
    pub struct XrcEth { srqn: U32 }
}

impl XrcEth {
    pub const LEN: usize = 4;
    pub fn new(srqn: u32) -> Self {
        XrcEth { srqn: (srqn & 0x00ff_ffff).into() }
    }
    /// The SRQ number (the reserved bits are ignored).
    pub fn srqn(&self) -> u32 {
        self.srqn.get() & 0x00ff_ffff
    }
    /// The same header with its reserved bits cleared.
    pub fn canonical(self) -> Self {
        XrcEth::new(self.srqn())
    }
}

const _: () = {
    assert!(size_of::<XrcEth>() == XrcEth::LEN);
    assert!(size_of::<Bth>() == Bth::LEN);
    assert!(size_of::<Reth>() == Reth::LEN);
    assert!(size_of::<Aeth>() == Aeth::LEN);
    assert!(size_of::<AtomicEth>() == AtomicEth::LEN);
    assert!(size_of::<AtomicAckEth>() == AtomicAckEth::LEN);
    assert!(size_of::<Deth>() == Deth::LEN);
    assert!(size_of::<ImmDt>() == ImmDt::LEN);
    assert!(size_of::<Ieth>() == Ieth::LEN);
};
