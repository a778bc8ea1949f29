#!/usr/bin/env python3
"""A UD exchange driven from Python through ctypes, on rdmashim (any provider).

    ud_exchange.py server PORT [COUNT]        answers COUNT datagrams (default 10), then exits
    ud_exchange.py client HOST PORT [COUNT]   sends COUNT datagrams, checks each echo
    ud_exchange.py self-test [PORT]           runs both on 127.0.0.1

The client resolves the server's UD QP through rdma_cm (SIDR: `rdma_connect` on a UD endpoint
returns the server's QP number, qkey and address vector), then sends with `rdma_post_ud_send`;
the server receives with `rdma_post_recv`/`rdma_get_recv_comp` (the buffer starts with the
40-byte GRH), and answers to the sender named by the completion (`ibv_create_ah_from_wc`).
Exit status 0 when every echo came back intact.
"""

import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdma  # noqa: E402
from rdma import ID, check  # noqa: E402

MSG = 64
BUF = rdma.GRH_LEN + MSG


def endpoint(lib, host, port, passive):
    hints = rdma.rdma_addrinfo()
    hints.ai_flags = rdma.RAI_PASSIVE if passive else rdma.RAI_NUMERICHOST
    hints.ai_port_space = rdma.RDMA_PS_UDP
    hints.ai_qp_type = rdma.IBV_QPT_UD
    res = ctypes.POINTER(rdma.rdma_addrinfo)()
    r = lib.rdma_getaddrinfo(host, str(port).encode(), ctypes.byref(hints), ctypes.byref(res))
    check(r == 0, f"rdma_getaddrinfo: {r}")
    attr = rdma.ibv_qp_init_attr()
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1
    attr.qp_type = rdma.IBV_QPT_UD
    attr.sq_sig_all = 1
    ep = ID()
    r = lib.rdma_create_ep(ctypes.byref(ep), res, None, ctypes.byref(attr))
    lib.rdma_freeaddrinfo(res)
    check(r == 0, "rdma_create_ep")
    return ep


def post_recv(lib, ep, buf, mr):
    check(lib.rdma_post_recv(ep, None, buf, BUF, mr) == 0, "rdma_post_recv")


def recv(lib, ep):
    wc = rdma.ibv_wc()
    check(lib.rdma_get_recv_comp(ep, ctypes.byref(wc)) > 0, "rdma_get_recv_comp")
    if wc.status != rdma.IBV_WC_SUCCESS:
        raise rdma.RdmaError(0, f"receive completion status {wc.status}")
    return wc


def send(lib, ep, buf, mr, ah, qpn):
    # The payload follows the GRH room of our own buffer layout.
    data = ctypes.c_void_p(ctypes.addressof(buf) + rdma.GRH_LEN)
    check(lib.rdma_post_ud_send(ep, None, data, MSG, mr, rdma.IBV_SEND_SIGNALED, ah, qpn) == 0,
          "rdma_post_ud_send")
    wc = rdma.ibv_wc()
    check(lib.rdma_get_send_comp(ep, ctypes.byref(wc)) > 0, "rdma_get_send_comp")
    if wc.status != rdma.IBV_WC_SUCCESS:
        raise rdma.RdmaError(0, f"send completion status {wc.status}")


def server(lib, port, count):
    listen = endpoint(lib, None, port, passive=True)
    check(lib.rdma_listen(listen, 1) == 0, "rdma_listen")
    print(f"server: listening on {port}", flush=True)
    ep = ID()
    check(lib.rdma_get_request(listen, ctypes.byref(ep)) == 0, "rdma_get_request")
    rx, tx = ctypes.create_string_buffer(BUF), ctypes.create_string_buffer(BUF)
    rx_mr, tx_mr = lib.rdma_reg_msgs(ep, rx, BUF), lib.rdma_reg_msgs(ep, tx, BUF)
    check(bool(rx_mr) and bool(tx_mr), "rdma_reg_msgs")
    post_recv(lib, ep, rx, rx_mr)
    check(lib.rdma_accept(ep, None) == 0, "rdma_accept")
    for _ in range(count):
        wc = recv(lib, ep)
        payload = rx.raw[rdma.GRH_LEN:rdma.GRH_LEN + wc.byte_len - rdma.GRH_LEN]
        ah = lib.ibv_create_ah_from_wc(ep.contents.pd, ctypes.byref(wc), rx, rdma.PORT_NUM)
        check(bool(ah), "ibv_create_ah_from_wc")
        ctypes.memmove(ctypes.addressof(tx) + rdma.GRH_LEN, payload.upper(), len(payload))
        post_recv(lib, ep, rx, rx_mr)
        send(lib, ep, tx, tx_mr, ah, wc.src_qp)
        lib.ibv_destroy_ah(ah)
    print(f"server: echoed {count} datagrams", flush=True)
    lib.rdma_dereg_mr(rx_mr)
    lib.rdma_dereg_mr(tx_mr)
    lib.rdma_destroy_ep(ep)
    lib.rdma_destroy_ep(listen)


def client(lib, host, port, count):
    ep = endpoint(lib, host.encode(), port, passive=False)
    rx, tx = ctypes.create_string_buffer(BUF), ctypes.create_string_buffer(BUF)
    rx_mr, tx_mr = lib.rdma_reg_msgs(ep, rx, BUF), lib.rdma_reg_msgs(ep, tx, BUF)
    check(bool(rx_mr) and bool(tx_mr), "rdma_reg_msgs")
    check(lib.rdma_connect(ep, None) == 0, "rdma_connect (SIDR)")
    ud = ep.contents.event.contents.param.ud
    ah = lib.ibv_create_ah(ep.contents.pd, ctypes.byref(ud.ah_attr))
    check(bool(ah), "ibv_create_ah")
    for i in range(count):
        msg = f"datagram {i} from python".encode().ljust(MSG, b".")
        ctypes.memmove(ctypes.addressof(tx) + rdma.GRH_LEN, msg, MSG)
        post_recv(lib, ep, rx, rx_mr)
        send(lib, ep, tx, tx_mr, ah, ud.qp_num)
        wc = recv(lib, ep)
        got = rx.raw[rdma.GRH_LEN:rdma.GRH_LEN + MSG]
        if wc.byte_len != rdma.GRH_LEN + MSG or got != msg.upper():
            print(f"client: echo {i} wrong: {wc.byte_len} bytes, {got!r}", flush=True)
            return 1
    print(f"client: {count} echoes intact (server QP {ud.qp_num:#x}, qkey {ud.qkey:#x})",
          flush=True)
    lib.ibv_destroy_ah(ah)
    lib.rdma_dereg_mr(rx_mr)
    lib.rdma_dereg_mr(tx_mr)
    lib.rdma_destroy_ep(ep)
    return 0


def self_test(port):
    me = os.path.abspath(__file__)
    srv = subprocess.Popen([sys.executable, me, "server", str(port)], stdout=subprocess.PIPE,
                           text=True)
    try:
        line = srv.stdout.readline()  # "listening": the listener exists
        if "listening" not in line:
            print(f"self-test: server did not start: {line!r}")
            return 1
        cli = subprocess.run([sys.executable, me, "client", "127.0.0.1", str(port)], timeout=60)
        rest, _ = srv.communicate(timeout=30)
        sys.stdout.write(line + rest)
        return 0 if cli.returncode == 0 and srv.returncode == 0 else 1
    finally:
        if srv.poll() is None:
            srv.kill()


def main(argv):
    if len(argv) >= 2 and argv[1] == "self-test":
        return self_test(int(argv[2]) if len(argv) > 2 else 7650)
    lib = rdma.load()
    try:
        if len(argv) >= 3 and argv[1] == "server":
            server(lib, int(argv[2]), int(argv[3]) if len(argv) > 3 else 10)
            return 0
        if len(argv) >= 4 and argv[1] == "client":
            return client(lib, argv[2], int(argv[3]), int(argv[4]) if len(argv) > 4 else 10)
    except rdma.RdmaError as e:
        print(f"{argv[1]}: {e}", file=sys.stderr, flush=True)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
