/* An address added to an interface after start becomes visible, and every GID consumer agrees.
 *
 * The GID table is cached (src/verbs/device.rs). In a network namespace of its own (root
 * only; exit 77 otherwise), this program reads the table, then adds addresses to `lo` and
 * checks that:
 *   - rdma_resolve_addr to a new IPv4 address succeeds (it failed before the address existed),
 *     and ibv_query_gid_table then lists its GID;
 *   - ibv_query_gid_ex at the index just past the old table finds a new entry;
 *   - a UD send whose address handle names the new GID's index carries that GID as the
 *     source GID of the GRH the receiver gets (the send path answers from the same table).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define QKEY 0x11111111u
#define GRH 40
#define MAXG 16

static int table(struct ibv_context *ctx, struct ibv_gid_entry *e)
{
    ssize_t n = ibv_query_gid_table(ctx, e, MAXG, 0);
    CHECK(n >= 0, "ibv_query_gid_table: %zd", n);
    return (int)n;
}

static int find(struct ibv_gid_entry *e, int n, const uint8_t *gid)
{
    for (int i = 0; i < n; i++)
        if (!memcmp(e[i].gid.raw, gid, 16))
            return i;
    return -1;
}

/* The event rdma_resolve_addr(ip) ends with. */
static enum rdma_cm_event_type resolve(const char *ip)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch, "rdma_create_event_channel");
    struct rdma_cm_id *id;
    CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), "rdma_create_id");
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, ip, &a.sin_addr);
    enum rdma_cm_event_type t = RDMA_CM_EVENT_ADDR_ERROR;
    if (!rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 1000)) {
        struct rdma_cm_event *ev;
        CHECK(!rdma_get_cm_event(ch, &ev), "rdma_get_cm_event");
        t = ev->event;
        rdma_ack_cm_event(ev);
    }
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return t;
}

static void to_rts(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
    CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
          "INIT");
    a.qp_state = IBV_QPS_RTR;
    CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "RTR");
    a.qp_state = IBV_QPS_RTS;
    CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
}

/* Sends one UD message from source GID index `sgid_index` to `dgid` and returns (in `sgid`)
 * the source GID of the GRH the receiver got. */
static void ud_send_sgid(struct ibv_context *ctx, int sgid_index, const uint8_t *dgid,
                         uint8_t *sgid)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    CHECK(pd && cq, "pd/cq");
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
        .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *tx = ibv_create_qp(pd, &ia), *rx = ibv_create_qp(pd, &ia);
    CHECK(tx && rx, "ibv_create_qp");
    to_rts(tx);
    to_rts(rx);
    static uint8_t buf[GRH + 64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr, "ibv_reg_mr");
    struct ibv_sge rs = { (uintptr_t)buf, sizeof buf, mr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *bad_r;
    CHECK(!ibv_post_recv(rx, &rw, &bad_r), "ibv_post_recv");
    struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
        .grh = { .sgid_index = (uint8_t)sgid_index, .hop_limit = 1 } };
    memcpy(aa.grh.dgid.raw, dgid, 16);
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    CHECK(ah, "ibv_create_ah");
    static char msg[] = "hello";
    struct ibv_sge ss = { (uintptr_t)msg, sizeof msg, 0 };
    struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
        .wr.ud = { .ah = ah, .remote_qpn = rx->qp_num, .remote_qkey = QKEY } }, *bad_s;
    CHECK(!ibv_post_send(tx, &sw, &bad_s), "ibv_post_send");
    int got_recv = 0;
    for (int done = 0; done < 2;) { /* alarm() in main bounds this */
        struct ibv_wc wc;
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0, "ibv_poll_cq");
        if (n == 0)
            continue;
        CHECK(wc.status == IBV_WC_SUCCESS, "completion %d", wc.status);
        got_recv |= wc.wr_id == 1;
        done++;
    }
    CHECK(got_recv, "no receive");
    memcpy(sgid, buf + 8, 16);
    ibv_destroy_ah(ah);
    ibv_destroy_qp(tx);
    ibv_destroy_qp(rx);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIP: needs root (a network namespace of its own, addresses added to its lo)\n");
        return 77;
    }
    if (unshare(CLONE_NEWNET) != 0) {
        printf("SKIP: unshare(CLONE_NEWNET) failed (errno %d)\n", errno);
        return 77;
    }
    if (system("ip link set lo up") != 0) {
        printf("SKIP: `ip link set lo up` failed (iproute2 missing?)\n");
        return 77;
    }
    alarm(60);
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0], "no device");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device");
    struct ibv_gid_entry e[MAXG];
    int n0 = table(ctx, e);
    CHECK(n0 < MAXG - 2, "%d GIDs already", n0);
    uint8_t v4gid[16] = { [10] = 0xff, [11] = 0xff, 10, 77, 0, 1 };
    CHECK(find(e, n0, v4gid) < 0, "10.77.0.1 listed before it exists");
    CHECK(resolve("10.77.0.1") == RDMA_CM_EVENT_ADDR_ERROR, "10.77.0.1 resolved before it exists");

    CHECK(system("ip addr add 10.77.0.1/24 dev lo") == 0, "ip addr add 10.77.0.1");
    CHECK(resolve("10.77.0.1") == RDMA_CM_EVENT_ADDR_RESOLVED, "new 10.77.0.1 not resolved");
    int n1 = table(ctx, e);
    int i4 = find(e, n1, v4gid);
    CHECK(n1 == n0 + 1 && i4 >= 0, "after resolving: %d GIDs (was %d), 10.77.0.1 at %d", n1, n0, i4);

    CHECK(system("ip addr add fd00:77::1/64 dev lo nodad") == 0, "ip addr add fd00:77::1");
    struct ibv_gid_entry g;
    CHECK(!ibv_query_gid_ex(ctx, 1, (uint32_t)n1, &g, 0), "ibv_query_gid_ex(%d) after adding", n1);
    int n2 = table(ctx, e);
    uint8_t v6gid[16] = { 0xfd, 0, 0, 0x77, [15] = 1 };
    int i6 = find(e, n2, v6gid);
    CHECK(n2 == n1 + 1 && i6 >= 0, "after ibv_query_gid_ex: %d GIDs (was %d), fd00:77::1 at %d",
          n2, n1, i6);
    union ibv_gid q;
    CHECK(!ibv_query_gid(ctx, 1, i6, &q) && !memcmp(q.raw, v6gid, 16), "ibv_query_gid(%d)", i6);

    uint8_t sgid[16];
    ud_send_sgid(ctx, i4, v4gid, sgid);
    CHECK(!memcmp(sgid, v4gid, 16), "UD send from index %d: GRH source is not 10.77.0.1", i4);
    ud_send_sgid(ctx, i6, v6gid, sgid);
    CHECK(!memcmp(sgid, v6gid, 16), "UD send from index %d: GRH source is not fd00:77::1", i6);

    ibv_close_device(ctx);
    ibv_free_device_list(list);
    printf("gid_refresh: ok (%d -> %d -> %d GIDs)\n", n0, n1, n2);
    return 0;
}
