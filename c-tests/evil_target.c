/* The target of tests/netns/evil_packets.py (issue 8): N RC QPs whose peer is a scapy
 * sender in another namespace, one QP per malicious packet plus a last, honest one.
 *
 *   evil_target <sgid index> <N>
 * prints "qpn 0x.. psn 0x.. rkey 0x.. addr 0x.. len N" (QP i is qpn + i), reads
 * "<peer ipv4> <peer qpn> <peer psn>" on stdin, connects QP i to peer qpn + i, posts a 64-byte
 * receive on each, prints "ready", and waits for stdin to close. Then it checks the guard pages
 * around the MR (nobody may write them), reports the last QP's honest data (a WRITE of
 * "HONEST.." at MR offset 512 and a SEND "HELLO..." into its receive) and every completion, and
 * exits 0 only if the guards are intact and the honest QP was served.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define PAGE 4096
#define MRLEN 4096
#define GUARD 0xA5
#define PSN 0x1000

static void connect_qp(struct ibv_qp *qp, int sgid, const uint8_t gid[16], uint32_t dqpn,
                       uint32_t rpsn)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                        IBV_QP_ACCESS_FLAGS) == 0, "INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dqpn;
    a.rq_psn = rpsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = (uint8_t)sgid;
    memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
          "RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = PSN;
    a.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp, "ibv_create_qp");
    return qp;
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint32_t len)
{
    struct ibv_sge sge = { (uintptr_t)at, len, mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = qp->qp_num, .sg_list = &sge, .num_sge = 1 }, *bad;
    CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

int main(int argc, char **argv)
{
    CHECK(argc == 3, "usage: evil_target <sgid index> <QPs>");
    int nq = atoi(argv[2]);
    CHECK(nq >= 1 && nq <= 30, "1..30 QPs");
    alarm(60);
    /* guard page | MR page | guard page: anything written outside the MR shows up. */
    char *mem = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mem != MAP_FAILED, "mmap");
    memset(mem, GUARD, 3 * PAGE);
    char *buf = mem + PAGE;
    memset(buf, 0, MRLEN);
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0], "ibv_get_device_list");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, MRLEN, IBV_ACCESS_LOCAL_WRITE |
                                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                        IBV_ACCESS_REMOTE_ATOMIC) : NULL;
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    CHECK(pd && mr && cq, "pd/mr/cq");
    struct ibv_qp *qp[30];
    for (int i = 0; i < nq; i++) {
        qp[i] = make_qp(pd, cq);
        CHECK(qp[i]->qp_num == qp[0]->qp_num + (uint32_t)i, "QPNs not consecutive");
    }
    struct ibv_qp *honest = qp[nq - 1];
    printf("qpn 0x%x psn 0x%x rkey 0x%x addr 0x%llx len %d\n", qp[0]->qp_num, PSN, mr->rkey,
           (unsigned long long)(uintptr_t)buf, MRLEN);
    fflush(stdout);

    char ip[64];
    unsigned pq, ppsn;
    CHECK(scanf("%63s %x %x", ip, &pq, &ppsn) == 3, "peer line");
    uint8_t gid[16] = { 0 };
    gid[10] = gid[11] = 0xff;
    CHECK(inet_pton(AF_INET, ip, gid + 12) == 1, "peer address %s", ip);
    int sgid = atoi(argv[1]);
    /* QP i's receive: 64 bytes at offset 2048 + 64 i; the honest one's at 1024. */
    for (int i = 0; i < nq; i++) {
        connect_qp(qp[i], sgid, gid, pq + (unsigned)i, ppsn);
        post_recv(qp[i], mr, qp[i] == honest ? buf + 1024 : buf + 2048 + 64 * i, 64);
    }
    printf("ready\n");
    fflush(stdout);
    int c;
    while ((c = getchar()) != EOF)
        ;
    usleep(300000);

    struct ibv_wc wc[64];
    int n = ibv_poll_cq(cq, 64, wc), qp2_recv = 0;
    for (int i = 0; i < n; i++) {
        printf("completion qp 0x%x status %d opcode %d len %u\n", wc[i].qp_num, wc[i].status,
               wc[i].opcode, wc[i].byte_len);
        if (wc[i].qp_num == honest->qp_num && wc[i].status == IBV_WC_SUCCESS &&
            wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == 8 &&
            memcmp(buf + 1024, "HELLO...", 8) == 0)
            qp2_recv = 1;
    }
    size_t bad = 0;
    for (size_t i = 0; i < PAGE; i++)
        bad += (mem[i] != (char)GUARD) + (mem[2 * PAGE + i] != (char)GUARD);
    int honest_write = memcmp(buf + 512, "HONEST..", 8) == 0;
    printf("guard bytes changed: %zu\n", bad);
    /* Only out-of-window or duplicate PSNs aimed at offset 256: nothing may land there. */
    static const char zero[8];
    printf("stale PSN write landed: %s\n", memcmp(buf + 256, zero, 8) ? "yes" : "no");
    printf("honest write: %s\nhonest send: %s\n", honest_write ? "yes" : "no",
           qp2_recv ? "yes" : "no");
    for (int i = 0; i < nq; i++)
        ibv_destroy_qp(qp[i]);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return bad == 0 && honest_write && qp2_recv ? 0 : 1;
}
