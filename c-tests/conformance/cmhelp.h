/*
 * c-tests/conformance: RDMA helpers shared by the page tests (setup only; the clauses live in
 * the page programs). Loopback addresses only (127.0.0.1 and ::1).
 *
 * Helpers return 0 on success and -1 on failure with a reason in the caller's `err` buffer
 * (or in the pair's `err`), so that a page can report the clauses that depend on a failed
 * setup as blocked.
 */
#ifndef CONF_CMHELP_H
#define CONF_CMHELP_H

#include "clause.h"

#include <pthread.h>

#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define H_WAIT_MS 5000 /* how long an expected event or completion may take */
#define H_QUIET_MS 250 /* how long "no event / no completion" is watched */
#define H_NOBLOCK_MS 3000 /* a call that must not block returns well within this, even on a busy host */

/* Fills an IPv4 / IPv6 loopback-style address (host-order port). */
void h_sin(struct sockaddr_in *s, const char *ip, uint16_t port);
void h_sin6(struct sockaddr_in6 *s, const char *ip, uint16_t port);

/* Next event of `ch` within ms (poll on the fd, then rdma_get_cm_event); NULL on timeout
 * (errno ETIMEDOUT) or error. */
struct rdma_cm_event *h_get(struct rdma_event_channel *ch, int ms);

/* Waits for an event of type `want`. On success returns 0 and stores it in *out (caller acks)
 * or acks it when out is NULL; otherwise -1 with a description in err (the wrong event is acked). */
int h_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int ms,
	     struct rdma_cm_event **out, char *err, size_t errlen);

/* 1 if no event arrives within ms (an event that does arrive is described in err and acked). */
int h_quiet(struct rdma_event_channel *ch, int ms, char *err, size_t errlen);

/* QP attributes: RC or UD, `depth` work requests each way, 1 SGE (or `sge`), signal all. */
struct ibv_qp_init_attr h_qp_attr(enum ibv_qp_type type, int depth, int sig_all);

/* One completion from cq within ms: 1 got it, 0 timeout, -1 poll error. */
int h_poll(struct ibv_cq *cq, struct ibv_wc *wc, int ms);

/* Milliseconds on the monotonic clock. */
long long h_now_ms(void);
void h_sleep_ms(int ms);

/* The device's attributes through id->verbs (0 or -1). */
int h_query_device(struct rdma_cm_id *id, struct ibv_device_attr *attr);

/* ---- an asynchronous connected pair in one thread ------------------------------------------ */

struct h_pair_opts {
	enum rdma_port_space ps;          /* RDMA_PS_TCP when 0 */
	int family;                       /* AF_INET (default) or AF_INET6 */
	const struct ibv_qp_init_attr *cli_qp; /* NULL: no QP on that side */
	const struct ibv_qp_init_attr *srv_qp;
	struct rdma_conn_param *conn;     /* rdma_connect's parameters (NULL allowed with a QP) */
	struct rdma_conn_param *acc;      /* rdma_accept's parameters (NULL allowed with a QP) */
	int keep_events;                  /* keep (do not ack) the events below */
};

struct h_pair {
	struct rdma_event_channel *sch, *cch; /* server (listener) channel, client channel */
	struct rdma_cm_id *listen, *srv, *cli;
	uint16_t port;
	/* with keep_events: the CONNECT_REQUEST and both ESTABLISHED events, not acked */
	struct rdma_cm_event *req_ev, *cli_est, *srv_est;
	char err[512];
};

/* Listener on 127.0.0.1:port (or [::1]), client connects, server accepts: both ESTABLISHED. */
int h_pair_open(struct h_pair *p, uint16_t port, const struct h_pair_opts *o);

/* Only the first half: channels, listener, client resolved (addr + route), QP on the client
 * if asked. Then the caller connects. */
int h_pair_prepare(struct h_pair *p, uint16_t port, const struct h_pair_opts *o);

/* Acks kept events, disconnects (best effort), destroys QPs, ids and channels. */
void h_pair_close(struct h_pair *p);

/* ---- datagram ids (multicast pages) --------------------------------------------------------- */

struct h_ud {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	char err[256];
};

/* An RDMA_PS_UDP id on its own channel bound to 127.0.0.1 (port chosen), with a UD QP made by
 * rdma_create_qp (CQs by the rdma_cm) when with_qp. */
int h_ud_open(struct h_ud *u, int with_qp);
void h_ud_close(struct h_ud *u);
/* A multicast group address of this program: 239.192.<port >> 8>.<port & 255> (port k).
 * The group only names the group inside the provider; no test sends outside loopback. */
void h_mcast_addr(struct sockaddr_in *s, int k);

/* ---- an asynchronous server in its own thread (for synchronous clients) -------------------- */

struct h_server {
	/* settings (before h_server_start) */
	int family;                         /* AF_INET (default) or AF_INET6 */
	enum rdma_port_space ps;            /* RDMA_PS_TCP when 0 */
	int reject;                         /* reject requests instead of accepting them */
	const void *rej_data;
	uint8_t rej_len;
	int no_qp;                          /* accept without creating a QP (acc.qp_num then) */
	struct ibv_qp_init_attr qp;         /* QP of each accepted id (h_qp_attr RC 8 by default) */
	struct rdma_conn_param *acc;        /* rdma_accept's parameters (NULL allowed with a QP) */
	int disconnect_back;                /* answer DISCONNECTED with rdma_disconnect */
	/* results */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen;
	struct rdma_cm_id *conn[8];         /* ids of the accepted (or rejected) requests */
	volatile int requests, established, disconnected, errors;
	char err[256];
	/* private */
	pthread_t th;
	volatile int stop, started;
};

/* Binds (127.0.0.1 or ::1):port, listens, and handles the listener's events in a thread. */
int h_server_start(struct h_server *s, uint16_t port);
/* Stops the thread, destroys the accepted ids (QPs too), the listener and the channel. */
void h_server_stop(struct h_server *s);

#endif
