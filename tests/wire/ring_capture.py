#!/usr/bin/env python3
"""RDMASHIM_PCAP of the same-host path (issue 12): unmodified program pairs on one host, both
writing one capture, whose frames stand for the requests the rings (and the direct path)
carried and the responses that completed them. Checks, for each pair:
  * tshark decodes every frame as InfiniBand RoCEv2, none malformed, and the opcodes are the
    ones the program's requests and their responses stand for (and nothing else): ACKs for
    RC SENDs and WRITEs, READ responses, atomic ACKs; none for UC and UD;
  * scapy's RoCE layer computes the ICRC every frame carries (and not a changed one);
  * the request PSNs towards each QP run on by one, packet after packet; each response names
    a PSN its QP sent a request on, later than the last one answered, and its AETH's MSN counts
    the messages answered, one by one.

  ring_capture.py --build-dir BUILD
Exit 0 all pass, 1 a failure, 77 tshark, scapy or the programs missing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import sanitizer_env  # noqa: E402
import check_roce  # noqa: E402  (re-executes under /usr/bin/python3 when scapy is missing)
import wire_cross  # noqa: E402

TIMEOUT = 60
RC, UC, UD = 0x00, 0x20, 0x60
SEND_FIRST, SEND_LAST, SEND_ONLY = 0x00, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0a
READ_REQUEST, CMP_SWAP, FETCH_ADD = 0x0c, 0x13, 0x14
READ_RESPONSE_ONLY, ACK, ATOMIC_ACK = 0x10, 0x11, 0x12
RESPONSES = {0x0d, 0x0e, 0x0f, READ_RESPONSE_ONLY, ACK, ATOMIC_ACK}

# (name, server argv, client argv (host last), opcodes every frame must be among, opcodes that
# must all occur)
PAIRS = [
    ("ibv_rc_pingpong 5000 B", ["ibv_rc_pingpong", "-g", "0", "-n", "20", "-s", "5000"], None,
     {SEND_FIRST, SEND_LAST, ACK}, {SEND_FIRST, SEND_LAST, ACK}),
    ("ibv_uc_pingpong 64 B", ["ibv_uc_pingpong", "-g", "0", "-n", "20", "-s", "64"], None,
     {UC | SEND_ONLY}, {UC | SEND_ONLY}),
    ("ibv_ud_pingpong 64 B", ["ibv_ud_pingpong", "-g", "0", "-n", "20", "-s", "64"], None,
     {UD | SEND_ONLY}, {UD | SEND_ONLY}),
    ("ib_write_bw 10000 B", ["ib_write_bw", "-n", "20", "-s", "10000"], None,
     {WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, ACK}, {WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, ACK}),
    ("ib_write_lat 64 B", ["ib_write_lat", "-n", "20", "-s", "64"], None,
     {WRITE_ONLY, ACK}, {WRITE_ONLY, ACK}),
    ("ib_read_lat 64 B", ["ib_read_lat", "-n", "20", "-s", "64"], None,
     {READ_REQUEST, READ_RESPONSE_ONLY}, {READ_REQUEST, READ_RESPONSE_ONLY}),
    ("ib_atomic_lat (fetch and add)", ["ib_atomic_lat", "-n", "20", "-A", "FETCH_AND_ADD"], None,
     {FETCH_ADD, ATOMIC_ACK}, {FETCH_ADD, ATOMIC_ACK}),
    ("ib_atomic_lat (compare and swap)", ["ib_atomic_lat", "-n", "20", "-A", "CMP_AND_SWAP"],
     None, {CMP_SWAP, ATOMIC_ACK}, {CMP_SWAP, ATOMIC_ACK}),
    # Through rdma_cm: the CM's messages (a unix connection in one namespace) as the MADs they
    # stand for, UD SEND Only to QP1, beside the SENDs and their ACKs.
    ("rdma_server/rdma_client", ["rdma_server"], ["rdma_client", "-s", "127.0.0.1"],
     {UD | SEND_ONLY, SEND_ONLY, ACK}, {UD | SEND_ONLY, SEND_ONLY, ACK}),
]
# The CM messages the rdma_cm pair must show, and their comm ids' agreement.
CM_EXCHANGE = ["REQ", "REP", "RTU", "DREQ", "DREP"]


def cm_problems(pcap):
    """The CM exchange decoded by tshark: REQ, REP, RTU, DREQ, DREP; the RTU names the comm id
    the REP answered, and each DREQ/DREP names the connection's two comm ids."""
    fields = ["infiniband.mad.attributeid", "infiniband.cm.rep.remotecommid",
              "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
              "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
              "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"]
    out = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t",
                          "-E", "occurrence=f"] + sum([["-e", f] for f in fields], []),
                         capture_output=True, text=True, timeout=60)
    names = {0x10: "REQ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ", 0x16: "DREP", 0x12: "REJ"}
    seen, rep_r, rtu, pairs, problems = [], None, None, [], []
    for line in out.stdout.splitlines():
        cols = (line.split("\t") + [""] * 8)[:8]
        if not cols[0]:
            continue
        seen.append(names.get(int(cols[0], 0), cols[0]))
        v = [int(c, 0) if c else None for c in cols[1:]]
        rep_r = rep_r if v[0] is None else v[0]
        rtu = rtu if v[1] is None else (v[1], v[2])
        pairs += [p for p in ((v[3], v[4]), (v[5], v[6])) if p[0] is not None]
    missing = [m for m in CM_EXCHANGE if m not in seen]
    if missing:
        problems.append(f"CM messages {missing} missing (seen {seen}): {out.stderr.strip()}")
    elif rtu is None or rep_r != rtu[0] or not rtu[1]:
        problems.append(f"the RTU {rtu} does not answer the REP's comm id {rep_r}")
    elif any(set(p) != set(rtu) for p in pairs):
        problems.append(f"DREQ/DREP comm ids {pairs} are not the connection's {rtu}")
    return problems


def psn_problems(pcap):
    """Requests towards each connected destination QP run on by one (UD has no sequence);
    responses towards a QP name PSNs of requests already sent, in order, with the AETH's MSN
    counting the messages answered."""
    out = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t",
                          "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.aeth.msn"],
                         capture_output=True, text=True, timeout=60)
    last, sent, answered, msn, problems = {}, set(), {}, {}, []
    for i, line in enumerate(out.stdout.splitlines(), 1):
        qp, psn, opcode, m = (line.split("\t") + ["", "", ""])[:4]
        if not qp or not psn or not opcode:
            problems.append(f"frame {i}: no BTH destination QP, PSN or opcode")
            continue
        opcode = int(opcode, 0)
        if opcode & 0xe0 == UD:
            continue
        psn = int(psn, 0)
        if opcode not in RESPONSES:
            if qp in last and psn != (last[qp] + 1) & 0xffffff:
                problems.append(f"frame {i}: PSN {psn} towards QP {qp} after {last[qp]}")
            last[qp] = psn
            sent.add(psn)
            continue
        if psn not in sent:
            problems.append(f"frame {i}: a response on PSN {psn}, which no request had")
        if qp in answered and psn <= answered[qp]:
            problems.append(f"frame {i}: a response on PSN {psn} towards QP {qp} after {answered[qp]}")
        answered[qp] = psn
        if not m:
            problems.append(f"frame {i}: a response without an AETH")
            continue
        m = int(m, 0)
        if m != msn.get(qp, 0) + 1:
            problems.append(f"frame {i}: MSN {m} towards QP {qp} after {msn.get(qp, 0)}")
        msn[qp] = m
    return problems


def run_pair(build, tmp, n, pair):
    name, server, client, allowed, required = pair
    pcap = os.path.join(tmp, f"ring{n}.pcap")
    # A sanitizer build's library needs its runtime first in the preload list.
    preload = sanitizer_env.runtime_preload(build) + [os.path.join(build, "librdmashim.so")]
    env = dict(os.environ, LD_PRELOAD=" ".join(preload),
               RDMASHIM_PROVIDER="soft", RDMASHIM_PCAP=pcap)
    if len(preload) > 1:
        # The programs' own leaks are not ours (as the acceptance pairs tell them apart).
        supp = os.path.join(HERE, "..", "acceptance", "lsan-programs.supp")
        env["LSAN_OPTIONS"] = f"suppressions={supp}:malloc_context_size=2:print_suppressions=0"
    port = str(21000 + n)
    extra = ["-p", port]  # ibverbs' examples and perftest name their TCP port alike
    srv = subprocess.Popen(server + extra, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    try:
        argv = client + extra if client else server + extra + ["127.0.0.1"]
        c = subprocess.run(argv, env=env,
                           capture_output=True, text=True, timeout=TIMEOUT)
        cout, crc = c.stdout + c.stderr, c.returncode
    except subprocess.TimeoutExpired:
        cout, crc = "(timeout)", "timeout"
    try:
        sout, _ = srv.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
    problems = []
    if crc != 0 or srv.returncode != 0:
        problems.append(f"the pair failed: server {srv.returncode}, client {crc}\n{sout}\n{cout}")
    elif not os.path.exists(pcap):
        problems.append("no capture was written")
    else:
        rows, decode = wire_cross.tshark_rows(pcap)
        problems += decode[:10]
        ops = {op for _, op, _, _ in rows}
        if not rows:
            problems.append("the capture holds no frame")
        if ops - allowed:
            problems.append(f"opcodes {sorted(ops - allowed)} beyond {sorted(allowed)}")
        if required - ops:
            problems.append(f"opcodes {sorted(required - ops)} missing (seen {sorted(ops)})")
        checked, icrc = wire_cross.scapy_icrc(pcap)
        problems += icrc[:10]
        if checked != len(rows):
            problems.append(f"scapy checked {checked} of {len(rows)} frames")
        problems += psn_problems(pcap)[:10]
        if UD | SEND_ONLY in required and client:
            problems += cm_problems(pcap)
    ok = not problems
    detail = "; ".join(problems) if problems else f"{len(rows)} frames, opcodes {sorted(ops)}"
    print(f"{'PASS' if ok else 'FAIL'}: {name}: {detail}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    missing = [p for p in ("tshark", "ibv_rc_pingpong", "ib_write_bw") if not shutil.which(p)]
    if missing or not check_roce.have_scapy():
        print(f"SKIP: missing {' '.join(missing) or 'scapy (python3-scapy)'}")
        return check_roce.SKIP
    build = os.path.abspath(a.build_dir)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for n, pair in enumerate(PAIRS):
            ok &= run_pair(build, tmp, n, pair)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
