"""The part of librdmacm/libibverbs the UD example uses, for Python ctypes.

`rdma_post_ud_send`, `rdma_post_recv`, `rdma_get_recv_comp` and the rest of `<rdma/rdma_verbs.h>`
are `static inline` in rdma-core, so nothing but C can call them there; rdmashim exports them
as real symbols, which is what lets ctypes call them here.

The structures below mirror rdma-core's headers. `check_layout.py` compares every size and
offset used here with the C compiler's view of the installed headers (the test runs it first),
so a mismatch fails loudly instead of corrupting memory.
"""

import ctypes
import os
from ctypes import (POINTER, Structure, Union, c_char, c_char_p, c_int, c_size_t, c_uint8, c_uint16,
                    c_uint32, c_uint64, c_void_p)

# enum values from <rdma/rdma_cma.h> and <infiniband/verbs.h>
RAI_PASSIVE = 0x1
RAI_NUMERICHOST = 0x2
RDMA_PS_UDP = 0x0111
IBV_QPT_UD = 4
IBV_SEND_SIGNALED = 2
IBV_WC_SUCCESS = 0
GRH_LEN = 40  # a UD receive buffer starts with room for the GRH
PORT_NUM = 1


class sockaddr_storage(Structure):
    _fields_ = [("ss_family", c_uint16), ("_data", c_char * 118), ("_align", c_uint64)]


class rdma_addrinfo(Structure):
    pass


rdma_addrinfo._fields_ = [
    ("ai_flags", c_int), ("ai_family", c_int), ("ai_qp_type", c_int), ("ai_port_space", c_int),
    ("ai_src_len", c_uint32), ("ai_dst_len", c_uint32),
    ("ai_src_addr", c_void_p), ("ai_dst_addr", c_void_p),
    ("ai_src_canonname", c_char_p), ("ai_dst_canonname", c_char_p),
    ("ai_route_len", c_size_t), ("ai_route", c_void_p),
    ("ai_connect_len", c_size_t), ("ai_connect", c_void_p),
    ("ai_next", POINTER(rdma_addrinfo)),
]


class ibv_qp_cap(Structure):
    _fields_ = [("max_send_wr", c_uint32), ("max_recv_wr", c_uint32), ("max_send_sge", c_uint32),
                ("max_recv_sge", c_uint32), ("max_inline_data", c_uint32)]


class ibv_qp_init_attr(Structure):
    _fields_ = [("qp_context", c_void_p), ("send_cq", c_void_p), ("recv_cq", c_void_p),
                ("srq", c_void_p), ("cap", ibv_qp_cap), ("qp_type", c_int), ("sq_sig_all", c_int)]


class ibv_gid(Union):
    _fields_ = [("raw", c_uint8 * 16), ("_align", c_uint64 * 2)]


class ibv_global_route(Structure):
    _fields_ = [("dgid", ibv_gid), ("flow_label", c_uint32), ("sgid_index", c_uint8),
                ("hop_limit", c_uint8), ("traffic_class", c_uint8)]


class ibv_ah_attr(Structure):
    _fields_ = [("grh", ibv_global_route), ("dlid", c_uint16), ("sl", c_uint8),
                ("src_path_bits", c_uint8), ("static_rate", c_uint8), ("is_global", c_uint8),
                ("port_num", c_uint8)]


class rdma_ud_param(Structure):
    _fields_ = [("private_data", c_void_p), ("private_data_len", c_uint8),
                ("ah_attr", ibv_ah_attr), ("qp_num", c_uint32), ("qkey", c_uint32)]


class rdma_conn_param(Structure):
    _fields_ = [("private_data", c_void_p), ("private_data_len", c_uint8),
                ("responder_resources", c_uint8), ("initiator_depth", c_uint8),
                ("flow_control", c_uint8), ("retry_count", c_uint8), ("rnr_retry_count", c_uint8),
                ("srq", c_uint8), ("qp_num", c_uint32)]


class _event_param(Union):
    _fields_ = [("conn", rdma_conn_param), ("ud", rdma_ud_param)]


class rdma_cm_event(Structure):
    _fields_ = [("id", c_void_p), ("listen_id", c_void_p), ("event", c_int), ("status", c_int),
                ("param", _event_param)]


class rdma_ib_addr(Structure):
    _fields_ = [("sgid", ibv_gid), ("dgid", ibv_gid), ("pkey", c_uint16)]


class rdma_addr(Structure):
    _fields_ = [("src", sockaddr_storage), ("dst", sockaddr_storage), ("ibaddr", rdma_ib_addr)]


class rdma_route(Structure):
    _fields_ = [("addr", rdma_addr), ("path_rec", c_void_p), ("num_paths", c_int)]


class rdma_cm_id(Structure):
    _fields_ = [("verbs", c_void_p), ("channel", c_void_p), ("context", c_void_p), ("qp", c_void_p),
                ("route", rdma_route), ("ps", c_int), ("port_num", c_uint8),
                ("event", POINTER(rdma_cm_event)), ("send_cq_channel", c_void_p),
                ("send_cq", c_void_p), ("recv_cq_channel", c_void_p), ("recv_cq", c_void_p),
                ("srq", c_void_p), ("pd", c_void_p), ("qp_type", c_int)]


class ibv_mr(Structure):
    _fields_ = [("context", c_void_p), ("pd", c_void_p), ("addr", c_void_p), ("length", c_size_t),
                ("handle", c_uint32), ("lkey", c_uint32), ("rkey", c_uint32)]


class ibv_wc(Structure):
    _fields_ = [("wr_id", c_uint64), ("status", c_int), ("opcode", c_int), ("vendor_err", c_uint32),
                ("byte_len", c_uint32), ("imm_data", c_uint32), ("qp_num", c_uint32),
                ("src_qp", c_uint32), ("wc_flags", c_uint32), ("pkey_index", c_uint16),
                ("slid", c_uint16), ("sl", c_uint8), ("dlid_path_bits", c_uint8)]


# What check_layout.py compares with the C compiler: structure -> fields whose offsets matter.
LAYOUTS = {
    "rdma_addrinfo": rdma_addrinfo, "ibv_qp_init_attr": ibv_qp_init_attr,
    "ibv_ah_attr": ibv_ah_attr, "rdma_ud_param": rdma_ud_param, "rdma_conn_param": rdma_conn_param,
    "rdma_cm_event": rdma_cm_event, "rdma_cm_id": rdma_cm_id, "ibv_mr": ibv_mr, "ibv_wc": ibv_wc,
}

ID = POINTER(rdma_cm_id)


def load(path=None):
    """librdmashim (RDMASHIM_LIB, else the build tree's), with the prototypes used here."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = path or os.environ.get("RDMASHIM_LIB") or os.path.join(here, "..", "..", "build",
                                                                  "librdmashim.so")
    lib = ctypes.CDLL(path, use_errno=True)
    protos = {
        "rdma_getaddrinfo": (c_int, [c_char_p, c_char_p, POINTER(rdma_addrinfo),
                                     POINTER(POINTER(rdma_addrinfo))]),
        "rdma_freeaddrinfo": (None, [POINTER(rdma_addrinfo)]),
        "rdma_create_ep": (c_int, [POINTER(ID), POINTER(rdma_addrinfo), c_void_p,
                                   POINTER(ibv_qp_init_attr)]),
        "rdma_destroy_ep": (None, [ID]),
        "rdma_listen": (c_int, [ID, c_int]),
        "rdma_get_request": (c_int, [ID, POINTER(ID)]),
        "rdma_accept": (c_int, [ID, c_void_p]),
        "rdma_connect": (c_int, [ID, c_void_p]),
        "rdma_reg_msgs": (POINTER(ibv_mr), [ID, c_void_p, c_size_t]),
        "rdma_dereg_mr": (c_int, [POINTER(ibv_mr)]),
        "rdma_post_recv": (c_int, [ID, c_void_p, c_void_p, c_size_t, POINTER(ibv_mr)]),
        "rdma_post_ud_send": (c_int, [ID, c_void_p, c_void_p, c_size_t, POINTER(ibv_mr), c_int,
                                      c_void_p, c_uint32]),
        "rdma_get_recv_comp": (c_int, [ID, POINTER(ibv_wc)]),
        "rdma_get_send_comp": (c_int, [ID, POINTER(ibv_wc)]),
        "ibv_create_ah": (c_void_p, [c_void_p, POINTER(ibv_ah_attr)]),
        "ibv_create_ah_from_wc": (c_void_p, [c_void_p, POINTER(ibv_wc), c_void_p, c_uint8]),
        "ibv_destroy_ah": (c_int, [c_void_p]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


class RdmaError(OSError):
    pass


def check(ok, what):
    """Raises with errno (librdmacm's convention) when `ok` is false."""
    if not ok:
        e = ctypes.get_errno()
        raise RdmaError(e, f"{what}: {os.strerror(e)}")
