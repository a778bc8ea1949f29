/* A live UD QP for tests/netns/wire_cross.py's ICRC replay (issue 8).
 *
 * Prints "qpn 0x<qpn> qkey 0x<qkey>" once its receives are posted, then prints the payload of
 * every datagram delivered to it ("got <text>") until one reads "END" (exit 0) or 20 s pass
 * (exit 1). The attacker in the other namespace sends RoCEv2 UD SENDs: the ones with a broken
 * ICRC must never show up here.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "ud_qp.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define QKEY 0x11111111u
#define GRH 40
#define SLOT 256
#define SLOTS 8

static char buf[SLOTS * SLOT];

static void post(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t i)
{
    memset(buf + i * SLOT, 0, SLOT);
    struct ibv_sge sge = { (uintptr_t)(buf + i * SLOT), SLOT - 1, mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
    CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

int main(void)
{
    alarm(30);
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0], "ibv_get_device_list");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
    struct ibv_cq *cq = ibv_create_cq(ctx, 2 * SLOTS, NULL, NULL, 0);
    CHECK(pd && mr && cq, "pd/mr/cq");
    struct ibv_qp *qp = ud_qp_rts(pd, cq, 1, SLOTS, QKEY);
    CHECK(qp, "UD QP to RTS");
    for (uint64_t i = 0; i < SLOTS; i++)
        post(qp, mr, i);
    printf("qpn 0x%x qkey 0x%x\n", qp->qp_num, QKEY);
    fflush(stdout);

    time_t end = time(NULL) + 20;
    while (time(NULL) < end) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0, "ibv_poll_cq");
        if (n == 0) {
            usleep(1000);
            continue;
        }
        CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id < SLOTS, "completion (status %d)", wc.status);
        const char *got = buf + wc.wr_id * SLOT + GRH;
        printf("got %.*s\n", (int)(wc.byte_len > GRH ? wc.byte_len - GRH : 0), got);
        fflush(stdout);
        if (strncmp(got, "END", 3) == 0)
            return 0;
        post(qp, mr, wc.wr_id);
    }
    printf("no END datagram within 20 s\n");
    return 1;
}
