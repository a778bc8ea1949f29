/* RDMA setup helpers of the conformance tests: see cmhelp.h. */
#include "cmhelp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

static void seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

long long h_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void h_sin(struct sockaddr_in *s, const char *ip, uint16_t port)
{
	memset(s, 0, sizeof *s);
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	inet_pton(AF_INET, ip, &s->sin_addr);
}

void h_sin6(struct sockaddr_in6 *s, const char *ip, uint16_t port)
{
	memset(s, 0, sizeof *s);
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	inet_pton(AF_INET6, ip, &s->sin6_addr);
}

struct rdma_cm_event *h_get(struct rdma_event_channel *ch, int ms)
{
	/* poll, then fetch without blocking: a channel that signals readiness with no event to
	 * deliver must not hang the test (the wait simply goes on until the deadline). */
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	long long end = h_now_ms() + ms;
	for (;;) {
		int left = (int)(end - h_now_ms());
		if (left < 0)
			left = 0;
		int r = poll(&pfd, 1, left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return NULL;
		if (r == 0) {
			errno = ETIMEDOUT;
			return NULL;
		}
		int fl = fcntl(ch->fd, F_GETFL);
		fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
		struct rdma_cm_event *ev = NULL;
		int rc = rdma_get_cm_event(ch, &ev);
		int e = errno;
		fcntl(ch->fd, F_SETFL, fl);
		if (rc == 0)
			return ev;
		if (e != EAGAIN) {
			errno = e;
			return NULL;
		}
		if (h_now_ms() >= end) {
			errno = ETIMEDOUT;
			return NULL;
		}
		h_sleep_ms(1); /* readable but nothing to get: keep waiting */
	}
}

int h_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int ms,
	     struct rdma_cm_event **out, char *err, size_t errlen)
{
	struct rdma_cm_event *ev = h_get(ch, ms);
	if (!ev) {
		seterr(err, errlen, "no %s within %d ms (%s)", rdma_event_str(want), ms,
		       conf_errname(errno));
		return -1;
	}
	if (ev->event != want) {
		seterr(err, errlen, "got %s (status %d) instead of %s", rdma_event_str(ev->event),
		       ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (out)
		*out = ev;
	else
		rdma_ack_cm_event(ev);
	return 0;
}

int h_quiet(struct rdma_event_channel *ch, int ms, char *err, size_t errlen)
{
	struct rdma_cm_event *ev = h_get(ch, ms);
	if (!ev)
		return 1;
	seterr(err, errlen, "unexpected %s (status %d)", rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return 0;
}

struct ibv_qp_init_attr h_qp_attr(enum ibv_qp_type type, int depth, int sig_all)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = type;
	a.cap.max_send_wr = (uint32_t)depth;
	a.cap.max_recv_wr = (uint32_t)depth;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 2;
	a.cap.max_inline_data = 64;
	a.sq_sig_all = sig_all;
	return a;
}

int h_poll(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long long end = h_now_ms() + ms;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n < 0 ? -1 : 1;
		if (h_now_ms() >= end)
			return 0;
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
}

int h_query_device(struct rdma_cm_id *id, struct ibv_device_attr *attr)
{
	memset(attr, 0, sizeof *attr);
	if (!id || !id->verbs)
		return -1;
	return ibv_query_device(id->verbs, attr) == 0 ? 0 : -1;
}

/* ---- pair ------------------------------------------------------------------------------- */

static void pair_addr(const struct h_pair_opts *o, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (o && o->family == AF_INET6)
		h_sin6((struct sockaddr_in6 *)ss, "::1", port);
	else
		h_sin((struct sockaddr_in *)ss, "127.0.0.1", port);
}

int h_pair_prepare(struct h_pair *p, uint16_t port, const struct h_pair_opts *o)
{
	static const struct h_pair_opts none;
	if (!o)
		o = &none;
	enum rdma_port_space ps = o->ps ? o->ps : RDMA_PS_TCP;
	memset(p, 0, sizeof *p);
	p->port = port;
	struct sockaddr_storage addr;
	pair_addr(o, port, &addr);

	p->sch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	if (!p->sch || !p->cch) {
		seterr(p->err, sizeof p->err, "rdma_create_event_channel: %s", conf_errname(errno));
		return -1;
	}
	if (rdma_create_id(p->sch, &p->listen, p, ps) != 0) {
		seterr(p->err, sizeof p->err, "rdma_create_id(listener): %s", conf_errname(errno));
		return -1;
	}
	if (rdma_bind_addr(p->listen, (struct sockaddr *)&addr) != 0) {
		seterr(p->err, sizeof p->err, "rdma_bind_addr(port %u): %s", port, conf_errname(errno));
		return -1;
	}
	if (rdma_listen(p->listen, 8) != 0) {
		seterr(p->err, sizeof p->err, "rdma_listen: %s", conf_errname(errno));
		return -1;
	}
	if (rdma_create_id(p->cch, &p->cli, p, ps) != 0) {
		seterr(p->err, sizeof p->err, "rdma_create_id(client): %s", conf_errname(errno));
		return -1;
	}
	if (rdma_resolve_addr(p->cli, NULL, (struct sockaddr *)&addr, 2000) != 0) {
		seterr(p->err, sizeof p->err, "rdma_resolve_addr: %s", conf_errname(errno));
		return -1;
	}
	char e[256];
	if (h_expect(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, e, sizeof e) != 0) {
		seterr(p->err, sizeof p->err, "client: %s", e);
		return -1;
	}
	if (rdma_resolve_route(p->cli, 2000) != 0) {
		seterr(p->err, sizeof p->err, "rdma_resolve_route: %s", conf_errname(errno));
		return -1;
	}
	if (h_expect(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, e, sizeof e) != 0) {
		seterr(p->err, sizeof p->err, "client: %s", e);
		return -1;
	}
	if (o->cli_qp) {
		struct ibv_qp_init_attr a = *o->cli_qp;
		if (rdma_create_qp(p->cli, NULL, &a) != 0) {
			seterr(p->err, sizeof p->err, "rdma_create_qp(client): %s", conf_errname(errno));
			return -1;
		}
	}
	return 0;
}

int h_pair_open(struct h_pair *p, uint16_t port, const struct h_pair_opts *o)
{
	static const struct h_pair_opts none;
	if (!o)
		o = &none;
	if (h_pair_prepare(p, port, o) != 0)
		return -1;
	char e[256];
	if (rdma_connect(p->cli, o->conn) != 0) {
		seterr(p->err, sizeof p->err, "rdma_connect: %s", conf_errname(errno));
		return -1;
	}
	struct rdma_cm_event *req;
	if (h_expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, e, sizeof e) != 0) {
		seterr(p->err, sizeof p->err, "server: %s", e);
		return -1;
	}
	p->srv = req->id;
	if (o->srv_qp) {
		struct ibv_qp_init_attr a = *o->srv_qp;
		if (rdma_create_qp(p->srv, NULL, &a) != 0) {
			seterr(p->err, sizeof p->err, "rdma_create_qp(server): %s", conf_errname(errno));
			rdma_ack_cm_event(req);
			return -1;
		}
	}
	if (rdma_accept(p->srv, o->acc) != 0) {
		seterr(p->err, sizeof p->err, "rdma_accept: %s", conf_errname(errno));
		rdma_ack_cm_event(req);
		return -1;
	}
	if (o->keep_events)
		p->req_ev = req;
	else
		rdma_ack_cm_event(req);
	enum rdma_cm_event_type cli_want = o->cli_qp ? RDMA_CM_EVENT_ESTABLISHED
						     : RDMA_CM_EVENT_CONNECT_RESPONSE;
	if (h_expect(p->cch, cli_want, H_WAIT_MS, o->keep_events ? &p->cli_est : NULL, e,
		     sizeof e) != 0) {
		seterr(p->err, sizeof p->err, "client: %s", e);
		return -1;
	}
	if (!o->cli_qp) {
		if (rdma_establish(p->cli) != 0) {
			seterr(p->err, sizeof p->err, "rdma_establish: %s", conf_errname(errno));
			return -1;
		}
	}
	if (h_expect(p->sch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, o->keep_events ? &p->srv_est : NULL,
		     e, sizeof e) != 0) {
		seterr(p->err, sizeof p->err, "server: %s", e);
		return -1;
	}
	return 0;
}

static void drain(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	while ((ev = h_get(ch, 0)) != NULL)
		rdma_ack_cm_event(ev);
}

void h_pair_close(struct h_pair *p)
{
	struct rdma_cm_event **kept[] = { &p->req_ev, &p->cli_est, &p->srv_est };
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
		if (*kept[i]) {
			rdma_ack_cm_event(*kept[i]);
			*kept[i] = NULL;
		}
	}
	if (p->cli && p->srv) {
		rdma_disconnect(p->cli);
		/* both sides see DISCONNECTED; wait a little for them so that destroy is clean */
		int got_c = 0, got_s = 0;
		long long end = h_now_ms() + 500;
		while ((!got_c || !got_s) && h_now_ms() < end) {
			struct rdma_cm_event *ev;
			if (!got_c && (ev = h_get(p->cch, 5)) != NULL) {
				got_c |= ev->event == RDMA_CM_EVENT_DISCONNECTED;
				rdma_ack_cm_event(ev);
			}
			if (!got_s && (ev = h_get(p->sch, 5)) != NULL) {
				got_s |= ev->event == RDMA_CM_EVENT_DISCONNECTED;
				rdma_ack_cm_event(ev);
			}
		}
	}
	if (p->sch)
		drain(p->sch);
	if (p->cch)
		drain(p->cch);
	if (p->srv) {
		if (p->srv->qp)
			rdma_destroy_qp(p->srv);
		rdma_destroy_id(p->srv);
	}
	if (p->cli) {
		if (p->cli->qp)
			rdma_destroy_qp(p->cli);
		rdma_destroy_id(p->cli);
	}
	if (p->listen)
		rdma_destroy_id(p->listen);
	if (p->sch)
		rdma_destroy_event_channel(p->sch);
	if (p->cch)
		rdma_destroy_event_channel(p->cch);
	memset(p, 0, sizeof *p);
}

/* ---- threaded server ---------------------------------------------------------------------- */

static void *server_main(void *arg)
{
	struct h_server *s = arg;
	while (!s->stop) {
		struct rdma_cm_event *ev = h_get(s->ch, 50);
		if (!ev)
			continue;
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct rdma_cm_id *id = ev->id;
			int n = s->requests;
			if (n < 8)
				s->conn[n] = id;
			if (s->reject) {
				if (rdma_reject(id, s->rej_data, s->rej_len) != 0) {
					s->errors++;
					seterr(s->err, sizeof s->err, "rdma_reject: %s", conf_errname(errno));
				}
			} else {
				struct ibv_qp_init_attr a = s->qp;
				if (!s->no_qp && rdma_create_qp(id, NULL, &a) != 0) {
					s->errors++;
					seterr(s->err, sizeof s->err, "rdma_create_qp: %s", conf_errname(errno));
				} else if (rdma_accept(id, s->acc) != 0) {
					s->errors++;
					seterr(s->err, sizeof s->err, "rdma_accept: %s", conf_errname(errno));
				}
			}
			__atomic_add_fetch(&s->requests, 1, __ATOMIC_SEQ_CST);
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			__atomic_add_fetch(&s->established, 1, __ATOMIC_SEQ_CST);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			if (s->disconnect_back)
				rdma_disconnect(ev->id);
			__atomic_add_fetch(&s->disconnected, 1, __ATOMIC_SEQ_CST);
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

int h_server_start(struct h_server *s, uint16_t port)
{
	if (!s->qp.qp_type)
		s->qp = h_qp_attr(IBV_QPT_RC, 8, 1);
	s->ch = rdma_create_event_channel();
	if (!s->ch) {
		seterr(s->err, sizeof s->err, "rdma_create_event_channel: %s", conf_errname(errno));
		return -1;
	}
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	if (s->family == AF_INET6)
		h_sin6((struct sockaddr_in6 *)&ss, "::1", port);
	else
		h_sin((struct sockaddr_in *)&ss, "127.0.0.1", port);
	if (rdma_create_id(s->ch, &s->listen, s, s->ps ? s->ps : RDMA_PS_TCP) != 0 ||
	    rdma_bind_addr(s->listen, (struct sockaddr *)&ss) != 0 || rdma_listen(s->listen, 8) != 0) {
		seterr(s->err, sizeof s->err, "server listen on port %u: %s", port, conf_errname(errno));
		return -1;
	}
	if (pthread_create(&s->th, NULL, server_main, s) != 0) {
		seterr(s->err, sizeof s->err, "pthread_create failed");
		return -1;
	}
	s->started = 1;
	return 0;
}

void h_server_stop(struct h_server *s)
{
	if (s->started) {
		s->stop = 1;
		pthread_join(s->th, NULL);
		s->started = 0;
	}
	if (s->ch) {
		struct rdma_cm_event *ev;
		while ((ev = h_get(s->ch, 0)) != NULL)
			rdma_ack_cm_event(ev);
	}
	for (int i = 0; i < 8 && i < s->requests; i++) {
		if (!s->conn[i])
			continue;
		if (s->conn[i]->qp)
			rdma_destroy_qp(s->conn[i]);
		rdma_destroy_id(s->conn[i]);
		s->conn[i] = NULL;
	}
	if (s->listen)
		rdma_destroy_id(s->listen);
	if (s->ch)
		rdma_destroy_event_channel(s->ch);
	s->listen = NULL;
	s->ch = NULL;
}

/* ---- datagram ids -------------------------------------------------------------------------- */

int h_ud_open(struct h_ud *u, int with_qp)
{
	memset(u, 0, sizeof *u);
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	u->ch = rdma_create_event_channel();
	if (!u->ch || rdma_create_id(u->ch, &u->id, u, RDMA_PS_UDP) != 0 ||
	    rdma_bind_addr(u->id, (struct sockaddr *)&lo) != 0) {
		seterr(u->err, sizeof u->err, "UD id bound to 127.0.0.1: %s", conf_errname(errno));
		return -1;
	}
	if (with_qp) {
		struct ibv_qp_init_attr a = h_qp_attr(IBV_QPT_UD, 8, 1);
		if (rdma_create_qp(u->id, NULL, &a) != 0) {
			seterr(u->err, sizeof u->err, "rdma_create_qp(UD): %s", conf_errname(errno));
			return -1;
		}
	}
	return 0;
}

void h_ud_close(struct h_ud *u)
{
	if (u->ch) {
		struct rdma_cm_event *ev;
		while ((ev = h_get(u->ch, 0)) != NULL)
			rdma_ack_cm_event(ev);
	}
	if (u->id) {
		if (u->id->qp)
			rdma_destroy_qp(u->id);
		rdma_destroy_id(u->id);
	}
	if (u->ch)
		rdma_destroy_event_channel(u->ch);
	memset(u, 0, sizeof *u);
}

void h_mcast_addr(struct sockaddr_in *s, int k)
{
	uint16_t p = conf_port(k);
	char ip[32];
	snprintf(ip, sizeof ip, "239.192.%u.%u", p >> 8, p & 0xff);
	h_sin(s, ip, 0);
}
