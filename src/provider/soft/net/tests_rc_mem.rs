//! The network path's memory adapter (`rc_mem.rs`): every local piece and remote range is
//! checked against the MR table (and remote ones against the QP's access flags) before a byte
//! moves.

use super::*;
use crate::provider::soft::transport::Memory as _;
use crate::provider::{AccessError, Checked, Region, Sge, Sgl};

/// One registered region: `[base, base+len)` with key `key` and rights `rights`, and its gate.
struct Keys {
    key: u32,
    base: u64,
    len: usize,
    rights: u32,
    gate: Region,
}

impl MemoryKeys for Keys {
    fn lookup(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: u32,
        _space: KeySpace,
    ) -> Result<Checked, AccessError> {
        let end = addr.checked_add(len as u64).ok_or(AccessError::Protection)?;
        if key != self.key || addr < self.base || end > self.base + self.len as u64 {
            return Err(AccessError::Protection);
        }
        if self.rights & need != need {
            return Err(AccessError::Access);
        }
        Ok(Checked { region: self.gate.clone(), addr })
    }
}

fn setup(buf: &mut [u8], rights: u32) -> (Keys, RefCell<Book>) {
    let base = buf.as_mut_ptr() as u64;
    let keys = Keys { key: 7, base, len: buf.len(), rights, gate: Region::default() };
    let mut book = Book::default();
    // Two pieces of the buffer, in reverse order: bytes 32..40 then 0..8.
    let sgl = Sgl::Many(vec![
        Sge { addr: base + 32, length: 8, lkey: 7 },
        Sge { addr: base, length: 8, lkey: 7 },
    ]);
    book.add(List::Recv(sgl));
    (keys, RefCell::new(book))
}

#[test]
fn local_lists_are_walked_piece_by_piece_and_bounded() {
    let mut buf = vec![0u8; 64];
    let (keys, book) = setup(&mut buf, ACCESS_LOCAL_WRITE);
    let mut mem = Mem { keys: &keys, book: &book, access: 0 };
    let h = t::Sgl(1);
    mem.write_local(h, 4, &[1, 2, 3, 4, 5, 6]).unwrap();
    let mut back = [0u8; 16];
    mem.read_local(h, 0, &mut back).unwrap();
    assert_eq!(back, [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0]);
    assert_eq!(mem.write_local(h, 10, &[0; 7]), Err(t::MemError::Access), "beyond the list");
    assert_eq!(mem.write_local(h, u64::MAX, &[0; 2]), Err(t::MemError::Access), "overflow");
    assert_eq!(mem.read_local(t::Sgl(2), 0, &mut back[..1]), Err(t::MemError::Access));
    assert_eq!(&buf[32..36], &[0, 0, 0, 0]);
    assert_eq!(&buf[36..40], &[1, 2, 3, 4]);
    assert_eq!(&buf[0..2], &[5, 6]);
}

#[test]
fn a_list_without_local_write_is_not_written() {
    let mut buf = vec![0u8; 64];
    let (keys, book) = setup(&mut buf, 0);
    let mut mem = Mem { keys: &keys, book: &book, access: 0 };
    assert_eq!(mem.write_local(t::Sgl(1), 0, &[9]), Err(t::MemError::Access));
    assert!(buf.iter().all(|b| *b == 0));
}

#[test]
fn remote_access_needs_the_qp_flag_the_region_right_and_the_bounds() {
    let mut buf = vec![0u8; 64];
    let all = ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
    let (keys, book) = setup(&mut buf, all);
    let base = keys.base;
    let mut closed = Mem { keys: &keys, book: &book, access: ACCESS_REMOTE_READ };
    assert_eq!(closed.write_remote(7, base, &[1]), Err(t::MemError::Access), "QP lacks write");
    let mut mem = Mem { keys: &keys, book: &book, access: all };
    mem.write_remote(7, base + 8, &[1, 2, 3]).unwrap();
    assert_eq!(mem.write_remote(8, base, &[1]), Err(t::MemError::Access), "unknown rkey");
    assert_eq!(mem.write_remote(7, base + 62, &[1, 2, 3]), Err(t::MemError::Access), "bounds");
    let mut r = [0u8; 3];
    mem.read_remote(7, base + 8, &mut r).unwrap();
    assert_eq!(r, [1, 2, 3]);
    let a = (base + 16 + 7) & !7; // 8 aligned bytes inside the region
    assert_eq!(mem.atomic(7, a + 4, t::AtomicOp::FetchAdd { add: 1 }), Err(t::MemError::Access));
    assert_eq!(mem.atomic(7, a, t::AtomicOp::FetchAdd { add: 5 }), Ok(0));
    assert_eq!(mem.atomic(7, a, t::AtomicOp::CmpSwap { compare: 5, swap: 9 }), Ok(5));
    assert_eq!(mem.atomic(7, a, t::AtomicOp::FetchAdd { add: 0 }), Ok(9));
}

#[test]
fn a_region_deregistered_after_its_check_is_not_touched() {
    // The key table still answers (the check passed just before), but the region's gate is
    // closed: ibv_dereg_mr has returned, so no byte may move, local or remote.
    let mut buf = vec![0u8; 64];
    let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
    let (keys, book) = setup(&mut buf, all);
    keys.gate.close();
    let (base, mut mem) = (keys.base, Mem { keys: &keys, book: &book, access: all });
    assert_eq!(mem.write_remote(7, base, &[1, 2]), Err(t::MemError::Access));
    assert_eq!(mem.read_remote(7, base, &mut [0u8; 2]), Err(t::MemError::Access));
    let a = (base + 7) & !7;
    assert_eq!(mem.atomic(7, a, t::AtomicOp::FetchAdd { add: 1 }), Err(t::MemError::Access));
    assert_eq!(mem.write_local(t::Sgl(1), 0, &[3]), Err(t::MemError::Access));
    assert_eq!(mem.read_local(t::Sgl(1), 0, &mut [0u8; 1]), Err(t::MemError::Access));
    assert!(buf.iter().all(|b| *b == 0));
    // Empty ranges name no memory: still allowed.
    assert_eq!(mem.write_remote(7, base, &[]), Ok(()));
}
