use super::*;
use crate::runtime::unix::recv_dgram_fds;

#[repr(C, align(4096))]
struct Page([u8; 4096]);

fn ring_memory() -> Vec<Page> {
    (0..LINK_SIZE / 4096).map(|_| Page([0; 4096])).collect()
}

/// A ring over `mem`, its receiving end in `Receivers`, started.
fn ends(mem: &mut [Page], from: u32) -> (Ring, Receivers) {
    // SAFETY: mem is LINK_SIZE bytes, page-aligned like a mapping, and outlives both views
    // (each test keeps it until they are dropped).
    let (p, c) =
        unsafe { (Ring::new(mem.as_mut_ptr().cast(), 0), Ring::new(mem.as_mut_ptr().cast(), 0)) };
    let shm = Shm::create(4096).expect("a segment to stand in for the mapping");
    let seg = Segment { shm, ring: c, generation: fork::generation() };
    let r = Receivers { rings: vec![Inbound { seg, from, started: true }], ..Default::default() };
    (p, r)
}

fn hdr(dst: u32, len: usize, tag: u32) -> UdHdr {
    let mut h = UdHdr::new(7, dst, 0x1111, [1; 16], [2; 16]);
    h.len = len as u32;
    h.imm = tag;
    h
}

fn pattern(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect()
}

/// Small and MTU-sized records (one slot, two) come out whole, in order, byte for byte.
#[test]
fn records_of_one_and_two_slots_round_trip() {
    let mut mem = ring_memory();
    let (p, mut r) = ends(&mut mem, 7);
    let sizes = [0, 1, 64, SLOT_SIZE - HDR_LEN, SLOT_SIZE - HDR_LEN + 1, UD_MTU];
    let data: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
    let msgs: Vec<(UdHdr, &[u8])> =
        data.iter().enumerate().map(|(i, d)| (hdr(9, d.len(), i as u32), &d[..])).collect();
    assert_eq!(write(&p, &msgs), msgs.len());
    let mut got = Vec::new();
    assert!(r.drain(9, |h, b| got.push((h.imm, b.to_vec()))));
    assert_eq!(got.len(), sizes.len());
    for (i, (tag, b)) in got.iter().enumerate() {
        assert_eq!((*tag as usize, b), (i, &data[i]));
    }
    assert_eq!(p.tail(), p.head(), "every slot consumed");
    assert_eq!(p.head(), 1 + 1 + 1 + 1 + 2 + 2);
}

/// A batch that does not fit goes not at all; after the consumer makes room, it does.
#[test]
fn a_full_ring_takes_nothing_of_a_batch() {
    let mut mem = ring_memory();
    let (p, mut r) = ends(&mut mem, 7);
    let big = pattern(UD_MTU, 1);
    let one = [(hdr(9, big.len(), 0), &big[..])];
    let mut n = 0;
    while write(&p, &one) == 1 {
        n += 1;
    }
    assert_eq!(n, super::super::ring::SLOTS / 2, "two slots each");
    let head = p.head();
    assert_eq!(write(&p, &[(hdr(9, 1, 0), &big[..1])]), 0, "no slot left");
    assert_eq!(p.head(), head);
    let mut count = 0;
    while r.drain(9, |_, b| {
        assert_eq!(b, &big[..]);
        count += 1;
    }) {}
    assert_eq!(count, n);
    assert_eq!(write(&p, &one), 1, "room seen again for a two-slot record");
    // A batch larger than the room: its first messages go, as many as fit.
    let batch: Vec<(UdHdr, &[u8])> = (0..40).map(|i| (hdr(9, big.len(), i), &big[..])).collect();
    assert_eq!(write(&p, &batch), super::super::ring::SLOTS as usize / 2 - 1);
}

/// Whatever a producer writes, a receiver reads nothing outside the record's slots and drops a
/// ring that lies: bad magic, a length over the MTU, another QP's number, a head out of range.
#[test]
fn a_lying_producer_loses_its_ring() {
    type Spoil = fn(&mut UdHdr);
    let cases: [(&str, Spoil); 3] = [
        ("magic", |h| h.magic ^= 1),
        ("length over the MTU", |h| h.len = UD_MTU as u32 + 1),
        ("another destination", |h| h.dst_qpn = 10),
    ];
    for (what, spoil) in cases {
        let mut mem = ring_memory();
        let (p, mut r) = ends(&mut mem, 7);
        let d = pattern(16, 3);
        assert_eq!(write(&p, &[(hdr(9, 16, 0), &d[..])]), 1);
        // Rewrite the published header in place, as a producer may at any time.
        let mut h = hdr(9, 16, 0);
        spoil(&mut h);
        // SAFETY: slot 0 is SLOT_SIZE bytes of `mem`, which is alive.
        unsafe { std::ptr::copy_nonoverlapping(h.as_bytes().as_ptr(), slot_bytes(&p, 0), HDR_LEN) };
        let mut got = 0;
        r.drain(9, |_, _| got += 1);
        assert_eq!((got, r.rings.len()), (0, 0), "{what}: nothing delivered, ring dropped");
    }
    let mut mem = ring_memory();
    let (p, mut r) = ends(&mut mem, 7);
    p.publish(1 << 40);
    assert!(!r.drain(9, |_, _| panic!("nothing to deliver")));
    assert!(r.rings.is_empty(), "a head out of range drops the ring");
}

/// A multicast member's copy (its header names the group, not the QP) travels the member's
/// ring and comes out as sent; whether the QP is attached is the receiver's check.
#[test]
fn a_members_copy_travels_its_ring() {
    let mut mem = ring_memory();
    let (p, mut r) = ends(&mut mem, 7);
    let (d, e) = (pattern(40, 1), pattern(24, 2));
    assert_eq!(write(&p, &[(hdr(MCAST_QPN, 40, 1), &d[..]), (hdr(9, 24, 2), &e[..])]), 2);
    let mut got = Vec::new();
    assert!(r.drain(9, |h, b| got.push((h.dst_qpn, h.imm, b.to_vec()))));
    assert_eq!(got, vec![(MCAST_QPN, 1, d), (9, 2, e)]);
    assert_eq!(r.rings.len(), 1, "the ring stays");
}

/// A receiver reads a ring only after its `START`.
#[test]
fn a_ring_is_read_only_after_start() {
    let mut mem = ring_memory();
    let (p, mut r) = ends(&mut mem, 7);
    r.rings[0].started = false;
    let d = pattern(8, 0);
    assert_eq!(write(&p, &[(hdr(9, 8, 0), &d[..])]), 1);
    assert!(!r.drain(9, |_, _| panic!("not started")));
    let start = Ctl { magic: CTL_MAGIC, kind: START, from_qpn: 7, to_qpn: 9 };
    assert!(is_setup(start.as_bytes()));
    assert!(r.setup(-1, 9, start.as_bytes(), Vec::new()).is_none());
    assert!(r.drain(9, |_, b| assert_eq!(b, &d[..])));
}

/// Two "QPs" of this process with real sockets: the first datagram goes by the socket with
/// the offer behind it; after the handshake the rest go by the ring; the receiver, reading
/// its socket then its rings, sees them all in order. A destroyed receiver sends the sender
/// back to the socket.
#[test]
fn the_handshake_switches_to_the_ring_keeping_order() {
    let base = 0xd0_0000 | (std::process::id() & 0x7fff) << 1;
    let (a, b) = (base, base + 1);
    let sa = unix::bind_dgram(&qp_name(a)).expect("socket a");
    let sb = unix::bind_dgram(&qp_name(b)).expect("socket b");
    let (fa, fb) = (sa.as_raw_fd(), sb.as_raw_fd());
    let mut senders = Senders::default();
    let mut receivers = Receivers::default();
    let mut got = Vec::new();
    // Reads one socket: setup messages handled, UD messages collected.
    let read = |fd: RawFd, me: u32, r: &mut Receivers, s: &mut Senders, got: &mut Vec<u32>| {
        let mut buf = vec![0u8; 8192];
        while let Ok(Some((n, _, fds))) = recv_dgram_fds(fd, &mut buf) {
            let m = &buf[..n];
            if is_setup(m) {
                if let Some((from, bell)) = r.setup(fd, me, m, fds) {
                    s.accepted(fd, me, from, bell);
                }
            } else {
                got.extend(super::super::datagram::messages(m).map(|(h, _)| h.imm));
            }
        }
        r.drain(me, |h, _| got.push(h.imm));
    };
    let send = |s: &mut Senders, tag: u32| {
        let d = pattern(100, tag as u8);
        let h = hdr(b, d.len(), tag);
        s.offer(fa, a, b, &[(h, &d[..])], &[h.as_bytes(), &d[..]])
    };
    let one = Taken { count: 1, gone: false };
    assert_eq!(send(&mut senders, 0), one);
    assert!(matches!(senders.out.get(&b), Some(Out::Offered(..))), "a ring is offered");
    assert_eq!(send(&mut senders, 1), one, "still by the socket");
    read(fb, b, &mut receivers, &mut Senders::default(), &mut got); // 0, OFFER, 1; ACCEPT goes
    assert_eq!(got, vec![0, 1]);
    read(fa, a, &mut Receivers::default(), &mut senders, &mut Vec::new()); // ACCEPT; START goes
    assert!(matches!(senders.out.get(&b), Some(Out::Ready(..))), "the ring runs");
    for t in 2..10 {
        assert_eq!(send(&mut senders, t), one);
    }
    read(fb, b, &mut receivers, &mut Senders::default(), &mut got); // START, then the ring
    assert_eq!(got, (0..10).collect::<Vec<_>>(), "in order across the switch");
    // The receiver goes: its ring closes, and the sender is back on the (refused) socket.
    drop(receivers);
    drop(sb);
    assert_eq!(send(&mut senders, 10), Taken { count: 1, gone: true }, "lost with its receiver");
    assert!(!senders.out.contains_key(&b), "the closed ring is forgotten");
}
