/* UD to a destination whose queue is full (issue 11, item 4): every request completes, in
 * order, and every datagram is either delivered or dropped and counted; none is lost silently.
 *
 * A child process owns the receiving UD QP and is stopped (SIGSTOP) while the parent sends it
 * SENDS datagrams: its socket queue holds only net.unix.max_dgram_qlen of them, so the rest
 * find it full. The parent polls all SENDS completions (each IBV_WC_SUCCESS, wr_id in posting
 * order: UD completes when its datagram is sent or dropped), then continues the child and sends
 * an end marker. The child counts what it received before the marker. Under RDMASHIM_TRACE the
 * parent's trace names each dropped datagram; received + dropped must be SENDS exactly. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define QKEY 0x22222222u
#define GRH 40
#define SENDS 40
#define DEPTH 64

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    union ibv_gid gid;
};

static void open_side(struct side *s)
{
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    CHECK(l && n > 0, "no device");
    s->ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    CHECK(s->ctx, "ibv_open_device");
    CHECK(!ibv_query_gid(s->ctx, 1, 0, &s->gid), "ibv_query_gid");
    s->pd = ibv_alloc_pd(s->ctx);
    s->cq = ibv_create_cq(s->ctx, 2 * DEPTH, NULL, NULL, 0);
    CHECK(s->pd && s->cq, "pd/cq");
    struct ibv_qp_init_attr ia = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_UD,
        .cap = { .max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1,
                 .max_recv_sge = 1, .max_inline_data = 64 } };
    s->qp = ibv_create_qp(s->pd, &ia);
    CHECK(s->qp, "ibv_create_qp");
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
    CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
          "INIT");
    a.qp_state = IBV_QPS_RTR;
    CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE), "RTR");
    a.qp_state = IBV_QPS_RTS;
    CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
}

/* The receiver: DEPTH receives posted, then counts datagrams until the end marker. */
static int child(int out)
{
    struct side s;
    open_side(&s);
    static char bufs[DEPTH][GRH + 64];
    struct ibv_mr *mr = ibv_reg_mr(s.pd, bufs, sizeof bufs, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr, "ibv_reg_mr");
    for (int i = 0; i < DEPTH; i++) {
        struct ibv_sge g = { (uintptr_t)bufs[i], sizeof bufs[i], mr->lkey };
        struct ibv_recv_wr w = { .wr_id = (uint64_t)i, .sg_list = &g, .num_sge = 1 }, *bad;
        CHECK(!ibv_post_recv(s.qp, &w, &bad), "ibv_post_recv");
    }
    uint32_t qpn = s.qp->qp_num;
    CHECK(write(out, &qpn, sizeof qpn) == sizeof qpn, "write qpn");
    int got = 0;
    for (;;) { /* alarm() bounds this */
        struct ibv_wc wc;
        int n = ibv_poll_cq(s.cq, 1, &wc);
        CHECK(n >= 0, "ibv_poll_cq");
        if (n == 0)
            continue;
        CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "receive %d", wc.status);
        if (!strcmp(bufs[wc.wr_id] + GRH, "end"))
            break;
        got++;
    }
    CHECK(write(out, &got, sizeof got) == sizeof got, "write count");
    return 0;
}

static void send_one(struct side *s, struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id,
                     const char *text)
{
    struct ibv_sge g = { (uintptr_t)text, (uint32_t)strlen(text) + 1, 0 };
    struct ibv_send_wr w = { .wr_id = wr_id, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
        .wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = QKEY } }, *bad;
    CHECK(!ibv_post_send(s->qp, &w, &bad), "ibv_post_send %lu", (unsigned long)wr_id);
}

static void complete(struct side *s, uint64_t wr_id)
{
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
        ; /* alarm() bounds this */
    CHECK(n == 1, "ibv_poll_cq");
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send %lu: status %d",
          (unsigned long)wc.wr_id, wc.status);
    CHECK(wc.wr_id == wr_id, "completion %lu, expected %lu (out of order)",
          (unsigned long)wc.wr_id, (unsigned long)wr_id);
}

/* Lines of the trace at `path` that report a dropped datagram. */
static int dropped_in(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f, "open the trace %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "dropped (its queue stayed full") != NULL;
    fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    (void)argc;
    /* The library reads RDMASHIM_TRACE when it loads: run afresh with a trace file of ours. */
    if (!getenv("UD_FULL_QUEUE_TRACING")) {
        char path[] = "/tmp/ud_full_queue.XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        close(fd);
        setenv("RDMASHIM_TRACE", path, 1);
        setenv("UD_FULL_QUEUE_TRACING", "1", 1);
        execv("/proc/self/exe", argv);
        CHECK(0, "execv");
    }
    const char *trace = getenv("RDMASHIM_TRACE");
    CHECK(trace, "RDMASHIM_TRACE");
    alarm(60);
    FILE *q = fopen("/proc/sys/net/unix/max_dgram_qlen", "r");
    int qlen = 0;
    if (q) {
        if (fscanf(q, "%d", &qlen) != 1)
            qlen = 0;
        fclose(q);
    }
    if (qlen <= 0 || qlen >= SENDS / 2) {
        unlink(trace);
        printf("SKIP: net.unix.max_dgram_qlen is %d; this test needs a queue well under %d\n",
               qlen, SENDS);
        return 77;
    }
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    /* Fork before either side uses RDMA: the child starts with no threads of ours. */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        alarm(60);
        close(p[0]);
        _exit(child(p[1]));
    }
    close(p[1]);
    uint32_t qpn;
    CHECK(read(p[0], &qpn, sizeof qpn) == sizeof qpn, "the receiver did not start");
    int status;
    CHECK(kill(pid, SIGSTOP) == 0 && waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status),
          "stop the receiver");

    struct side s;
    open_side(&s);
    struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .hop_limit = 1 } };
    aa.grh.dgid = s.gid;
    struct ibv_ah *ah = ibv_create_ah(s.pd, &aa);
    CHECK(ah, "ibv_create_ah");
    for (uint64_t i = 1; i <= SENDS; i++)
        send_one(&s, ah, qpn, i, "data");
    for (uint64_t i = 1; i <= SENDS; i++)
        complete(&s, i);

    CHECK(kill(pid, SIGCONT) == 0, "continue the receiver");
    send_one(&s, ah, qpn, SENDS + 1, "end");
    complete(&s, SENDS + 1);
    int got;
    CHECK(read(p[0], &got, sizeof got) == sizeof got, "the receiver did not report");
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the receiver failed (status 0x%x)", status);
    ibv_destroy_ah(ah);
    ibv_destroy_qp(s.qp);
    int dropped = dropped_in(trace);
    unlink(trace);
    printf("%d datagrams: %d delivered, %d dropped at the full queue (max_dgram_qlen %d)\n",
           SENDS, got, dropped, qlen);
    CHECK(got + dropped == SENDS, "%d delivered + %d dropped != %d sent", got, dropped, SENDS);
    CHECK(got >= 1 && dropped >= 1, "a stopped receiver's queue of %d took %d of %d", qlen, got,
          SENDS);
    printf("ok\n");
    return 0;
}
