#!/usr/bin/env python3
"""A hostile peer for the soft provider's same-host RC transport, written without rdmashim.

It speaks the provider's protocols itself (src/provider/soft/link.rs for the handshake,
ring.rs for the shared rings): it claims a QPN smaller than the victim's (the smaller QPN
connects), sends a Hello with a link segment and a doorbell of its own making, and then writes
ring headers that try to reach memory outside what the victim registered, make it hang, or make
it fault. One victim process (c-tests/peer_victim.c) per scenario; afterwards the victim checks
its canaries, that it still answers, and that two honest QPs still move data.

Usage: malicious_peer.py VICTIM [SCENARIO...]   (exit 0: every scenario passed)
"""
import fcntl
import mmap
import os
import select
import socket
import struct
import subprocess
import sys
import time

# --- the provider's wire formats (see the Rust sources named above) -------------------------
MAGIC, HELLO, ACK = 0x52444D53, 1, 2
SLOT, SLOTS, CTL = 4096, 64, 4096
LINK_SIZE = CTL + 2 * SLOTS * SLOT
BELL_SIZE = 4096
HDR = struct.Struct("<IIIIIIQQQQII")  # msg_len seg_len flags opcode imm rkey addr cmp swap req_seq xrc_srqn seal
SEAL_AT = HDR.size - 4  # an RC slot is the consumer's once this word is seal(its sequence number)
SEG_DATA = SLOT - HDR.size
FIRST, LAST, IMM = 1, 2, 4
SEND, WRITE, READ_REQ, READ_RESP, CMP_SWAP, FETCH_ADD, ATOMIC_RESP, NAK = range(8)
WC_REM_ACCESS_ERR = 10
HEAD, TAIL, CLOSED = 0, 64, 128  # counters inside one direction's control block
CTL_STRIDE = 512  # from one direction's control block to the other's (ring.rs)
QPS_ERR = 6
WAIT = 5.0  # bound on every wait for the victim


def seal_of(seq):
    return (seq & 0xFFFFFFFF) | 1 << 31


class Victim:
    def __init__(self, exe):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        words = dict(w.split("=") for w in self.line().split()[1:])
        self.qpn, self.rkey = int(words["qpn"]), int(words["rkey"])
        self.addr, self.len, self.canary = int(words["addr"]), int(words["len"]), int(words["canary"])

    def line(self):
        ready, _, _ = select.select([self.p.stdout], [], [], 30)
        text = self.p.stdout.readline() if ready else ""
        if not text:
            raise RuntimeError(f"victim gave no answer (exit status {self.p.poll()})")
        return text.strip()

    def say(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def finish(self):
        """Asks the victim to check itself; returns its report as a dict."""
        self.say("check")
        try:
            report = dict(w.split("=") for w in self.line().split())
        except RuntimeError as e:
            self.p.kill()
            return {"error": str(e)}
        report["exit"] = self.p.wait(timeout=30)
        return report


def sealed_memfd(size, seal=True):
    fd = os.memfd_create("attacker", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


class Link:
    """The attacker's end: it produces into direction 0 and consumes direction 1."""

    def __init__(self, victim, seal_link=True, seal_bell=True, wake=None):
        self.v = victim
        self.my_qpn = victim.qpn - 1
        victim.say(f"dest {self.my_qpn}")
        assert victim.line() == "ready"
        self.fd = sealed_memfd(LINK_SIZE, seal_link)
        self.mem = mmap.mmap(self.fd, LINK_SIZE)
        self.bell = bell = sealed_memfd(BELL_SIZE, seal_bell)
        if wake is None:  # the doorbell's wake-up socket, as the provider makes it
            self.wake_pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            wake = self.wake_pair[1].fileno()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(b"\0rdmashim/qp/%06x" % victim.qpn)
        hello = struct.pack("<IIII", MAGIC, HELLO, self.my_qpn, victim.qpn)
        socket.send_fds(self.sock, [hello], [self.fd, bell, wake])
        self.sock.settimeout(WAIT)
        try:
            msg, fds, _, _ = socket.recv_fds(self.sock, 64, 4)
        except (socket.timeout, ConnectionResetError):
            msg, fds = b"", []
        self.accepted = len(msg) == 16 and struct.unpack("<IIII", msg)[1] == ACK and len(fds) == 2
        self.victim_bell = fds[1] if self.accepted else None
        self.head = 0
        self.sealed = 0  # slots below this are sealed

    def u64(self, off, value=None):
        if value is None:
            return struct.unpack_from("<Q", self.mem, off)[0]
        struct.pack_into("<Q", self.mem, off, value)

    def put(self, payload=b"", **h):
        """Writes one segment at the next slot (not yet published)."""
        fields = dict(msg_len=0, seg_len=len(payload), flags=FIRST | LAST, opcode=SEND, imm=0, rkey=0,
                      addr=0, cmp=0, swap=0, req_seq=0, xrc_srqn=0, seal=0)
        fields.update(h)
        off = CTL + (self.head % SLOTS) * SLOT
        HDR.pack_into(self.mem, off, *fields.values())
        self.mem[off + HDR.size:off + HDR.size + len(payload)] = payload
        self.head += 1

    def seal(self, seq, lap_seq=None):
        """Seals slot `seq` for sequence number `lap_seq` (its own by default)."""
        off = CTL + (seq % SLOTS) * SLOT + SEAL_AT
        struct.pack_into("<I", self.mem, off, seal_of(seq if lap_seq is None else lap_seq))

    def publish(self, head=None):
        for seq in range(self.sealed, self.head):
            self.seal(seq)
        self.sealed = self.head
        self.u64(HEAD, self.head if head is None else head)
        os.write(self.victim_bell, struct.pack("<Q", 1))  # wake the victim's progress thread

    def victim_closed(self):
        return self.u64(CTL_STRIDE + CLOSED) != 0

    def settle(self):
        """Waits (bounded) until the victim consumed everything or closed its side."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.victim_closed() or self.u64(TAIL) == self.u64(HEAD):
                return
            time.sleep(0.01)


# --- scenarios: each returns a list of failures seen from the attacker's side ---------------

def canary_write(link, v):
    """A two-segment WRITE whose second segment names the canary global as its address."""
    pattern = b"\x5a" * SEG_DATA
    link.put(pattern, opcode=WRITE, flags=FIRST, msg_len=2 * SEG_DATA, rkey=v.rkey, addr=v.addr)
    link.put(pattern, opcode=WRITE, flags=LAST, msg_len=2 * SEG_DATA, rkey=v.rkey, addr=v.canary)
    link.publish()
    link.settle()
    return []


def segment_beyond_message(link, v):
    """A 16-byte WRITE at the end of the region whose only segment carries a full slot."""
    link.put(b"\x5a" * SEG_DATA, opcode=WRITE, msg_len=16, rkey=v.rkey, addr=v.addr + v.len - 16)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim did not break the link"]


def outside_region(link, v):
    """A WRITE with the right rkey at an address outside the region: NAK, responder to ERR."""
    link.put(b"\x5a" * 64, opcode=WRITE, msg_len=64, rkey=v.rkey, addr=v.canary)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim did not leave RTS"]


def long_read_response(link, v):
    """The victim READs 16 bytes from us; the response claims a whole slot."""
    v.say("read 16")
    assert v.line() == "posted"
    deadline = time.monotonic() + WAIT
    while link.u64(CTL_STRIDE + HEAD) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    req = HDR.unpack_from(link.mem, CTL + SLOTS * SLOT)
    if req[3] != READ_REQ:
        return [f"no READ request from the victim (header {req})"]
    link.put(b"\x5a" * SEG_DATA, opcode=READ_RESP, msg_len=SEG_DATA, req_seq=1)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim took a response longer than its request"]


def msg_len_changes(link, v):
    """A SEND that fits the 64-byte receive at its first segment, then grows."""
    link.put(b"\x5a" * SEG_DATA, opcode=SEND, flags=FIRST, msg_len=64)
    link.put(b"\x5a" * SEG_DATA, opcode=SEND, flags=LAST, msg_len=2 * SEG_DATA)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim did not break the link"]


def send_beyond_receive(link, v):
    """A SEND longer than the posted receive: an error completion, nothing written past it."""
    link.put(b"\x5a" * SEG_DATA, opcode=SEND, flags=FIRST, msg_len=SEG_DATA + 100)
    link.put(b"\x5a" * 100, opcode=SEND, flags=LAST, msg_len=SEG_DATA + 100)
    link.publish()
    link.settle()
    return []


def wrong_rkey(link, v):
    """A WRITE with a guessed rkey: NAK, and the responder QP leaves RTS (no second guess)."""
    link.put(b"\x5a" * 16, opcode=WRITE, msg_len=16, rkey=v.rkey ^ 0x5A5A, addr=v.addr)
    link.publish()
    link.settle()
    nak = HDR.unpack_from(link.mem, CTL + SLOTS * SLOT)
    errors = []
    if link.u64(CTL_STRIDE + HEAD) < 1 or nak[3] != NAK or nak[4] != WC_REM_ACCESS_ERR:
        errors.append(f"no REM_ACCESS_ERR NAK (header {nak})")
    link.put(b"\x5a" * 16, opcode=WRITE, msg_len=16, rkey=v.rkey ^ 0x1234, addr=v.addr)
    link.publish()
    link.settle()
    if link.u64(TAIL) != 0:
        errors.append("the responder kept taking requests after an access error")
    return errors


def seal_out_of_turn(link, v):
    """Slot 1 sealed for its next lap, slot 0 unsealed, and a head published 2^40 slots ahead:
    the victim takes none of it (it reads no head, and waits for slot 0's seal), without
    hanging; then slot 0 sealed in turn is taken, and slot 1 still is not."""
    link.put(b"early", opcode=SEND, msg_len=5)
    link.put(b"lapped", opcode=SEND, msg_len=6)
    link.seal(1, lap_seq=1 + SLOTS)
    link.u64(HEAD, 1 << 40)
    os.write(link.victim_bell, struct.pack("<Q", 1))
    time.sleep(0.3)
    errors = []
    if link.u64(TAIL) != 0 or link.victim_closed():
        errors.append(f"victim took unsealed slots (tail {link.u64(TAIL)})")
    link.seal(0)
    link.u64(HEAD, 2)
    os.write(link.victim_bell, struct.pack("<Q", 1))
    deadline = time.monotonic() + WAIT
    while link.u64(TAIL) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    if link.u64(TAIL) != 1:
        errors.append(f"victim's tail is {link.u64(TAIL)} after one segment sealed in turn")
    if link.victim_closed():
        errors.append("victim broke the link over segments it never took")
    return errors


def garbage(link, v):
    """Unknown opcodes and flags, a response nobody asked for, a NAK with a made-up status."""
    link.put(b"junk", opcode=99, flags=0xFFFF)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim took an unknown opcode"]


def ghost_responses(link, v):
    link.put(b"\x5a" * SEG_DATA, opcode=READ_RESP, msg_len=SEG_DATA, req_seq=1)
    link.put(opcode=NAK, req_seq=1, imm=0xDEAD)
    link.publish()
    link.settle()
    return [] if link.victim_closed() else ["victim took a response to nothing"]


def unsealed_segment(v, **seal):
    """An unsealed memfd could be shrunk under the victim's mapping (SIGBUS): refused."""
    link = Link(v, **seal)
    if not link.accepted:
        return []
    # Accepted: show what that means, shrink the segment and wake the victim.
    os.ftruncate(link.bell if seal.get("seal_link", True) else link.fd, 0)
    os.write(link.victim_bell, struct.pack("<Q", 1))
    time.sleep(0.2)
    return ["an unsealed segment was accepted"]


def pipe_doorbell(v):
    """A full, blocking pipe as the doorbell: a victim writing to it would block forever."""
    r, w = os.pipe()
    link = Link(v, wake=w)
    if not link.accepted:
        return []
    # Accepted: fill the pipe, say we sleep, and send a message the victim acknowledges.
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    bell = mmap.mmap(link.bell, BELL_SIZE)
    struct.pack_into("<I", bell, 0, 1)
    link.put(b"hello", opcode=SEND, msg_len=5)
    link.publish()
    link.settle()
    return ["a pipe was accepted as a doorbell"]


def eventfd_doorbell(v):
    """An eventfd as the doorbell: the peer shares its file description, so it can clear
    O_NONBLOCK and fill the counter after the handshake; a write would then block. Refused."""
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    link = Link(v, wake=efd)
    if not link.accepted:
        return []
    os.set_blocking(efd, True)
    os.eventfd_write(efd, 0xFFFFFFFFFFFFFFFE)  # the counter is full: a write waits
    bell = mmap.mmap(link.bell, BELL_SIZE)
    struct.pack_into("<I", bell, 0, 1)
    link.put(b"hello", opcode=SEND, msg_len=5)
    link.publish()
    link.settle()
    return ["an eventfd was accepted as a doorbell"]


def full_blocking_doorbell(link, v):
    """The doorbell socket made blocking (its file description is shared) and its queue full,
    then we say we sleep and send a message the victim acknowledges: ringing us must not wait."""
    ours, given = link.wake_pair  # the victim sends to `given`: datagrams queue at `ours`
    given.setblocking(False)
    try:
        while True:
            given.send(b"x")  # fills the queue at `ours` (nobody reads it)
    except BlockingIOError:
        pass
    given.setblocking(True)
    bell = mmap.mmap(link.bell, BELL_SIZE)
    struct.pack_into("<I", bell, 0, 1)
    link.put(b"hello", opcode=SEND, msg_len=5)
    link.publish()
    link.settle()
    return []


def sealed_cannot_shrink():
    fd = sealed_memfd(LINK_SIZE)
    try:
        os.ftruncate(fd, 0)
        return ["a sealed memfd could be shrunk"]
    except PermissionError:
        return []
    finally:
        os.close(fd)


RING = {f.__name__: f for f in [canary_write, segment_beyond_message, outside_region,
                                long_read_response, msg_len_changes,
                                send_beyond_receive, wrong_rkey, seal_out_of_turn, garbage,
                                ghost_responses, full_blocking_doorbell]}
EXPECT_ERR = {"segment_beyond_message", "outside_region", "long_read_response", "msg_len_changes",
              "send_beyond_receive", "wrong_rkey", "garbage", "ghost_responses"}
SETUP = {"unsealed_link": dict(seal_link=False), "unsealed_bell": dict(seal_bell=False)}
DOORBELLS = {f.__name__: f for f in [pipe_doorbell, eventfd_doorbell]}


def run(exe, name):
    v = Victim(exe)
    try:
        if name in DOORBELLS:
            errors = DOORBELLS[name](v)
        elif name in SETUP:
            errors = unsealed_segment(v, **SETUP[name]) + sealed_cannot_shrink()
        else:
            link = Link(v)
            if not link.accepted:
                v.p.kill()
                return ["handshake refused"]
            errors = RING[name](link, v)
        report = v.finish()
    except Exception as e:  # the victim died or stopped answering
        v.p.kill()
        return errors_of(e)
    if "error" in report:
        return errors + [report["error"]]
    if report["canaries"] != "ok":
        errors.append("canaries overwritten")
    if report["honest"] != "ok":
        errors.append("an honest pair no longer moves data")
    if report["exit"] != 0:
        errors.append(f"victim exited {report['exit']}")
    if name in EXPECT_ERR and int(report["state"]) != QPS_ERR:
        errors.append(f"victim QP in state {report['state']}, not ERR")
    if name == "wrong_rkey" and "QP_ACCESS_ERR" not in report["events"]:
        errors.append(f"no IBV_EVENT_QP_ACCESS_ERR (events {report['events']})")
    print(f"  victim: {report}")
    return errors


def errors_of(e):
    return [f"{type(e).__name__}: {e}"]


def main():
    exe, names = sys.argv[1], sys.argv[2:] or list(RING) + list(SETUP) + list(DOORBELLS)
    failed = 0
    for name in names:
        errors = run(exe, name)
        print(f"{'ok' if not errors else 'FAIL'} {name}" + "".join(f"\n  - {e}" for e in errors))
        failed += bool(errors)
    print(f"{len(names) - failed}/{len(names)} scenarios passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
