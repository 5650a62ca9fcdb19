// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_remote: the remap scenarios of tests/selftests/rdma_va.c with the two
 * sides on different nodes, connected by rdma_cm (address resolution by IP).
 *
 * The server (node b) owns the MR: for each request it maps a buffer, fills
 * it with pattern OLD, registers it (normal access flags, or VAMR_ACCESS_VA
 * with "server va"), changes what the address maps the way the scenario says,
 * lets the CPU write pattern NEW there, and hands address and rkey to the
 * client (node a), which RDMA READs or WRITEs it:
 *   munmap_mmap    syscall(SYS_munmap) + syscall(SYS_mmap, MAP_FIXED)
 *   madv_dontneed  syscall(SYS_madvise, MADV_DONTNEED)
 *   mremap_into    another buffer mremap()ed over the range (MREMAP_FIXED)
 *   fork           a child writes its copy and exits (the parent keeps its
 *                  pages: copy-on-pin for pinned MRs)
 * Outcome, as rdma_va prints it:
 *   CORRECT  read: the bytes the server's CPU sees; write: the server's CPU
 *            sees the client's bytes
 *   STALE    read: the old pages' bytes (OLD); write: the server's CPU still
 *            sees its own bytes (the data went to the old pages)
 *   CORRUPT  anything else;  WCERR  error completion;  REGFAIL  no MR
 *
 * usage: rdma_remote server [va] [port]
 *        rdma_remote client SERVER-IP MODE EXPECT [port]
 *   MODE    the column name printed ("stock", "va_mr", ...)
 *   EXPECT  normal | va: the semantics the client checks against
 *           (normal: STALE for the three remaps, CORRECT for fork;
 *            va: CORRECT everywhere)
 * The client prints "device <name>" (the RDMA device rdma_cm picked for
 * SERVER-IP), "# vamr-remote <scenario> <MODE> <op> <OUTCOME>" and one
 * line "pass <name>" or "fail <name> # why" per (scenario, op); exit status
 * 0 when every outcome was the expected one, 1 otherwise.
 *
 * Teardown (QUIT, disconnect, deregistration, endpoint destruction) runs
 * under a watchdog thread: if it has not finished after TEARDOWN_SECS, the
 * program prints the step it is stuck in and the kernel stack of each of its
 * other threads (/proc/self/task/N/stack), and exits with status 3. One step
 * is known to hang over the emulated link after every check has run, in
 * every MR mode: the client's rdma_disconnect() (Documentation/two-nodes.rst,
 * "Time"), and once the send completion of its QUIT message (the server had
 * received it; its ACK did not come back); stuck in one of those two, which
 * wait only on the link, the client prints the same and exits with its
 * checks' status instead.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/pattern.h"

#define BUF_LEN (16 * 4096)
#define DEFAULT_PORT "7471"
#define SEED_OLD 1000
#define SEED_NEW 1001
#define SEED_CHILD 1002
#define SEED_WRITE 1003
#define TEARDOWN_SECS 30

enum msg_type { MSG_REQ = 1, MSG_READY, MSG_DONE, MSG_RESULT, MSG_QUIT };
enum op { OP_READ, OP_WRITE };
enum outcome { CORRECT, STALE, CORRUPT, WCERR, REGFAIL };
static const char *const outcome_name[] = { "CORRECT", "STALE", "CORRUPT", "WCERR", "REGFAIL" };
static const char *const scenarios[] = { "munmap_mmap", "madv_dontneed", "mremap_into", "fork" };
#define N_SCENARIOS 4
/* What normal (pinned) MRs give per scenario; VA MRs: CORRECT everywhere. */
static const enum outcome normal_expect[N_SCENARIOS] = { STALE, STALE, STALE, CORRECT };

struct msg {
	uint32_t type;
	uint32_t scenario;
	uint32_t op;
	uint32_t outcome;
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

struct conn {
	struct rdma_cm_id *id;
	struct msg *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
};

/* The teardown step being run; read by the watchdog thread. */
static const char *volatile teardown_step;
/*
 * The client's teardown steps that wait only on the emulated link (see the
 * top): the QUIT message's send completion (the server's transport ACK) and
 * rdma_disconnect() (the rdma_cm handshake). Stuck in one of them after
 * every check ran, the client exits with its checks' status.
 */
#define QUIT_STEP "QUIT send completion"
#define KNOWN_HANG "rdma_disconnect (client)"
static volatile int checks_status;

static int link_bound(const char *step)
{
	return step && (!strcmp(step, QUIT_STEP) || !strcmp(step, KNOWN_HANG));
}

/*
 * The watchdog thread: if teardown has not ended (the process has not exited)
 * after TEARDOWN_SECS, say where it is stuck, show what every other thread of
 * the process waits for in the kernel, and exit with status 3. A thread, not
 * a signal handler: a signal would interrupt the very wait it must show.
 */
static void *teardown_watchdog(void *arg)
{
	char path[300], buf[4096];
	pid_t self = (pid_t)syscall(SYS_gettid);
	struct dirent *d;
	DIR *dir;
	ssize_t n;
	int fd;

	(void)arg;
	sleep(TEARDOWN_SECS);
	fprintf(stderr, "rdma_remote: teardown stuck in %s after %d s; kernel stacks:\n",
		teardown_step ? teardown_step : "?", TEARDOWN_SECS);
	dir = opendir("/proc/self/task");
	while (dir && (d = readdir(dir))) {
		if (d->d_name[0] == '.' || atoi(d->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stack", d->d_name);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		fprintf(stderr, "rdma_remote: task %s:\n", d->d_name);
		while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
			buf[n] = 0;
			fputs(buf, stderr);
		}
		close(fd);
	}
	fflush(stderr);
	fflush(stdout);
	_exit(link_bound(teardown_step) ? checks_status : 3);
}

/* Start the teardown watchdog; step() names each step as it starts. */
static void teardown_begin(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, teardown_watchdog, NULL) == 0)
		pthread_detach(t);
}

static void step(const char *what)
{
	teardown_step = what;
}

static void fail(const char *what)
{
	fprintf(stderr, "rdma_remote: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void conn_msgs(struct conn *c)
{
	c->sbuf = calloc(1, sizeof(*c->sbuf));
	c->rbuf = calloc(1, sizeof(*c->rbuf));
	if (!c->sbuf || !c->rbuf)
		fail("calloc");
	c->smr = rdma_reg_msgs(c->id, c->sbuf, sizeof(*c->sbuf));
	c->rmr = rdma_reg_msgs(c->id, c->rbuf, sizeof(*c->rbuf));
	if (!c->smr || !c->rmr)
		fail("rdma_reg_msgs");
}

static void post_recv(struct conn *c)
{
	if (rdma_post_recv(c->id, NULL, c->rbuf, sizeof(*c->rbuf), c->rmr))
		fail("rdma_post_recv");
}

/* Send *c->sbuf; the receive for the answer was posted before. */
static void send_msg(struct conn *c)
{
	struct ibv_wc wc;

	if (rdma_post_send(c->id, NULL, c->sbuf, sizeof(*c->sbuf), c->smr, IBV_SEND_SIGNALED))
		fail("rdma_post_send");
	if (rdma_get_send_comp(c->id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rdma_remote: send failed: %s\n",
			ibv_wc_status_str(wc.status));
		exit(2);
	}
}

static struct msg recv_msg(struct conn *c)
{
	struct ibv_wc wc;
	struct msg m;

	int n = rdma_get_recv_comp(c->id, &wc);

	if (n <= 0 || wc.status != IBV_WC_SUCCESS) {
		if (n <= 0)
			fprintf(stderr, "rdma_remote: receive failed: %s\n", strerror(errno));
		else
			fprintf(stderr, "rdma_remote: receive failed: %s (vendor error %u)\n",
				ibv_wc_status_str(wc.status), wc.vendor_err);
		exit(2);
	}
	m = *c->rbuf;
	post_recv(c);
	return m;
}

static struct rdma_addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct rdma_addrinfo hints = { 0 }, *res;

	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(host, port, &hints, &res)) {
		fprintf(stderr, "rdma_remote: rdma_getaddrinfo %s:%s failed\n", host ? host : "*", port);
		exit(2);
	}
	return res;
}

static void qp_attr(struct ibv_qp_init_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->cap.max_send_wr = attr->cap.max_recv_wr = 4;
	attr->cap.max_send_sge = attr->cap.max_recv_sge = 1;
	attr->cap.max_inline_data = 0;
	attr->sq_sig_all = 0;
	attr->qp_type = IBV_QPT_RC;
}

/* --- server --- */

struct target {
	uint8_t *a;
	struct ibv_mr *mr;
	uint8_t before[BUF_LEN];
};

static uint8_t *map_anon(void)
{
	void *p = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		fail("mmap");
	return p;
}

/* Map, fill, register, remap: what the client will access. */
static void prepare(struct conn *c, struct target *t, unsigned int scenario, unsigned int access)
{
	uint8_t *b;
	pid_t pid;
	int status;

	t->a = map_anon();
	pattern_fill(t->a, BUF_LEN, SEED_OLD, 0);
	t->mr = ibv_reg_mr(c->id->pd, t->a, BUF_LEN, access);
	if (!t->mr)
		return;
	switch (scenario) {
	case 0:
		if (syscall(SYS_munmap, t->a, BUF_LEN))
			fail("munmap");
		if ((void *)syscall(SYS_mmap, t->a, BUF_LEN, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != t->a)
			fail("mmap MAP_FIXED");
		break;
	case 1:
		if (syscall(SYS_madvise, t->a, BUF_LEN, MADV_DONTNEED))
			fail("madvise");
		break;
	case 2:
		b = map_anon();
		if (mremap(b, BUF_LEN, BUF_LEN, MREMAP_MAYMOVE | MREMAP_FIXED, t->a) != t->a)
			fail("mremap");
		break;
	case 3:
		pid = fork();
		if (pid < 0)
			fail("fork");
		if (pid == 0) {
			pattern_fill(t->a, BUF_LEN, SEED_CHILD, 0);
			_exit(0);
		}
		if (waitpid(pid, &status, 0) != pid)
			fail("waitpid");
		break;
	}
	/* What the CPU sees from now on. */
	pattern_fill(t->a, BUF_LEN, SEED_NEW, 0);
	memcpy(t->before, t->a, BUF_LEN);
}

static enum outcome classify_write(struct target *t)
{
	if (pattern_check(t->a, BUF_LEN, SEED_WRITE, 0) == PATTERN_OK)
		return CORRECT;
	if (!memcmp(t->a, t->before, BUF_LEN))
		return STALE;
	return CORRUPT;
}

static int server(int argc, char **argv)
{
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	const char *port = DEFAULT_PORT;
	struct rdma_cm_id *listen_id;
	struct ibv_qp_init_attr attr;
	struct rdma_addrinfo *res;
	static struct target t;
	struct conn c = { 0 };
	int i;

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "va"))
			access |= VAMR_ACCESS_VA;
		else
			port = argv[i];
	}
	res = resolve(NULL, port, 1);
	qp_attr(&attr);
	if (rdma_create_ep(&listen_id, res, NULL, &attr))
		fail("rdma_create_ep (listen)");
	if (rdma_listen(listen_id, 1))
		fail("rdma_listen");
	fprintf(stderr, "rdma_remote: server listening on port %s (%s MRs)\n", port,
		access & VAMR_ACCESS_VA ? "VA" : "normal");
	if (rdma_get_request(listen_id, &c.id))
		fail("rdma_get_request");
	conn_msgs(&c);
	post_recv(&c);
	if (rdma_accept(c.id, NULL))
		fail("rdma_accept");
	for (;;) {
		struct msg m = recv_msg(&c);

		if (m.type == MSG_QUIT)
			break;
		if (m.type != MSG_REQ || m.scenario >= N_SCENARIOS) {
			fprintf(stderr, "rdma_remote: unexpected message %u\n", m.type);
			return 2;
		}
		prepare(&c, &t, m.scenario, access);
		memset(c.sbuf, 0, sizeof(*c.sbuf));
		c.sbuf->type = MSG_READY;
		c.sbuf->addr = (uintptr_t)t.a;
		c.sbuf->len = BUF_LEN;
		c.sbuf->rkey = t.mr ? t.mr->rkey : 0;
		c.sbuf->outcome = t.mr ? CORRECT : REGFAIL;
		send_msg(&c);
		m = recv_msg(&c);
		if (m.type != MSG_DONE)
			return 2;
		memset(c.sbuf, 0, sizeof(*c.sbuf));
		c.sbuf->type = MSG_RESULT;
		c.sbuf->outcome = m.op == OP_WRITE && t.mr ? classify_write(&t) : CORRECT;
		if (t.mr)
			ibv_dereg_mr(t.mr);
		munmap(t.a, BUF_LEN);
		send_msg(&c);
	}
	teardown_begin();
	step("rdma_disconnect");
	rdma_disconnect(c.id);
	step("rdma_dereg_mr (messages)");
	rdma_dereg_mr(c.smr);
	rdma_dereg_mr(c.rmr);
	step("rdma_destroy_ep (connection)");
	rdma_destroy_ep(c.id);
	step("rdma_destroy_ep (listener)");
	rdma_destroy_ep(listen_id);
	rdma_freeaddrinfo(res);
	return 0;
}

/* --- client --- */

static int client(int argc, char **argv)
{
	const char *port = argc > 5 ? argv[5] : DEFAULT_PORT;
	const char *mode, *expect;
	struct ibv_qp_init_attr attr;
	struct rdma_addrinfo *res;
	struct conn c = { 0 };
	struct ibv_mr *lmr;
	uint8_t *local;
	unsigned int s, op;
	int bad = 0, broken = 0;

	if (argc < 5)
		return 2;
	mode = argv[3];
	expect = argv[4];
	res = resolve(argv[2], port, 0);
	qp_attr(&attr);
	if (rdma_create_ep(&c.id, res, NULL, &attr))
		fail("rdma_create_ep");
	conn_msgs(&c);
	post_recv(&c);
	if (rdma_connect(c.id, NULL))
		fail("rdma_connect");
	/* The RDMA device the CM picked for SERVER-IP (node-a.sh checks it). */
	printf("device %s\n", ibv_get_device_name(c.id->verbs->device));
	local = map_anon();
	lmr = ibv_reg_mr(c.id->pd, local, BUF_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!lmr)
		fail("ibv_reg_mr (local)");
	for (s = 0; s < N_SCENARIOS; s++) {
		for (op = OP_READ; op <= OP_WRITE; op++) {
			enum outcome got, want = strcmp(expect, "va") ? normal_expect[s] : CORRECT;
			const char *opn = op == OP_READ ? "read" : "write";
			struct ibv_wc wc;
			struct msg m;
			int st;

			if (broken) {
				printf("fail %s.%s # not run: the QP broke earlier\n", scenarios[s], opn);
				bad = 1;
				continue;
			}
			memset(c.sbuf, 0, sizeof(*c.sbuf));
			c.sbuf->type = MSG_REQ;
			c.sbuf->scenario = s;
			c.sbuf->op = op;
			send_msg(&c);
			m = recv_msg(&c);
			if (m.type != MSG_READY)
				return 2;
			got = m.outcome;
			if (got == CORRECT) {
				if (op == OP_WRITE) {
					pattern_fill(local, BUF_LEN, SEED_WRITE, 0);
					st = rdma_post_write(c.id, NULL, local, BUF_LEN, lmr, IBV_SEND_SIGNALED,
							     m.addr, m.rkey);
				} else {
					memset(local, 0, BUF_LEN);
					st = rdma_post_read(c.id, NULL, local, BUF_LEN, lmr, IBV_SEND_SIGNALED,
							    m.addr, m.rkey);
				}
				if (st)
					fail("rdma_post_write/read");
				if (rdma_get_send_comp(c.id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
					got = WCERR;
					broken = 1;
				} else if (op == OP_READ) {
					if (pattern_check(local, BUF_LEN, SEED_NEW, 0) == PATTERN_OK)
						got = CORRECT;
					else if (pattern_check(local, BUF_LEN, SEED_OLD, 0) == PATTERN_OK)
						got = STALE;
					else
						got = CORRUPT;
				}
			}
			if (!broken) {
				memset(c.sbuf, 0, sizeof(*c.sbuf));
				c.sbuf->type = MSG_DONE;
				c.sbuf->op = op;
				send_msg(&c);
				m = recv_msg(&c);
				if (m.type != MSG_RESULT)
					return 2;
				if (op == OP_WRITE && got == CORRECT)
					got = m.outcome;
			}
			printf("# vamr-remote %s %s %s %s\n", scenarios[s], mode, opn, outcome_name[got]);
			if (got == want) {
				printf("pass %s.%s\n", scenarios[s], opn);
			} else {
				printf("fail %s.%s # %s, expected %s\n", scenarios[s], opn,
				       outcome_name[got], outcome_name[want]);
				bad = 1;
			}
			fflush(stdout);
		}
	}
	fflush(stdout);
	checks_status = bad;
	teardown_begin();
	if (!broken) {
		step(QUIT_STEP);
		memset(c.sbuf, 0, sizeof(*c.sbuf));
		c.sbuf->type = MSG_QUIT;
		send_msg(&c);
	}
	step("ibv_dereg_mr (local)");
	ibv_dereg_mr(lmr);
	step(KNOWN_HANG);
	rdma_disconnect(c.id);
	step("rdma_dereg_mr (messages)");
	rdma_dereg_mr(c.smr);
	rdma_dereg_mr(c.rmr);
	step("rdma_destroy_ep");
	rdma_destroy_ep(c.id);
	rdma_freeaddrinfo(res);
	return bad;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "server"))
		return server(argc, argv);
	if (argc >= 5 && !strcmp(argv[1], "client"))
		return client(argc, argv);
	fprintf(stderr, "usage: rdma_remote server [va] [port]\n"
			"       rdma_remote client SERVER-IP MODE normal|va [port]\n");
	return 2;
}
