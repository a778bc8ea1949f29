/* Passthrough (RDMASHIM_PROVIDER=native or auto, issue 12): built against rdma-core's headers and
 * libraries, run under rdmashim (preload or drop-in) with RDMASHIM_NATIVE_LIBDIR pointing at a
 * second copy of rdmashim's own libibverbs.so.1, which stands in for the system's rdma-core.
 *
 *   native_forward STAND_IN native   every call must reach the stand-in's objects
 *   native_forward STAND_IN soft     the stand-in must not be involved (auto without devices)
 *   native_forward STAND_IN both     two devices (RDMASHIM_PROVIDER=both): the stand-in's, then
 *                                    the front's own, each serving its own objects
 *
 * With "native" it checks that the objects the program gets are the stand-in's: the ops the
 * program's inlined ibv_post_send/ibv_poll_cq jump through lie in the stand-in's copy (a
 * mapping other than the one the program's exported calls bound to), so the data path takes no
 * hop through the forwarding library. Then it moves data on them: an RC loopback pair in one
 * context with SENDs through the inlined calls and through the exported real symbols
 * (ibv_post_send, ibv_poll_cq, ... as FFI callers reach them), a completion event waited for with
 * poll() on the channel fd, the extended API (ibv_query_device_ex, ibv_create_qp_ex, a SEND
 * through ibv_wr_* inlined and exported, ibv_create_cq_ex and ibv_start_poll), and an rdma_cm
 * id on a real event channel fd. With "both" it does all of that on each device in turn, in
 * one process (the stand-in's objects, then the front's), and the CM's id is the front's.
 * Exit 0 passes; the first failed check says where and exits 1.
 *
 * With RDMASHIM_TRACE set (native), the context's data-path ops must instead be the front's
 * traced trampolines (tracing asks for that hop), and the program prints how many data-path
 * calls it made, for the trace to be counted against. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include "rc_pair.h" /* CHECK, to_rts, the ctx and pd the helpers use */

/* The base address of the object that holds `addr`. */
static void *base_of(const void *addr, char *path, size_t len) {
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname)
    return NULL;
  if (path && !realpath(info.dli_fname, path))
    snprintf(path, len, "%s", info.dli_fname);
  return info.dli_fbase;
}

enum { MSG = 64, DEPTH = 8 };

struct side {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  char *buf;
};

typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*post_recv_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);
typedef int (*notify_fn)(struct ibv_cq *, int);
typedef void (*wr_fn)(struct ibv_qp_ex *);
typedef void (*wr_sge_fn)(struct ibv_qp_ex *, uint32_t, uint64_t, uint32_t);
typedef int (*wr_complete_fn)(struct ibv_qp_ex *);
typedef int (*start_poll_fn)(struct ibv_cq_ex *, struct ibv_poll_cq_attr *);

static post_send_fn x_post_send;
static post_recv_fn x_post_recv;
static poll_cq_fn x_poll_cq;
static notify_fn x_notify;

/* Data-path calls made, inlined or exported alike. */
static int n_post_send, n_post_recv, n_poll_cq;
/* The extended API's, likewise. */
static int n_wr_start, n_wr_send, n_wr_set_sge, n_wr_complete, n_start_poll, n_notify,
    n_create_cq_ex;

/* Polls until a completion, for at most 20 s. A completion whose receiver nobody polls waits
 * for the provider's progress thread, which a loaded machine may not run for a while: the
 * bound is a deadline, not a number of polls (2,000,000 polls, about 0.2 s here, once
 * ran out in CI). */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int exported) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = 1;; i++) {
    n_poll_cq++;
    int n = exported ? x_poll_cq(cq, 1, wc) : ibv_poll_cq(cq, 1, wc);
    if (n != 0)
      return n;
    if (i % 1024 == 0) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if (t.tv_sec - t0.tv_sec > 20)
        return 0;
    }
  }
}

/* One SEND of `tag` from a to b, posted and polled either inline (through the objects' own ops,
 * as the headers compile it) or through the library's exported symbols (as FFI callers do). */
static void exchange(struct side *a, struct side *b, int tag, int exported) {
  struct ibv_sge rs = {.addr = (uintptr_t)b->buf, .length = MSG, .lkey = b->mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 100 + tag, .sg_list = &rs, .num_sge = 1}, *bad_r;
  memset(b->buf, 0, MSG);
  n_post_recv++;
  int r = exported ? x_post_recv(b->qp, &rwr, &bad_r) : ibv_post_recv(b->qp, &rwr, &bad_r);
  CHECK(r == 0, "post_recv (exported %d): %d", exported, r);
  memset(a->buf, 'a' + tag, MSG);
  struct ibv_sge ss = {.addr = (uintptr_t)a->buf, .length = MSG, .lkey = a->mr->lkey};
  struct ibv_send_wr swr = {.wr_id = 200 + tag, .sg_list = &ss, .num_sge = 1,
                            .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                     *bad_s;
  n_post_send++;
  r = exported ? x_post_send(a->qp, &swr, &bad_s) : ibv_post_send(a->qp, &swr, &bad_s);
  CHECK(r == 0, "post_send (exported %d): %d", exported, r);
  struct ibv_wc wc;
  CHECK(poll_one(a->cq, &wc, exported) == 1, "send completion (exported %d)", exported);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 200u + tag, "send wc: status %d wr_id %lu",
        wc.status, (unsigned long)wc.wr_id);
  CHECK(poll_one(b->cq, &wc, exported) == 1, "recv completion (exported %d)", exported);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 100u + tag && wc.byte_len == MSG,
        "recv wc: status %d wr_id %lu len %u", wc.status, (unsigned long)wc.wr_id, wc.byte_len);
  for (int i = 0; i < MSG; i++)
    if (b->buf[i] != 'a' + tag) {
      CHECK(0, "byte %d is %d, not %d", i, b->buf[i], 'a' + tag);
      break;
    }
}

/* One SEND from a to b through the extended posting API (ibv_wr_*), inlined (through the
 * ibv_qp_ex's own functions) or through the exported symbols. */
static void exchange_ex(struct side *a, struct side *b, struct ibv_qp_ex *qx, int tag,
                        int exported) {
  static wr_fn x_start, x_send;
  static wr_sge_fn x_set_sge;
  static wr_complete_fn x_complete;
  if (!x_start) {
    x_start = (wr_fn)dlsym(RTLD_DEFAULT, "ibv_wr_start");
    x_send = (wr_fn)dlsym(RTLD_DEFAULT, "ibv_wr_send");
    x_set_sge = (wr_sge_fn)dlsym(RTLD_DEFAULT, "ibv_wr_set_sge");
    x_complete = (wr_complete_fn)dlsym(RTLD_DEFAULT, "ibv_wr_complete");
    CHECK(x_start && x_send && x_set_sge && x_complete, "ibv_wr_* are exported");
  }
  struct ibv_sge rs = {.addr = (uintptr_t)b->buf, .length = MSG, .lkey = b->mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 100 + tag, .sg_list = &rs, .num_sge = 1}, *bad_r;
  memset(b->buf, 0, MSG);
  n_post_recv++;
  CHECK(!ibv_post_recv(b->qp, &rwr, &bad_r), "post_recv");
  memset(a->buf, 'a' + tag, MSG);
  n_wr_start++, n_wr_send++, n_wr_set_sge++, n_wr_complete++;
  int r;
  if (exported) {
    x_start(qx);
    qx->wr_id = 200 + tag;
    qx->wr_flags = IBV_SEND_SIGNALED;
    x_send(qx);
    x_set_sge(qx, a->mr->lkey, (uintptr_t)a->buf, MSG);
    r = x_complete(qx);
  } else {
    ibv_wr_start(qx);
    qx->wr_id = 200 + tag;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, a->mr->lkey, (uintptr_t)a->buf, MSG);
    r = ibv_wr_complete(qx);
  }
  CHECK(r == 0, "ibv_wr_complete (exported %d): %d", exported, r);
  struct ibv_wc wc;
  CHECK(poll_one(a->cq, &wc, 0) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 200u + tag,
        "extended send completion (exported %d)", exported);
  CHECK(poll_one(b->cq, &wc, 0) == 1 && wc.wr_id == 100u + tag && wc.byte_len == MSG &&
            b->buf[0] == 'a' + tag && b->buf[MSG - 1] == 'a' + tag,
        "extended send arrived (exported %d)", exported);
}

/* Everything on one device's context: whose objects they are (`stand_in`: the stand-in's, by
 * the mapping its ops lie in; else the front's), then data through them. */
static void run_device(struct ibv_device *dev, int stand_in_objects, const char *stand_in,
                       const char *traced) {
  ctx = ibv_open_device(dev);
  CHECK(ctx, "ibv_open_device");

  /* Whose objects: the ops of the context against the library the program's calls bound to. */
  char front[PATH_MAX] = "", ops_lib[PATH_MAX] = "";
  void *front_base = base_of((void *)x_post_send, front, sizeof front);
  void *ops_base = base_of((void *)ctx->ops.post_send, ops_lib, sizeof ops_lib);
  printf("calls bound to %s (%p); the context's ops are in %s (%p)\n", front, front_base, ops_lib,
         ops_base);
  if (stand_in_objects && traced && *traced) {
    CHECK(ops_base == front_base, "traced: the ops must be the front's trampolines");
  } else if (stand_in_objects) {
    CHECK(ops_base && ops_base != front_base, "the ops must be the stand-in's, not the front's");
    CHECK(!strcmp(ops_lib, stand_in), "the ops lie in %s, not in the stand-in %s", ops_lib,
          stand_in);
  } else {
    CHECK(ops_base == front_base, "the soft provider of the front serves this device");
  }

  struct ibv_device_attr_ex dx;
  CHECK(!ibv_query_device_ex(ctx, NULL, &dx) && dx.orig_attr.max_qp > 0,
        "ibv_query_device_ex (inline, through the context's verbs_context)");
  union ibv_gid gid;
  CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "ibv_query_gid");
  CHECK(fcntl(ctx->async_fd, F_GETFD) >= 0, "async_fd is a descriptor");

  pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  /* A failed call's errno reaches the program, whichever libc the library that failed it
     runs with (the native library's namespace has its own). */
  errno = 0;
  CHECK(!ibv_create_cq(ctx, -1, NULL, NULL, 0) && errno == EINVAL,
        "ibv_create_cq with cqe -1: NULL with EINVAL (errno %d)", errno);
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  CHECK(ch && fcntl(ch->fd, F_GETFD) >= 0, "completion channel with a real fd");
  struct side s[2];
  for (int i = 0; i < 2; i++) {
    s[i].buf = calloc(1, MSG);
    s[i].mr = ibv_reg_mr(pd, s[i].buf, MSG, IBV_ACCESS_LOCAL_WRITE);
    CHECK(s[i].mr, "ibv_reg_mr");
    s[i].cq = ibv_create_cq(ctx, DEPTH, NULL, i ? ch : NULL, 0);
    CHECK(s[i].cq, "ibv_create_cq");
    struct ibv_qp_init_attr qa = {.send_cq = s[i].cq, .recv_cq = s[i].cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    if (i == 0) {
      /* The sender takes the extended posting API too: created by the inline ibv_create_qp_ex
       * (through the context's verbs_context). */
      struct ibv_qp_init_attr_ex qx = {.send_cq = s[i].cq, .recv_cq = s[i].cq,
                                       .qp_type = IBV_QPT_RC, .cap = qa.cap, .pd = pd,
                                       .comp_mask = IBV_QP_INIT_ATTR_PD |
                                                    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                       .send_ops_flags = IBV_QP_EX_WITH_SEND};
      s[i].qp = ibv_create_qp_ex(ctx, &qx);
      CHECK(s[i].qp, "ibv_create_qp_ex");
    } else {
      s[i].qp = ibv_create_qp(pd, &qa);
      CHECK(s[i].qp, "ibv_create_qp");
    }
  }
  to_rts(s[0].qp, s[1].qp->qp_num, IBV_ACCESS_REMOTE_WRITE, 7, 7, 14, 12);
  to_rts(s[1].qp, s[0].qp->qp_num, IBV_ACCESS_REMOTE_WRITE, 7, 7, 14, 12);

  exchange(&s[0], &s[1], 0, 0); /* inline, as compiled */
  exchange(&s[0], &s[1], 1, 1); /* the exported symbols */

  /* The extended posting API: the builders are the stand-in's own functions, or with tracing
   * the front's trampolines, as the context's ops are. */
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(s[0].qp);
  CHECK(qx && qx->wr_send, "ibv_qp_to_qp_ex");
  void *wr_base = base_of((void *)qx->wr_send, NULL, 0);
  if (stand_in_objects && !(traced && *traced))
    CHECK(wr_base == ops_base, "the builders must be the stand-in's, not the front's");
  else
    CHECK(wr_base == front_base, "traced or soft: the builders are the front's");
  exchange_ex(&s[0], &s[1], qx, 2, 0);
  exchange_ex(&s[0], &s[1], qx, 3, 1);

  /* A completion event: armed, waited for with poll() on the channel fd, taken and acked. */
  n_notify++;
  CHECK(!x_notify(s[1].cq, 0), "ibv_req_notify_cq (exported)");
  struct ibv_sge rs = {.addr = (uintptr_t)s[1].buf, .length = MSG, .lkey = s[1].mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *bad_r;
  n_post_recv++;
  CHECK(!ibv_post_recv(s[1].qp, &rwr, &bad_r), "post_recv");
  struct ibv_sge ss = {.addr = (uintptr_t)s[0].buf, .length = MSG, .lkey = s[0].mr->lkey};
  struct ibv_send_wr swr = {.wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                     *bad_s;
  n_post_send++;
  CHECK(!ibv_post_send(s[0].qp, &swr, &bad_s), "post_send");
  struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
  CHECK(poll(&pfd, 1, 10000) == 1, "the channel fd becomes readable");
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == s[1].cq, "ibv_get_cq_event");
  ibv_ack_cq_events(s[1].cq, 1);
  struct ibv_wc wc;
  CHECK(poll_one(s[1].cq, &wc, 0) == 1 && wc.wr_id == 7, "the evented completion");
  CHECK(poll_one(s[0].cq, &wc, 0) == 1 && wc.wr_id == 8, "its send completion");

  /* The extended CQ: created and polled through the inline extended API. */
  struct ibv_cq_init_attr_ex cx = {.cqe = DEPTH, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
  n_create_cq_ex++;
  struct ibv_cq_ex *xcq = ibv_create_cq_ex(ctx, &cx);
  CHECK(xcq != NULL, "ibv_create_cq_ex");
  if (xcq) {
    struct ibv_poll_cq_attr pa = {0};
    n_start_poll += 2;
    CHECK(ibv_start_poll(xcq, &pa) == ENOENT, "an empty extended CQ gives ENOENT");
    start_poll_fn x_start_poll = (start_poll_fn)dlsym(RTLD_DEFAULT, "ibv_start_poll");
    CHECK(x_start_poll && x_start_poll(xcq, &pa) == ENOENT, "ibv_start_poll (exported)");
    CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(xcq)), "destroy the extended CQ");
  }

  for (int i = 0; i < 2; i++) {
    CHECK(!ibv_destroy_qp(s[i].qp), "ibv_destroy_qp");
    CHECK(!ibv_destroy_cq(s[i].cq), "ibv_destroy_cq");
    CHECK(!ibv_dereg_mr(s[i].mr), "ibv_dereg_mr");
    free(s[i].buf);
  }
  CHECK(!ibv_destroy_comp_channel(ch), "ibv_destroy_comp_channel");
  CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
  CHECK(!ibv_close_device(ctx), "ibv_close_device");
}

/* The `__environ` of the libc in the native library's namespace (the only one besides ours). */
static char ***native_environ(void) {
  for (Lmid_t id = 1; id < 16; id++) {
    void *h = dlmopen(id, "libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
    if (h)
      return (char ***)dlsym(h, "__environ");
  }
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc != 3 ||
      (strcmp(argv[2], "native") && strcmp(argv[2], "soft") && strcmp(argv[2], "both"))) {
    fprintf(stderr, "usage: native_forward STAND_IN native|soft|both\n");
    return 2;
  }
  int native = !strcmp(argv[2], "native"), both = !strcmp(argv[2], "both");
  char stand_in[PATH_MAX];
  CHECK(realpath(argv[1], stand_in), "%s", argv[1]);
  x_post_send = (post_send_fn)dlsym(RTLD_DEFAULT, "ibv_post_send");
  x_post_recv = (post_recv_fn)dlsym(RTLD_DEFAULT, "ibv_post_recv");
  x_poll_cq = (poll_cq_fn)dlsym(RTLD_DEFAULT, "ibv_poll_cq");
  x_notify = (notify_fn)dlsym(RTLD_DEFAULT, "ibv_req_notify_cq");
  CHECK(x_post_send && x_post_recv && x_poll_cq && x_notify,
          "the formerly inline calls are exported (run under rdmashim)");
  void *front_base = base_of((void *)x_post_send, NULL, 0);
  const char *traced = getenv("RDMASHIM_TRACE");

  int n = -1;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n == (both ? 2 : 1), "%d device(s) (got %d)", both ? 2 : 1, n);
  CHECK(list[n] == NULL, "the list ends in NULL");
  /* The native library runs with a libc of its own, and may start threads there (the
     stand-in does). This program starts none, yet our libc must count the process as
     multi-threaded from now on: its malloc locks only then, and the dynamic linker allocates
     those threads' TLS blocks with it. */
  if (native) {
    CHECK(!__libc_single_threaded, "the base libc knows that threads exist");
    /* Enough setenv to move the environment array (and free the old one): the native
       library's getenv must read the array as it is now, not the one it was loaded with. */
    for (int i = 0; i < 64; i++) {
      char key[32];
      snprintf(key, sizeof key, "NATIVE_FORWARD_%d", i);
      setenv(key, "1", 1);
    }
  }
  for (int i = 0; i < n; i++)
    CHECK(!strcmp(ibv_get_device_name(list[i]), "soft0"), "device %d's name %s", i,
          ibv_get_device_name(list[i]));
  if (native) {
    char ***theirs = native_environ();
    CHECK(theirs && *theirs == environ,
          "after a forwarded call the native libc's environ is ours (%p, ours %p)",
          theirs ? (void *)*theirs : NULL, (void *)environ);
  }
  if (both) {
    /* The native library's device first, then ours; each call goes where its object lives. */
    run_device(list[0], 1, stand_in, traced);
    run_device(list[1], 0, stand_in, traced);
  } else {
    run_device(list[0], native, stand_in, traced);
  }

  /* The CM: an id on a real event channel fd, bound to loopback. */
  struct rdma_event_channel *ec = rdma_create_event_channel();
  CHECK(ec && fcntl(ec->fd, F_GETFD) >= 0, "rdma_create_event_channel with a real fd");
  struct rdma_cm_id *id;
  CHECK(!rdma_create_id(ec, &id, NULL, RDMA_PS_TCP), "rdma_create_id");
  /* 203.0.113.7 (TEST-NET-3) is no address of this host. */
  struct sockaddr_in away = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0xcb007107)};
  errno = 0;
  CHECK(rdma_bind_addr(id, (struct sockaddr *)&away) == -1 && errno == EADDRNOTAVAIL,
        "rdma_bind_addr to an address not ours: -1 with EADDRNOTAVAIL (errno %d)", errno);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
  CHECK(!rdma_bind_addr(id, (struct sockaddr *)&sin), "rdma_bind_addr");
  CHECK(id->verbs != NULL, "the bound id has its device's context");
  /* librdmacm is the stand-in's in passthrough, and ours with both (or soft). */
  void *cm_ops = base_of((void *)id->verbs->ops.post_send, NULL, 0);
  if (!(native && traced && *traced))
    CHECK((cm_ops == front_base) == !native, "the CM's device context is %s",
          native ? "the front's, not the stand-in's" : "the stand-in's, not the front's");
  CHECK(!rdma_destroy_id(id), "rdma_destroy_id");
  rdma_destroy_event_channel(ec);

  ibv_free_device_list(list);
  printf("data-path calls: ibv_post_send %d ibv_post_recv %d ibv_poll_cq %d ibv_req_notify_cq %d "
         "ibv_wr_start %d ibv_wr_send %d ibv_wr_set_sge %d ibv_wr_complete %d ibv_start_poll %d "
         "ibv_create_cq_ex %d\n",
         n_post_send, n_post_recv, n_poll_cq, n_notify, n_wr_start, n_wr_send, n_wr_set_sge,
         n_wr_complete, n_start_poll, n_create_cq_ex);
  printf("ok\n");
  return 0;
}
