use super::*;

const D: u32 = SEG_DATA as u32;

fn hdr(opcode: u32, flags: u32, msg_len: u32, seg_len: u32) -> SegHdr {
    SegHdr { opcode, flags, msg_len, seg_len, ..SegHdr::default() }
}

fn none(_: u64) -> Option<Outstanding> {
    None
}

fn open(opcode: u32, len: u32, got: u32) -> Option<Open> {
    Some(Open { opcode, len, got, imm: false })
}

fn read(len: u32, got: u32) -> impl FnOnce(u64) -> Option<Outstanding> {
    move |s| (s == 7).then_some(Outstanding { awaits: Awaits::Read, len, got, settled: false })
}

#[test]
fn honest_messages_pass_and_advance() {
    let h = hdr(OP_WRITE, SEG_FIRST, 2 * D + 5, D);
    let s = check(None, &h, none).unwrap();
    assert_eq!(
        s,
        Step::Data {
            opcode: OP_WRITE,
            len: 2 * D + 5,
            off: 0,
            n: D,
            first: true,
            last: false,
            imm: false
        }
    );
    let o = s.next_open(None);
    assert_eq!(o, open(OP_WRITE, 2 * D + 5, D));
    let s = check(o, &hdr(OP_WRITE, 0, 2 * D + 5, D), none).unwrap();
    let o = s.next_open(o);
    let s = check(o, &hdr(OP_WRITE, SEG_LAST, 2 * D + 5, 5), none).unwrap();
    assert!(matches!(s, Step::Data { off, n: 5, last: true, .. } if off == 2 * D));
    assert_eq!(s.next_open(o), None);
    // A zero-length SEND with immediate: one segment.
    let h = hdr(OP_SEND, SEG_FIRST | SEG_LAST | SEG_IMM, 0, 0);
    assert!(matches!(check(None, &h, none), Ok(Step::Data { n: 0, last: true, imm: true, .. })));
    let h = hdr(OP_READ_REQ, SEG_FIRST | SEG_LAST, 1 << 20, 0);
    assert_eq!(check(None, &h, none), Ok(Step::Single { opcode: OP_READ_REQ }));
}

#[test]
fn unknown_opcodes_and_flags() {
    assert_eq!(check(None, &hdr(99, SEG_FIRST | SEG_LAST, 0, 0), none), Err(Violation::Opcode));
    assert_eq!(check(None, &hdr(OP_SEND, 0x80 | SEG_FIRST, 0, 0), none), Err(Violation::Flags));
    // LAST on a segment that does not end the message, and no LAST on one that does.
    assert_eq!(
        check(None, &hdr(OP_SEND, SEG_FIRST | SEG_LAST, 10, 5), none),
        Err(Violation::Flags)
    );
    assert_eq!(check(None, &hdr(OP_SEND, SEG_FIRST, 5, 5), none), Err(Violation::Flags));
    // Immediate data on some segments only.
    let o = Some(Open { opcode: OP_SEND, len: 2 * D, got: D, imm: true });
    assert_eq!(check(o, &hdr(OP_SEND, SEG_LAST, 2 * D, D), none), Err(Violation::Flags));
    // A READ request split over segments.
    assert_eq!(check(None, &hdr(OP_READ_REQ, SEG_FIRST, 8, 0), none), Err(Violation::Flags));
    assert_eq!(
        check(None, &hdr(OP_FETCH_ADD, SEG_FIRST | SEG_LAST, 8, 8), none),
        Err(Violation::Length)
    );
}

#[test]
fn the_solicited_event_rides_on_requests_that_consume_a_receive() {
    let whole = SEG_FIRST | SEG_LAST | SEG_SOLICITED;
    assert!(check(None, &hdr(OP_SEND, whole, 5, 5), none).is_ok());
    assert!(check(None, &hdr(OP_WRITE, whole | SEG_IMM, 5, 5), none).is_ok());
    assert_eq!(check(None, &hdr(OP_WRITE, whole, 5, 5), none), Err(Violation::Flags));
    assert_eq!(check(None, &hdr(OP_READ_REQ, whole, 8, 0), none), Err(Violation::Flags));
    let resp = SegHdr { req_seq: 7, ..hdr(OP_READ_RESP, whole, 8, 8) };
    assert_eq!(check(None, &resp, read(8, 0)), Err(Violation::Flags));
}

#[test]
fn lengths_beyond_the_slot_or_the_message() {
    assert_eq!(
        check(None, &hdr(OP_WRITE, SEG_FIRST, 1 << 30, D + 1), none),
        Err(Violation::Length)
    );
    // The second segment claims more than what remains of the message recorded at the first.
    let o = open(OP_WRITE, D + 10, D);
    assert_eq!(check(o, &hdr(OP_WRITE, SEG_LAST, D + 10, 11), none), Err(Violation::Length));
    assert_eq!(
        check(None, &hdr(OP_SEND, SEG_FIRST | SEG_LAST, 10, 11), none),
        Err(Violation::Length)
    );
    // A short middle segment would shift every later offset.
    assert_eq!(check(None, &hdr(OP_WRITE, SEG_FIRST, 3 * D, 100), none), Err(Violation::Length));
}

#[test]
fn message_sequence() {
    // A middle or last segment with no message open.
    assert_eq!(check(None, &hdr(OP_WRITE, 0, 2 * D, D), none), Err(Violation::Sequence));
    assert_eq!(check(None, &hdr(OP_SEND, SEG_LAST, D, D), none), Err(Violation::Sequence));
    // A FIRST while a message is open, of either kind.
    let o = open(OP_SEND, 3 * D, D);
    assert_eq!(check(o, &hdr(OP_SEND, SEG_FIRST, 3 * D, D), none), Err(Violation::Sequence));
    assert_eq!(check(o, &hdr(OP_WRITE, 0, 3 * D, D), none), Err(Violation::Sequence));
    let h = hdr(OP_CMP_SWAP, SEG_FIRST | SEG_LAST, 8, 0);
    assert_eq!(check(o, &h, none), Err(Violation::Sequence));
}

#[test]
fn msg_len_cannot_change() {
    let o = open(OP_WRITE, 2 * D, D);
    assert_eq!(check(o, &hdr(OP_WRITE, 0, 4 * D, D), none), Err(Violation::MsgLen));
    assert_eq!(check(o, &hdr(OP_WRITE, SEG_LAST, 2 * D + 1, D), none), Err(Violation::MsgLen));
}

#[test]
fn responses_take_their_length_from_the_local_request() {
    let mut h = hdr(OP_READ_RESP, SEG_FIRST | SEG_LAST, 64, 64);
    h.req_seq = 7;
    assert_eq!(check(None, &h, read(64, 0)), Ok(Step::Response { off: 0, n: 64, last: true }));
    // More than the local request asked for, or another total.
    h.msg_len = 128;
    h.seg_len = 128;
    assert_eq!(check(None, &h, read(64, 0)), Err(Violation::MsgLen));
    h.msg_len = 64;
    assert_eq!(check(None, &h, read(64, 0)), Err(Violation::Length));
    // FIRST again in the middle of a response.
    h.seg_len = 10;
    assert_eq!(check(None, &h, read(64, 54)), Err(Violation::Flags));
    h.flags = SEG_LAST;
    assert_eq!(check(None, &h, read(64, 54)), Ok(Step::Response { off: 54, n: 10, last: true }));
    // An atomic response carries 8 bytes, copied into at most the local 8.
    let mut a = hdr(OP_ATOMIC_RESP, SEG_FIRST | SEG_LAST, 8, 8);
    a.req_seq = 3;
    let atomic = |s: u64| {
        (s == 3).then_some(Outstanding { awaits: Awaits::Atomic, len: 8, got: 0, settled: false })
    };
    assert_eq!(check(None, &a, atomic), Ok(Step::Response { off: 0, n: 8, last: true }));
    a.seg_len = 16;
    assert_eq!(check(None, &a, atomic), Err(Violation::Length));
}

#[test]
fn responses_must_match_an_outstanding_request() {
    let mut h = hdr(OP_READ_RESP, SEG_FIRST | SEG_LAST, 8, 8);
    h.req_seq = 8;
    assert_eq!(check(None, &h, read(8, 0)), Err(Violation::Unmatched));
    h.req_seq = 7;
    let settled = |_| Some(Outstanding { awaits: Awaits::Read, len: 8, got: 8, settled: true });
    assert_eq!(check(None, &h, settled), Err(Violation::Unmatched));
    // A READ response for a SEND, an atomic response for a READ.
    let ack = |_| Some(Outstanding { awaits: Awaits::Ack, len: 8, got: 0, settled: false });
    assert_eq!(check(None, &h, ack), Err(Violation::Unmatched));
    let a = SegHdr { req_seq: 7, ..hdr(OP_ATOMIC_RESP, SEG_FIRST | SEG_LAST, 8, 8) };
    assert_eq!(check(None, &a, read(8, 0)), Err(Violation::Unmatched));
}

#[test]
fn nak_status_is_one_of_the_remote_errors() {
    let mut h = hdr(OP_NAK, SEG_FIRST | SEG_LAST, 0, 0);
    h.req_seq = 7;
    for s in [IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR] {
        h.imm = s;
        assert_eq!(check(None, &h, read(8, 0)), Ok(Step::Nak { status: s }));
    }
    for s in [0, 5, 12, 0xdead_beef] {
        h.imm = s;
        assert_eq!(check(None, &h, read(8, 0)), Err(Violation::Status));
    }
    h.imm = IBV_WC_REM_OP_ERR;
    h.req_seq = 1 << 40;
    assert_eq!(check(None, &h, read(8, 0)), Err(Violation::Unmatched));
}

#[test]
fn responses_do_not_disturb_the_open_request() {
    let o = open(OP_SEND, 3 * D, D);
    let h =
        SegHdr { req_seq: 7, imm: IBV_WC_REM_OP_ERR, ..hdr(OP_NAK, SEG_FIRST | SEG_LAST, 0, 0) };
    let s = check(o, &h, read(8, 0)).unwrap();
    assert_eq!(s.next_open(o), o);
}
