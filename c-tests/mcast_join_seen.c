/* A multicast join is seen by the group's senders before ibv_attach_mcast returns.
 *
 * A sender keeps its list of a group's members between sends (it lists the group only when a
 * joiner tells it to), so a join must reach every sender before the attach returns: otherwise
 * a datagram sent to the group right after the attach misses the new member.
 *
 * A parent sends to a group with no member yet (so it has listed the group and keeps the empty
 * list); a child process then attaches a UD QP to it and tells the parent over a pipe, and the
 * parent sends one datagram to the group at once. The child must receive exactly that datagram.
 * ROUNDS rounds, each with a new group. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define QKEY 0x11111111u
#define GRH 40
#define ROUNDS 100
#define DEPTH 8
#define MCAST_QPN 0xffffffu

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
};

static void open_side(struct side *s)
{
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    CHECK(l && n > 0, "no device");
    s->ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    CHECK(s->ctx, "ibv_open_device");
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

/* Round `r`'s group: an IPv6 multicast GID of this test run alone (the parent's pid). */
static union ibv_gid group(pid_t parent, int r)
{
    union ibv_gid g;
    memset(&g, 0, sizeof g);
    g.raw[0] = 0xff;
    g.raw[1] = 0x0e;
    memcpy(&g.raw[8], &parent, sizeof parent);
    g.raw[15] = (uint8_t)r;
    return g;
}

/* The member: per round, waits for the parent's word, attaches, answers, and must receive the
 * round's datagram within a few seconds. */
static int child(pid_t parent, int in, int out)
{
    struct side s;
    open_side(&s);
    static char buf[GRH + 64];
    struct ibv_mr *mr = ibv_reg_mr(s.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr, "ibv_reg_mr");
    for (int r = 0; r < ROUNDS; r++) {
        struct ibv_sge g = { (uintptr_t)buf, sizeof buf, mr->lkey };
        struct ibv_recv_wr w = { .wr_id = (uint64_t)r, .sg_list = &g, .num_sge = 1 }, *bad;
        CHECK(!ibv_post_recv(s.qp, &w, &bad), "ibv_post_recv");
        int go;
        CHECK(read(in, &go, sizeof go) == sizeof go && go == r, "round %d: no word", r);
        union ibv_gid mgid = group(parent, r);
        CHECK(!ibv_attach_mcast(s.qp, &mgid, 0), "ibv_attach_mcast");
        CHECK(write(out, &r, sizeof r) == sizeof r, "answer");
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        struct ibv_wc wc;
        int n;
        do {
            n = ibv_poll_cq(s.cq, 1, &wc);
            CHECK(n >= 0, "ibv_poll_cq");
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (n == 0 && now.tv_sec - t0.tv_sec < 5);
        CHECK(n == 1, "round %d: the datagram sent right after the attach did not arrive", r);
        CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)r, "receive %d", wc.status);
        int got = atoi(buf + GRH);
        CHECK(got == r, "round %d: received round %d's datagram", r, got);
        CHECK(!ibv_detach_mcast(s.qp, &mgid, 0), "ibv_detach_mcast");
    }
    return 0;
}

static void send_to_group(struct side *s, struct ibv_ah *ah, int r)
{
    char text[16];
    snprintf(text, sizeof text, "%d", r);
    struct ibv_sge g = { (uintptr_t)text, (uint32_t)strlen(text) + 1, 0 };
    struct ibv_send_wr w = { .wr_id = (uint64_t)r, .sg_list = &g, .num_sge = 1,
        .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
        .wr.ud = { .ah = ah, .remote_qpn = MCAST_QPN, .remote_qkey = QKEY } }, *bad;
    CHECK(!ibv_post_send(s->qp, &w, &bad), "ibv_post_send");
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
        ; /* alarm() bounds this */
    CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "send: %d, status %d", n, wc.status);
}

int main(void)
{
    alarm(120);
    int down[2], up[2];
    CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe");
    pid_t parent = getpid();
    /* Fork before either side uses RDMA: the child starts with no threads of ours. */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        _exit(child(parent, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    struct side s;
    open_side(&s);
    for (int r = 0; r < ROUNDS; r++) {
        struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .dlid = 0xc000,
                                  .grh = { .hop_limit = 1, .dgid = group(parent, r) } };
        struct ibv_ah *ah = ibv_create_ah(s.pd, &aa);
        CHECK(ah, "ibv_create_ah");
        /* A send to the group while it has no member: we know the group, empty. */
        send_to_group(&s, ah, -1);
        CHECK(write(down[1], &r, sizeof r) == sizeof r, "word");
        int back;
        CHECK(read(up[0], &back, sizeof back) == sizeof back && back == r, "round %d: child", r);
        send_to_group(&s, ah, r);
        ibv_destroy_ah(ah);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the member failed (status 0x%x)",
          status);
    ibv_destroy_qp(s.qp);
    printf("%d joins, each seen by the sender's next send\n", ROUNDS);
    return 0;
}
