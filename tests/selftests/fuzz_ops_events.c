// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the events thread's operations: read, poll and close of events
 * files, and the checks of the records read.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

/* ---- events ---------------------------------------------------------- */

#define NR_QSTATE 256
static struct { int qid; uint64_t gen; } qstate[NR_QSTATE];

static void check_records(const struct vamr_event *ev, size_t n, int qid)
{
	unsigned int slot = (unsigned int)qid % NR_QSTATE;
	size_t i;

	if (qstate[slot].qid != qid) {
		qstate[slot].qid = qid;
		qstate[slot].gen = 0;
	}
	for (i = 0; i < n; i++) {
		const struct vamr_event *e = &ev[i];

		if (e->kind == VAMR_EVENT_OVERFLOW) {
			if (e->handle || e->cookie || !e->len)
				violation(K_ev_read, "overflow record handle %u cookie %#llx lost %llu",
					  e->handle, (unsigned long long)e->cookie,
					  (unsigned long long)e->len);
		} else if (e->kind >= VAMR_EVENT_COUNT) {
			violation(K_ev_read, "record of unknown kind %u", e->kind);
		} else if (e->cookie >> 48 != COOKIE_MAGIC) {
			violation(K_ev_read, "record with cookie %#llx we never gave",
				  (unsigned long long)e->cookie);
		} else if (!e->len) {
			violation(K_ev_read, "record of 0 bytes (kind %u)", e->kind);
		}
		/*
		 * Generations grow by one per record, delivered or lost. The
		 * overflow report carries the counter at the time it is read,
		 * which may equal the generation of the record just before it
		 * (records queued after the losses come out first).
		 */
		if (e->generation < qstate[slot].gen ||
		    (e->generation == qstate[slot].gen && e->kind != VAMR_EVENT_OVERFLOW))
			violation(K_ev_read, "queue %d: generation %llu after %llu", qid,
				  (unsigned long long)e->generation,
				  (unsigned long long)qstate[slot].gen);
		qstate[slot].gen = e->generation;
	}
}

static bool ev_pick(struct thr *t, struct event *out)
{
	bool got = false;

	pthread_mutex_lock(&G.ev_lock);
	if (G.nev) {
		*out = G.ev[below(&t->rng, G.nev)];
		got = true;
	}
	pthread_mutex_unlock(&G.ev_lock);
	return got;
}

void op_ev_read(struct thr *t, bool blocking)
{
	struct rng *r = &t->rng;
	enum kind k = blocking ? K_ev_read_blocking : K_ev_read;
	struct vamr_event recs[32];
	struct event e;
	size_t rec = sizeof(struct vamr_event), len;
	unsigned int c = (unsigned int)below(r, 100);
	void *buf = recs;
	bool bad = false, unstable = false;
	ssize_t n;
	int ret;

	if (!ev_pick(t, &e))
		return;
	if (blocking && !e.nonblock && !t->timer_ok)
		return;		/* nothing would end the wait */
	if (!blocking && !e.nonblock) {
		struct pollfd pfd = { .fd = e.fd, .events = POLLIN };

		if (poll(&pfd, 1, 0) != 1)
			return;		/* would block: only the timed variant may */
	}
	if (c < 10)
		len = below(r, rec);			/* too small */
	else if (c < 70)
		len = rec * (1 + below(r, 32)) + below(r, rec);
	else if (c < 80) {
		len = rec * (1 + below(r, 4));
		buf = NULL;
		bad = true;
	} else if (c < 85) {
		len = rec;
		buf = (void *)(uintptr_t)bad_addrs[below(r, NR_BAD_ADDRS)];
		bad = true;
	} else if (c < 90) {
		len = rec * (1 + below(r, 4));
		buf = t->argbuf + PAGE;		/* PROT_NONE */
		bad = true;
	} else {
		len = rec * (1 + below(r, ARG_SLICE / rec));
		buf = G.argpg + t->idx * ARG_SLICE;
		unstable = true;
	}
	if (blocking && t->timer_ok) {
		/*
		 * First after 1-30 ms, then every 10 ms until disarmed: a thread
		 * delayed past the first expiry before it enters read() (a loaded
		 * host under TCG) takes that signal outside the wait, and a one-shot
		 * timer would leave the read blocked until an event came ("workers
		 * still running" at teardown).
		 */
		struct itimerspec its = {
			.it_value = { 0, (long)(1 + below(r, 30)) * 1000000L },
			.it_interval = { 0, 10 * 1000000L },
		};

		timer_settime(t->timer, 0, &its, NULL);
	}
	n = read(e.fd, buf, len);
	ret = n < 0 ? errno : 0;
	if (blocking && t->timer_ok) {
		struct itimerspec off = { 0 };

		timer_settime(t->timer, 0, &off, NULL);
	}
	op_result(k, ret);
	if (ret == EBADF)
		return;		/* closed meanwhile by nobody else: cannot happen */
	if (len < rec) {
		if (ret != EINVAL)
			violation(k, "read of %zu bytes (less than a record): %s, expected EINVAL",
				  len, ename(ret));
		return;
	}
	if (ret) {
		if (ret != EAGAIN && ret != EINTR && !(ret == EFAULT && (bad || unstable)))
			violation(k, "read of an events file: %s", ename(ret));
		if (ret == EAGAIN && blocking && !e.nonblock)
			violation(k, "blocking read returned EAGAIN");
		return;
	}
	/* End of file: every events file here outlives its /dev/vamr file (op_fd_lifecycle). */
	if (n == 0)
		return;
	if (bad) {
		violation(k, "read into %p succeeded (%zd bytes)", buf, n);
		return;
	}
	if ((size_t)n % rec || (size_t)n > len)
		violation(k, "read of %zu bytes returned %zd", len, n);
	else if (!unstable)
		check_records(recs, (size_t)n / rec, e.qid);
}

void op_ev_poll(struct thr *t)
{
	struct pollfd pfd[MAX_EVFDS];
	int n = 0, i, ret;

	pthread_mutex_lock(&G.ev_lock);
	for (i = 0; i < G.nev; i++)
		if (chance(&t->rng, 50))
			pfd[n++] = (struct pollfd){ .fd = G.ev[i].fd, .events = POLLIN | POLLOUT };
	pthread_mutex_unlock(&G.ev_lock);
	ret = poll(pfd, n, (int)below(&t->rng, 20)) < 0 ? errno : 0;
	op_result(K_ev_poll, ret);
	if (ret && ret != EINTR)
		violation(K_ev_poll, "poll of %d events files: %s", n, ename(ret));
	for (i = 0; !ret && i < n; i++)
		if (pfd[i].revents & ~(POLLIN | POLLRDNORM | POLLHUP))
			violation(K_ev_poll, "poll revents %#x", pfd[i].revents);
}

void op_ev_close(struct thr *t)
{
	struct event e;
	bool got = false;
	int ret;

	pthread_mutex_lock(&G.ev_lock);
	if (G.nev) {
		int i = (int)below(&t->rng, G.nev);

		e = G.ev[i];
		G.ev[i] = G.ev[--G.nev];
		got = true;
	}
	pthread_mutex_unlock(&G.ev_lock);
	if (!got)
		return;
	ret = close(e.fd) ? errno : 0;
	op_result(K_ev_close, ret);
	if (ret)
		violation(K_ev_close, "close of events fd %d: %s", e.fd, ename(ret));
}
