//! Big-endian field access in a CM message body, by the byte offsets and bit positions the IBA
//! tables give (bit 0 is the most significant bit of the field's first byte). Every access is
//! within the fixed-size body, so none can fail at run time; `Body` cannot be built shorter.

use super::mad::BODY_LEN;

/// A CM message body (the 232 bytes after the MAD header).
pub type Body = [u8; BODY_LEN];

/// A fixed-size opaque byte field (private data, ARI, additional information).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for Bytes<N> {
    fn default() -> Self {
        Bytes([0; N])
    }
}

impl<const N: usize> Bytes<N> {
    pub const LEN: usize = N;
    /// `data` zero-padded to N bytes; `None` if it is longer.
    pub fn from_slice(data: &[u8]) -> Option<Self> {
        let mut b = [0; N];
        b.get_mut(..data.len())?.copy_from_slice(data);
        Some(Bytes(b))
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

pub fn get8(b: &Body, off: usize) -> u8 {
    b[off]
}
pub fn get16(b: &Body, off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}
pub fn get32(b: &Body, off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
pub fn get64(b: &Body, off: usize) -> u64 {
    (u64::from(get32(b, off)) << 32) | u64::from(get32(b, off + 4))
}
pub fn put8(b: &mut Body, off: usize, v: u8) {
    b[off] = v;
}
pub fn put16(b: &mut Body, off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}
pub fn put32(b: &mut Body, off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
pub fn put64(b: &mut Body, off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// The top 24 bits of the 32-bit word at `off` (a QPN, PSN or EECN).
pub fn get24(b: &Body, off: usize) -> u32 {
    get32(b, off) >> 8
}
/// Sets the top 24 bits of the word at `off`, keeping its last byte.
pub fn put24(b: &mut Body, off: usize, v: u32) {
    let w = ((v & 0x00ff_ffff) << 8) | u32::from(b[off + 3]);
    put32(b, off, w);
}

/// `width` bits of the byte at `off`, starting `bit` bits from its most significant end.
pub fn getbits(b: &Body, off: usize, bit: u32, width: u32) -> u8 {
    let shift = 8 - bit - width;
    (b[off] >> shift) & ((1u16 << width) - 1) as u8
}
/// Sets `width` bits of the byte at `off` (as [`getbits`]); bits of `v` beyond `width` are dropped.
pub fn putbits(b: &mut Body, off: usize, bit: u32, width: u32, v: u8) {
    let shift = 8 - bit - width;
    let mask = (((1u16 << width) - 1) as u8) << shift;
    b[off] = (b[off] & !mask) | ((v << shift) & mask);
}

pub fn get_bytes<const N: usize>(b: &Body, off: usize) -> Bytes<N> {
    let mut out = [0; N];
    out.copy_from_slice(&b[off..off + N]);
    Bytes(out)
}
pub fn put_bytes<const N: usize>(b: &mut Body, off: usize, v: &Bytes<N>) {
    b[off..off + N].copy_from_slice(&v.0);
}
