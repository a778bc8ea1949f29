/* UD datagrams from another user are dropped (issue 9, item 9).
 *
 * A UD QP of this (root) process receives two datagrams written straight to its socket in
 * rdmashim's datagram format: first one sent by a child running as uid 65534, then one sent
 * as root. Only root's reaches a receive: the kernel's SCM_CREDENTIALS name the sender, and
 * other users are refused unless RDMASHIM_ALLOW_UIDS lists them. Needs root (exit 77 otherwise).
 */
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "ud_qp.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define QKEY 0x11111111u
#define GRH 40
#define SLOT 256

struct ud_hdr { /* src/provider/soft/datagram.rs UdHdr */
    uint32_t magic, src_qpn, dst_qpn, qkey, imm, flags, len, pad;
    uint8_t sgid[16], dgid[16];
};

/* Sends `text` to QP `qpn`'s socket as `uid` (in a child process). */
static void send_as(uid_t uid, uint32_t qpn, const char *text)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        if (uid != 0 && (setgroups(0, NULL) || setgid(uid) || setuid(uid)))
            _exit(2);
        struct { struct ud_hdr h; char payload[16]; } m;
        memset(&m, 0, sizeof m);
        m.h.magic = 0x52445544; /* "RDUD" */
        m.h.src_qpn = 0x100;
        m.h.dst_qpn = qpn;
        m.h.qkey = QKEY;
        m.h.len = sizeof m.payload;
        snprintf(m.payload, sizeof m.payload, "%s", text);
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "rdmashim/qp/%06x", qpn);
        int s = socket(AF_UNIX, SOCK_DGRAM, 0);
        ssize_t r = sendto(s, &m, sizeof m, 0, (struct sockaddr *)&a,
                           (socklen_t)(sizeof(sa_family_t) + 1 + n));
        _exit(r == (ssize_t)sizeof m ? 0 : 3);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "sender as uid %u failed (status 0x%x)", (unsigned)uid, status);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIP: needs root to send as another user (uid 65534)\n");
        return 77;
    }
    alarm(30);
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0], "ibv_get_device_list");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    static char buf[2 * SLOT];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
    CHECK(pd && mr && cq, "pd/mr/cq");
    struct ibv_qp *qp = ud_qp_rts(pd, cq, 4, 4, QKEY);
    CHECK(qp, "UD QP to RTS");
    for (int i = 0; i < 2; i++) {
        struct ibv_sge sge = { (uintptr_t)(buf + i * SLOT), SLOT, mr->lkey };
        struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
        CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
    }

    send_as(65534, qp->qp_num, "from nobody");
    send_as(0, qp->qp_num, "from root");

    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
        usleep(1000);
    CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "completion (status %d)", wc.status);
    const char *got = buf + wc.wr_id * SLOT + GRH;
    CHECK(strcmp(got, "from root") == 0, "first datagram delivered is '%s'", got);
    printf("the datagram from uid 65534 was dropped; root's was delivered\n");
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
