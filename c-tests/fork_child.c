/* fork() with RDMA in use (issue 9, item 10).
 *
 * The parent has an open RC connection (to itself: a listener and a client id) with registered
 * memory, then forks. The child, as rdma-core allows, leaves the parent's objects alone and
 * creates its own: an endpoint that connects to the parent's listener, gets ESTABLISHED and
 * exchanges a message. Objects inherited from the parent refuse to work in the child (EINVAL):
 * they share rings and descriptors with the parent's connection. Afterwards the parent's
 * original connection still carries data. Every wait is bounded by alarm().
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d (%s): ", __FILE__, __LINE__, \
    who); fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

#define MSG 64
static const char *who = "parent";
static char port[16];
static struct rdma_cm_id *listener;

struct conn {
    struct rdma_cm_id *id;
    char buf[MSG], out[MSG];
    struct ibv_mr *mr, *out_mr;
};

static struct rdma_addrinfo *resolve(const char *svc, int passive)
{
    struct rdma_addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_port_space = RDMA_PS_TCP;
    if (passive)
        hints.ai_flags = RAI_PASSIVE;
    CHECK(rdma_getaddrinfo("127.0.0.1", svc, &hints, &res) == 0, "rdma_getaddrinfo");
    return res;
}

static struct ibv_qp_init_attr qp_attr(void)
{
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    return a;
}

static void setup_mrs(struct conn *c)
{
    c->mr = rdma_reg_msgs(c->id, c->buf, MSG);
    c->out_mr = rdma_reg_msgs(c->id, c->out, MSG);
    CHECK(c->mr && c->out_mr, "rdma_reg_msgs");
}

static void post_recv(struct conn *c)
{
    memset(c->buf, 0, MSG);
    CHECK(rdma_post_recv(c->id, NULL, c->buf, MSG, c->mr) == 0, "rdma_post_recv");
}

static void send_text(struct conn *c, const char *text)
{
    struct ibv_wc wc;
    snprintf(c->out, MSG, "%s", text);
    CHECK(rdma_post_send(c->id, NULL, c->out, MSG, c->out_mr, 0) == 0, "rdma_post_send");
    CHECK(rdma_get_send_comp(c->id, &wc) > 0 && wc.status == IBV_WC_SUCCESS, "send completion");
}

static void expect_text(struct conn *c, const char *text)
{
    struct ibv_wc wc;
    CHECK(rdma_get_recv_comp(c->id, &wc) > 0 && wc.status == IBV_WC_SUCCESS, "recv completion");
    CHECK(strcmp(c->buf, text) == 0, "got '%s', expected '%s'", c->buf, text);
}

/* Passive side of one connection: takes the next request, receives `text`, answers "ok". */
static void serve(struct conn *c, const char *text)
{
    CHECK(rdma_get_request(listener, &c->id) == 0, "rdma_get_request");
    setup_mrs(c);
    post_recv(c);
    CHECK(rdma_accept(c->id, NULL) == 0, "rdma_accept");
    expect_text(c, text);
    post_recv(c);
    send_text(c, "ok");
}

static void *serve_thread(void *arg)
{
    serve(arg, "before fork");
    return NULL;
}

/* Active side: connects to the listener, sends `text`, expects "ok". */
static void dial(struct conn *c, const char *text)
{
    struct rdma_addrinfo *res = resolve(port, 0);
    struct ibv_qp_init_attr a = qp_attr();
    CHECK(rdma_create_ep(&c->id, res, NULL, &a) == 0, "rdma_create_ep");
    rdma_freeaddrinfo(res);
    setup_mrs(c);
    post_recv(c);
    CHECK(rdma_connect(c->id, NULL) == 0, "rdma_connect (ESTABLISHED)");
    send_text(c, text);
    expect_text(c, "ok");
}

int main(void)
{
    static struct conn srv1, cli1, srv2, child;
    pthread_t t;
    int status;

    alarm(60);
    struct rdma_addrinfo *res = resolve("0", 1);
    struct ibv_qp_init_attr a = qp_attr();
    CHECK(rdma_create_ep(&listener, res, NULL, &a) == 0, "rdma_create_ep (passive)");
    rdma_freeaddrinfo(res);
    CHECK(rdma_listen(listener, 4) == 0, "rdma_listen");
    snprintf(port, sizeof port, "%u", ntohs(rdma_get_src_port(listener)));

    CHECK(pthread_create(&t, NULL, serve_thread, &srv1) == 0, "pthread_create");
    dial(&cli1, "before fork");
    pthread_join(t, NULL);
    post_recv(&cli1); /* for the exchange after the fork */

    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        who = "child";
        alarm(20);
        /* The parent's objects are not the child's: they fail cleanly. */
        errno = 0;
        CHECK(rdma_post_send(cli1.id, NULL, cli1.out, MSG, cli1.out_mr, 0) != 0,
              "posting on the parent's QP must fail in the child");
        struct ibv_wc wc;
        CHECK(ibv_poll_cq(cli1.id->recv_cq, 1, &wc) < 0,
              "polling the parent's CQ must fail in the child");
        /* Its own objects work: a connection of its own to the parent's listener. */
        dial(&child, "from the child");
        printf("child: ESTABLISHED and exchanged data on its own connection\n");
        fflush(stdout);
        rdma_disconnect(child.id);
        _exit(0);
    }
    serve(&srv2, "from the child");
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)", status);

    /* The parent's connection from before the fork still works, both ways. */
    send_text(&srv1, "after fork");
    expect_text(&cli1, "after fork");
    post_recv(&srv1);
    send_text(&cli1, "reply after fork");
    expect_text(&srv1, "reply after fork");
    printf("parent: the connection from before the fork still works\n");
    return 0;
}
