//! Whole RoCEv2 packets (the UDP payload: BTH, extension headers, payload, pad, ICRC): encoding
//! from a typed description into a caller's buffer, and decoding untrusted bytes into a typed
//! view that borrows the payload. Both follow the opcode table ([`super::opcode::TABLE`]).

use super::headers::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ieth, ImmDt, Reth, XrcEth};
use super::icrc::{self, Flow, ICRC_LEN};
use super::opcode::{self, Ext, OpInfo};
use zerocopy::{FromBytes, IntoBytes};

/// The extension headers of one packet; exactly those its opcode lists are `Some`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exts {
    pub xrc: Option<XrcEth>,
    pub deth: Option<Deth>,
    pub reth: Option<Reth>,
    pub atomic: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    pub atomic_ack: Option<AtomicAckEth>,
    pub imm: Option<ImmDt>,
    pub ieth: Option<Ieth>,
}

impl Exts {
    fn has(&self, e: Ext) -> bool {
        match e {
            Ext::XrcEth => self.xrc.is_some(),
            Ext::Deth => self.deth.is_some(),
            Ext::Reth => self.reth.is_some(),
            Ext::AtomicEth => self.atomic.is_some(),
            Ext::Aeth => self.aeth.is_some(),
            Ext::AtomicAckEth => self.atomic_ack.is_some(),
            Ext::ImmDt => self.imm.is_some(),
            Ext::Ieth => self.ieth.is_some(),
        }
    }
    fn count(&self) -> usize {
        [
            self.xrc.is_some(),
            self.deth.is_some(),
            self.reth.is_some(),
            self.atomic.is_some(),
            self.aeth.is_some(),
            self.atomic_ack.is_some(),
            self.imm.is_some(),
            self.ieth.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }
    /// The wire image of header `e`, if present.
    fn bytes(&self, e: Ext) -> Option<&[u8]> {
        match e {
            Ext::XrcEth => self.xrc.as_ref().map(|h| h.as_bytes()),
            Ext::Deth => self.deth.as_ref().map(|h| h.as_bytes()),
            Ext::Reth => self.reth.as_ref().map(|h| h.as_bytes()),
            Ext::AtomicEth => self.atomic.as_ref().map(|h| h.as_bytes()),
            Ext::Aeth => self.aeth.as_ref().map(|h| h.as_bytes()),
            Ext::AtomicAckEth => self.atomic_ack.as_ref().map(|h| h.as_bytes()),
            Ext::ImmDt => self.imm.as_ref().map(|h| h.as_bytes()),
            Ext::Ieth => self.ieth.as_ref().map(|h| h.as_bytes()),
        }
    }
}

/// One packet. On encode, the BTH's PadCnt and TVer are computed (whatever they hold); on
/// decode, the BTH is the one received (reserved bits included) and `payload` excludes the pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub bth: Bth,
    pub ext: Exts,
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// A packet with `opcode`, destination QP and PSN, the default P_Key, and no headers.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32, payload: &'a [u8]) -> Self {
        let mut bth = Bth::default();
        bth.set_opcode(opcode);
        bth.set_pkey(DEFAULT_PKEY);
        bth.set_dest_qp(dest_qp);
        bth.set_psn(psn);
        Packet { bth, ext: Exts::default(), payload }
    }
    /// The opcode's row in the table.
    pub fn info(&self) -> Option<&'static OpInfo> {
        opcode::lookup(self.bth.opcode())
    }
    /// Bytes [`encode`] writes for this packet.
    pub fn wire_len(&self) -> usize {
        let hdrs = self.info().map_or(0, |i| i.headers_len());
        Bth::LEN + hdrs + self.payload.len().next_multiple_of(4) + ICRC_LEN
    }
}

/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The largest UDP payload (an IPv4 datagram of 65535 bytes).
pub const MAX_PACKET: usize = 65535 - 20 - 8;

/// Why a packet could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The opcode is not in the table.
    UnknownOpcode(u8),
    /// The extension headers given are not exactly the opcode's.
    Headers,
    /// A payload on an opcode that carries none.
    PayloadNotAllowed,
    /// The packet would not fit one IP datagram.
    TooLong,
    /// The buffer is shorter than [`Packet::wire_len`].
    BufferTooSmall,
}

/// Why received bytes are not a packet this codec accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than a BTH and an ICRC.
    TooShort,
    /// An opcode not in the table (reserved, RD, or not supported).
    UnknownOpcode(u8),
    /// A transport header version other than 0.
    BadTver(u8),
    /// Shorter than the opcode's extension headers.
    HeadersTruncated,
    /// Bytes after the headers of an opcode that carries no payload.
    UnexpectedPayload,
    /// The packet's length is not a multiple of 4 bytes.
    Misaligned,
    /// PadCnt larger than the payload it pads.
    PadTooLong,
    /// The ICRC does not match.
    IcrcMismatch,
}

/// Writes `pkt` (padded, with its ICRC for `flow`) at the start of `buf`; returns its length.
/// Does not allocate.
pub fn encode(pkt: &Packet<'_>, flow: &Flow, buf: &mut [u8]) -> Result<usize, EncodeError> {
    let info = pkt.info().ok_or(EncodeError::UnknownOpcode(pkt.bth.opcode()))?;
    if pkt.ext.count() != info.headers.len() || !info.headers.iter().all(|h| pkt.ext.has(*h)) {
        return Err(EncodeError::Headers);
    }
    if !info.payload && !pkt.payload.is_empty() {
        return Err(EncodeError::PayloadNotAllowed);
    }
    let len = pkt.wire_len();
    if len > MAX_PACKET {
        return Err(EncodeError::TooLong);
    }
    let out = buf.get_mut(..len).ok_or(EncodeError::BufferTooSmall)?;
    let pad = len - ICRC_LEN - Bth::LEN - info.headers_len() - pkt.payload.len();
    let mut bth = pkt.bth.canonical();
    bth.set_tver(0);
    bth.set_pad_cnt(pad as u8);
    out[..Bth::LEN].copy_from_slice(bth.as_bytes());
    let mut at = Bth::LEN;
    for h in info.headers {
        let b = pkt.ext.bytes(*h).ok_or(EncodeError::Headers)?;
        out[at..at + b.len()].copy_from_slice(b);
        // Reserved bits go out as zero.
        if let (Ext::Deth, Some(d)) = (h, pkt.ext.deth) {
            out[at..at + Deth::LEN].copy_from_slice(d.canonical().as_bytes());
        }
        if let (Ext::XrcEth, Some(x)) = (h, pkt.ext.xrc) {
            out[at..at + XrcEth::LEN].copy_from_slice(x.canonical().as_bytes());
        }
        at += b.len();
    }
    out[at..at + pkt.payload.len()].copy_from_slice(pkt.payload);
    at += pkt.payload.len();
    out[at..at + pad].fill(0);
    at += pad;
    let crc = icrc::compute(flow, &out[..at]).ok_or(EncodeError::TooLong)?;
    out[at..at + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(len)
}

/// Decodes a UDP payload received on `flow` (as the receiving socket reports it) and checks its
/// ICRC. Never panics, whatever the bytes.
pub fn decode<'a>(bytes: &'a [u8], flow: &Flow) -> Result<Packet<'a>, DecodeError> {
    let pkt = decode_unverified(bytes)?;
    if !icrc::verify(flow, bytes) {
        return Err(DecodeError::IcrcMismatch);
    }
    Ok(pkt)
}

/// Decodes the structure of a packet without checking its ICRC (for a receiver that cannot
/// know the sender's IPv4 ID; docs/DESIGN-NOTES.md "Wire formats").
pub fn decode_unverified(bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    if bytes.len() < Bth::LEN + ICRC_LEN {
        return Err(DecodeError::TooShort);
    }
    let (bth, rest) = Bth::read_from_prefix(bytes).map_err(|_| DecodeError::TooShort)?;
    if bth.tver() != 0 {
        return Err(DecodeError::BadTver(bth.tver()));
    }
    let info = opcode::lookup(bth.opcode()).ok_or(DecodeError::UnknownOpcode(bth.opcode()))?;
    if bytes.len() % 4 != 0 {
        return Err(DecodeError::Misaligned);
    }
    let body = &rest[..rest.len() - ICRC_LEN];
    let mut ext = Exts::default();
    let mut at = 0;
    for h in info.headers {
        let b = body.get(at..at + h.wire_len()).ok_or(DecodeError::HeadersTruncated)?;
        match h {
            Ext::XrcEth => ext.xrc = Some(read(b)?),
            Ext::Deth => ext.deth = Some(read(b)?),
            Ext::Reth => ext.reth = Some(read(b)?),
            Ext::AtomicEth => ext.atomic = Some(read(b)?),
            Ext::Aeth => ext.aeth = Some(read(b)?),
            Ext::AtomicAckEth => ext.atomic_ack = Some(read(b)?),
            Ext::ImmDt => ext.imm = Some(read(b)?),
            Ext::Ieth => ext.ieth = Some(read(b)?),
        }
        at += h.wire_len();
    }
    let padded = &body[at..];
    let pad = usize::from(bth.pad_cnt());
    if !info.payload && !padded.is_empty() {
        return Err(DecodeError::UnexpectedPayload);
    }
    if pad > padded.len() {
        return Err(DecodeError::PadTooLong);
    }
    Ok(Packet { bth, ext, payload: &padded[..padded.len() - pad] })
}

/// A header from a slice of its exact length (so the read cannot fail; an error is mapped anyway).
fn read<T: FromBytes>(b: &[u8]) -> Result<T, DecodeError> {
    T::read_from_bytes(b).map_err(|_| DecodeError::HeadersTruncated)
}
