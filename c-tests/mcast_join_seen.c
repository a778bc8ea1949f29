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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "conformance/ibvhelp.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define GRH 40
#define ROUNDS 100
#define DEPTH 8
#define MCAST_QPN 0xffffffu

/* A device, a CQ, a UD QP in RTS (qkey IH_QKEY) and a registered buffer. */
struct side {
    struct ih_dev d;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ih_buf b;
};

static void open_side(struct side *s)
{
    CHECK(!ih_dev_open(&s->d), "%s", s->d.err);
    s->cq = ibv_create_cq(s->d.ctx, 2 * DEPTH, NULL, NULL, 0);
    CHECK(s->cq, "ibv_create_cq");
    struct ibv_qp_init_attr ia = ih_qp_attr(IBV_QPT_UD, s->cq, DEPTH);
    s->qp = ibv_create_qp(s->d.pd, &ia);
    CHECK(s->qp, "ibv_create_qp");
    CHECK(!ih_ud_ready(s->qp, s->d.err, sizeof s->d.err), "%s", s->d.err);
    CHECK(!ih_buf_make(&s->d, &s->b, GRH + 64, IBV_ACCESS_LOCAL_WRITE), "%s", s->d.err);
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
    for (int r = 0; r < ROUNDS; r++) {
        memset(s.b.buf, 0, s.b.len);
        CHECK(!ih_post_recv(s.qp, s.b.buf, s.b.len, s.b.mr->lkey, (uint64_t)r), "ibv_post_recv");
        int go;
        CHECK(read(in, &go, sizeof go) == sizeof go && go == r, "round %d: no word", r);
        union ibv_gid mgid = group(parent, r);
        CHECK(!ibv_attach_mcast(s.qp, &mgid, 0), "ibv_attach_mcast");
        CHECK(write(out, &r, sizeof r) == sizeof r, "answer");
        struct ibv_wc wc;
        int n = ih_poll(s.cq, &wc, IH_WAIT_MS);
        CHECK(n == 1, "round %d: the datagram sent right after the attach did not arrive", r);
        CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)r, "receive %d", wc.status);
        int got = atoi(s.b.buf + GRH);
        CHECK(got == r, "round %d: received round %d's datagram", r, got);
        CHECK(!ibv_detach_mcast(s.qp, &mgid, 0), "ibv_detach_mcast");
    }
    return 0;
}

static void send_to_group(struct side *s, struct ibv_ah *ah, int r)
{
    snprintf(s->b.buf, s->b.len, "%d", r);
    CHECK(!ih_post_ud(s->qp, ah, MCAST_QPN, s->b.buf, (uint32_t)strlen(s->b.buf) + 1,
                      s->b.mr->lkey, (uint64_t)r), "ibv_post_send");
    struct ibv_wc wc;
    int n = ih_poll(s->cq, &wc, IH_WAIT_MS);
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
        union ibv_gid mgid = group(parent, r);
        struct ibv_ah *ah = ih_ah(&s.d, &mgid);
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
