// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_devremove: removal of an rxe device, and events of its netdev, while a
 * process holds VA MRs (VAMR_ACCESS_VA) with RDMA traffic in flight: the
 * classic source of rxe bugs (syzbot's reports on rxe unregistration and
 * netdev removal). The tests never touch the guest's rxe0 (on lo), which
 * every other test needs: their device, rxedr, is bound to the lo of a
 * network namespace of their own, vamrdr (the test kernel has no veth or
 * dummy driver; a namespace's lo goes down, up and away like any netdev).
 * Both QPs of a pair are on rxedr (rxe's loopback). The device is made once
 * and kept from test to test (about a second of guest time to add one); a
 * test that removes it adds it again when it needs it, and a failed test's
 * teardown and the end of the program remove rxedr and the namespace.
 *
 * rxe in Linux 7.3 has a disassociate_ucontext (an empty one), so removing
 * the device does not wait for its users: ib_uverbs destroys their QPs, CQs
 * and MRs (RDMA_REMOVE_DRIVER_REMOVE) and returns while they live on with
 * dead contexts. A holder is a forked child with a VA MR of 16 pages (pattern
 * written and checked, then pages 4..5 and 8..11 remapped, 8..11 under a
 * userfaultfd nobody answers), a WRITE from one QP waiting in the on-demand
 * pin of page 8, and 12 WRITEs from the other QP in flight (on-demand pins of
 * pages 4..5); the parent observes.
 *
 *   netdev_down_up  `ip link set lo down` in the namespace with 16 WRITEs in
 *                 flight to a VA MR: every completion a success with the
 *                 right bytes or an error; one more WRITE while down, the
 *                 same; after `up` and QP recovery, WRITE and READ through
 *                 the same MR after a remap move the right bytes.
 *   dellink_with_holder  while the holder lives: `rmmod rdma_rxe` and `rmmod
 *                 vamr` refused (module in use), then `rdma link delete`
 *                 returns (the waiting pin cancelled), the device gone, the
 *                 holder's VmPin back to where it was before registering,
 *                 vamr's global regions and pages_pinned back to their
 *                 baseline, VAMR_IOC_MR_QUERY of the MR on the holder's
 *                 /dev/vamr file ENOENT; the WRITEs in flight completed with
 *                 their bytes or not at all; the holder exits cleanly; no
 *                 kernel complaint; the device added again moves the right
 *                 bytes through a VA MR after a remap.
 *   netdev_delete_with_holder  `ip netns del` (rxe's netdev notifier queues
 *                 the unregistration, NETDEV_UNREGISTER) while the holder
 *                 lives: a WRITE of the holder right after is a success with
 *                 the right bytes or an error, never a hang; the device goes,
 *                 VmPin, counters and MR query as above, no kernel complaint.
 *   dellink_and_netdev_unregister  a second device, rxedr2, over a sit
 *                 tunnel in the namespace; `rdma link delete rxedr2` kept
 *                 waiting by a child whose VA MR registration waits for a
 *                 userfault (inside the REG_MR command, which the removal's
 *                 disassociation waits for), then `ip link del` of the tunnel
 *                 (NETDEV_UNREGISTER while the delete waits): rxedr keeps the
 *                 namespace's UDP port 4791 sockets (the stock rxe dropped
 *                 rxedr2's reference twice, fixed by patches/rxe 0013) and
 *                 still moves the right bytes; both commands finish once the
 *                 child is killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "kmsg_util.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "uffd_util.h"
#include "vamr_lib.h"

#define ACC_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_VA (ACC_REMOTE | VAMR_ACCESS_VA)

/* The test's network namespace, whose lo carries the test's rxe device. */
#define NETNS "vamrdr"
#define IBDEV "rxedr"
/* A second device of the namespace (dellink_and_netdev_unregister). */
#define IBDEV2 "rxedr2"

/* The holder's VA MR: NPAGES pages, REMAP_PAGES of them remapped from REMAP_AT. */
#define NPAGES 16
#define MR_LEN (NPAGES * PAGE)
#define REMAP_AT 8
#define REMAP_PAGES 4
/* Background byte of the mappings. */
#define BG 0x5a
/* How long a command the holder waits for (rdma link delete, ip link del) may take to finish. */
#define FINISH_MS 10000
/* How long the parent lets such a command run to see that it waits. */
#define WAITS_MS 150

/* ---- commands ---- */

/* Runs @cmd with sh, output discarded: its exit status, or -1. */
static int run(const char *cmd)
{
	char buf[512];
	int st;

	snprintf(buf, sizeof(buf), "(%s) >/dev/null 2>&1", cmd);
	st = system(buf);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Starts @cmd with sh in the background, output discarded: its pid, or -1. */
static pid_t spawn(const char *cmd)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/*
 * Waits up to @ms for @pid: 1 and *@status when it ended, 0 when it still
 * runs, -1 on an error.
 */
static int reap(pid_t pid, int ms, int *status)
{
	for (int i = 0;; i++) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 1;
		if (r < 0)
			return -1;
		if (i >= ms)
			return 0;
		usleep(1000);
	}
}

static bool ibdev_present(void)
{
	return !access("/sys/class/infiniband/" IBDEV, F_OK);
}

/* The namespace, its lo up and rxedr over it: 0 or the failing status. */
static int devices_up(void)
{
	return run("ip netns add " NETNS " && ip -n " NETNS " link set lo up && "
		   "ip netns exec " NETNS " rdma link add " IBDEV " type rxe netdev lo");
}

static void devices_down(void)
{
	run("rdma link delete " IBDEV2 "; rdma link delete " IBDEV "; ip netns del " NETNS);
}

/* ---- vamr's global counters ---- */

struct globals {
	uint64_t regions, pages_pinned;
};

static int globals_get(int vfd, struct globals *g)
{
	struct vamr_stats s;
	int rc = vamr_stats(vfd, VAMR_STATS_GLOBAL, &s);

	g->regions = s.counters.regions;
	g->pages_pinned = s.counters.pages_pinned;
	return rc;
}

/* Polls up to 3 s until the global counters are @base again: 0, or -1 (*@now the last seen). */
static int globals_settle(int vfd, const struct globals *base, struct globals *now)
{
	for (int i = 0; i < 300; i++) {
		if (globals_get(vfd, now))
			return -1;
		if (now->regions == base->regions && now->pages_pinned == base->pages_pinned)
			return 0;
		usleep(10000);
	}
	return -1;
}

/* ---- the holder ---- */

/* What the holder reports after set-up and after each command. */
struct report {
	int rc;			/* 0, or the failing step's -errno / line */
	char msg[120];
	long vmpin_base, vmpin_kb;	/* VmPin before registering, now */
	uint32_t lkey, ib_index;
	uint64_t fault_requests;
	int wc_ok, wc_err, bad_pages;
	int status;		/* a WRITE's completion status ('w') */
};

struct holder {
	struct rdma_pair pair;
	int vfd, uffd;
	uint8_t *buf, *src;
	struct ibv_mr *mr, *src_mr;
	int posted;
	struct report rep;
};

#define HFAIL(h, code, ...)                                                      \
	do {                                                                     \
		(h)->rep.rc = (code) ? (code) : -1;                              \
		snprintf((h)->rep.msg, sizeof((h)->rep.msg), __VA_ARGS__);       \
		return -1;                                                       \
	} while (0)

/* The WRITE from @side of page @page with seed @seed from src (page @page of src). */
static int post_page_write(struct holder *h, int side, uint64_t wr_id, int page, uint64_t seed)
{
	uint8_t *s = h->src + (size_t)page * PAGE;

	pattern_fill(s, PAGE, seed, (size_t)page * PAGE);
	return rdma_pair_post_write(&h->pair, side, wr_id, s, h->src_mr->lkey,
				    (uintptr_t)(h->buf + (size_t)page * PAGE), h->mr->rkey,
				    (uint32_t)PAGE);
}

static uint64_t mr_fault_requests(struct holder *h, int *err)
{
	struct vamr_mr_query q = vamr_mr_query_of(h->mr);

	*err = vamr_ioctl(h->vfd, VAMR_IOC_MR_QUERY, &q);
	return q.counters.fault_requests;
}

static int holder_setup(struct holder *h)
{
	int rc, err;

	h->uffd = -1;
	h->rep.vmpin_base = vamr_vmpin_kb();
	rc = rdma_pair_open(&h->pair, IBDEV);
	if (rc)
		HFAIL(h, rc, "rdma_pair_open: %s", strerror(-rc));
	h->vfd = vamr_open();
	if (h->vfd < 0)
		HFAIL(h, h->vfd, "open /dev/vamr: %s", strerror(-h->vfd));
	h->buf = map_anon(MR_LEN);
	h->src = map_anon(MR_LEN);
	if (!h->buf || !h->src)
		HFAIL(h, -ENOMEM, "mmap");
	memset(h->buf, BG, MR_LEN);
	rc = rdma_pair_reg_mr(&h->pair, h->buf, MR_LEN, ACC_VA, &h->mr);
	if (!rc)
		rc = rdma_pair_reg_mr(&h->pair, h->src, MR_LEN, ACC_REMOTE, &h->src_mr);
	if (rc)
		HFAIL(h, rc, "ibv_reg_mr: %s", strerror(-rc));
	h->rep.lkey = h->mr->lkey;
	h->rep.ib_index = (uint32_t)ibv_get_device_index(h->pair.ctx->device);

	/* The whole MR once, checked: the device works before the removal. */
	pattern_fill(h->src, MR_LEN, 1, 0);
	rc = rdma_pair_write_sync(&h->pair, 0, h->src, h->src_mr->lkey, (uintptr_t)h->buf,
				  h->mr->rkey, MR_LEN, 0);
	if (rc)
		HFAIL(h, rc, "first WRITE: status %d", rc);
	if (pattern_check(h->buf, MR_LEN, 1, 0) != PATTERN_OK)
		HFAIL(h, -EIO, "first WRITE: wrong bytes");

	/*
	 * munmap + mmap of pages 4..5 and 8..11: the next access pins on demand;
	 * 8..11 under a userfaultfd that nobody answers.
	 */
	if (remap_fixed(h->buf + REMAP_AT * PAGE, REMAP_PAGES * PAGE) ||
	    remap_fixed(h->buf + 4 * PAGE, 2 * PAGE))
		HFAIL(h, -errno, "remap");
	h->uffd = uffd_open(h->buf + REMAP_AT * PAGE, REMAP_PAGES * PAGE,
			    UFFDIO_REGISTER_MODE_MISSING, 0);
	if (h->uffd < 0)
		HFAIL(h, h->uffd, "userfaultfd: %s", strerror(-h->uffd));
	/* Side 0: a WRITE into page 8, whose pin waits for the page. */
	rc = post_page_write(h, 0, 1000, REMAP_AT, 2);
	if (rc)
		HFAIL(h, rc, "post: %s", strerror(-rc));
	/* Side 1 (the other responder): one WRITE per page outside 8..11. */
	for (int p = 0; p < NPAGES; p++) {
		if (p >= REMAP_AT && p < REMAP_AT + REMAP_PAGES)
			continue;
		rc = post_page_write(h, 1, (uint64_t)p, p, 100 + (uint64_t)p);
		if (rc)
			HFAIL(h, rc, "post %d: %s", p, strerror(-rc));
		h->posted++;
	}
	/* Until the pin has asked for the page (the fault nobody answers). */
	for (int i = 0; i < 5000; i++) {
		h->rep.fault_requests = mr_fault_requests(h, &err);
		if (err || h->rep.fault_requests)
			break;
		usleep(1000);
	}
	if (err)
		HFAIL(h, err, "VAMR_IOC_MR_QUERY: %s", strerror(-err));
	h->rep.vmpin_kb = vamr_vmpin_kb();
	return 0;
}

/*
 * 'x': the completions of side 1's WRITEs (a success leaves its page with
 * its bytes; after the device's removal none may come), then the MRs and the
 * device are released as a program would, and VmPin read.
 */
static void holder_finish(struct holder *h)
{
	struct ibv_wc wc;

	for (int i = 0; i < h->posted; i++) {
		int st = rdma_pair_wait_send(&h->pair, 1, 1000, &wc);

		if (st < 0)
			break;
		if (st != IBV_WC_SUCCESS) {
			h->rep.wc_err++;
			continue;
		}
		h->rep.wc_ok++;
		if (wc.wr_id >= NPAGES ||
		    pattern_check(h->buf + wc.wr_id * PAGE, PAGE, 100 + wc.wr_id,
				  wc.wr_id * PAGE) != PATTERN_OK)
			h->rep.bad_pages++;
	}
	ibv_dereg_mr(h->mr);
	ibv_dereg_mr(h->src_mr);
	h->mr = h->src_mr = NULL;
	rdma_pair_close(&h->pair);
	h->rep.vmpin_kb = vamr_vmpin_kb();
}

/* 'w': one more WRITE of page 0 (seed 400), waited for: its status, the bytes checked on success. */
static void holder_write(struct holder *h)
{
	int st;

	rdma_pair_drain(&h->pair);
	st = rdma_pair_write_sync(&h->pair, 1, h->src, h->src_mr->lkey, (uintptr_t)h->buf,
				  h->mr->rkey, PAGE, 5000);
	if (st == IBV_WC_SUCCESS) {
		/* side 1's WRITE of src page 0: whatever src page 0 holds now */
		if (memcmp(h->buf, h->src, PAGE))
			h->rep.bad_pages++;
	}
	h->rep.status = st;
}

static void holder_main(int cmd_fd, int rep_fd)
{
	static struct holder h;
	char c;

	holder_setup(&h);
	if (write(rep_fd, &h.rep, sizeof(h.rep)) != sizeof(h.rep) || h.rep.rc)
		_exit(1);
	while (read(cmd_fd, &c, 1) == 1) {
		struct vamr_mr_query q = { .key = h.rep.lkey, .ib_index = h.rep.ib_index };

		switch (c) {
		case 'x':
			holder_finish(&h);
			break;
		case 'v':	/* VmPin now, and the MR query's answer in rc */
			h.rep.vmpin_kb = vamr_vmpin_kb();
			h.rep.rc = vamr_ioctl(h.vfd, VAMR_IOC_MR_QUERY, &q);
			break;
		case 'w':
			holder_write(&h);
			break;
		case 'e':
			_exit(0);
		}
		if (write(rep_fd, &h.rep, sizeof(h.rep)) != sizeof(h.rep))
			_exit(1);
	}
	_exit(0);
}

/* ---- the fixture ---- */

FIXTURE(devrm)
{
	int vfd, kfd;
	pid_t holder, cmd[2];
	int cmd_fd, rep_fd;
	struct globals base;
	struct report rep;
};

static bool netns_present(void)
{
	return !access("/run/netns/" NETNS, F_OK);
}

/*
 * The device is made once and kept from test to test (making one takes about
 * a second of guest time): a test that removes it adds it again, a failed
 * test's teardown removes everything, and so does the end of the program.
 */
FIXTURE_SETUP(devrm)
{
	self->vfd = self->kfd = self->cmd_fd = self->rep_fd = -1;
	if (geteuid())
		SKIP(return, "needs root (ip netns, rdma link)");
	if (access("/sys/class/infiniband/rxe0/vamr_access", F_OK))
		SKIP(return, "no patched rxe (rxe0 without vamr_access)");
	if (!ibdev_present() || !netns_present()) {
		if (ibdev_present() || netns_present())
			devices_down();	/* what a failed test or run left */
		ASSERT_EQ(0, devices_up());
	}
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
	self->kfd = kmsg_open();
	ASSERT_EQ(0, globals_get(self->vfd, &self->base));
}

FIXTURE_TEARDOWN(devrm)
{
	int st;

	if (self->holder > 0) {
		kill(self->holder, SIGKILL);
		waitpid(self->holder, &st, 0);
	}
	/* The commands end once the holder is gone. */
	for (int i = 0; i < 2; i++)
		if (self->cmd[i] > 0 && reap(self->cmd[i], FINISH_MS, &st) != 1)
			kill(self->cmd[i], SIGKILL);
	if (self->cmd_fd >= 0)
		close(self->cmd_fd);
	if (self->rep_fd >= 0)
		close(self->rep_fd);
	if (_metadata->exit_code != KSFT_PASS)
		devices_down();
	if (self->vfd >= 0)
		close(self->vfd);
	if (self->kfd >= 0)
		close(self->kfd);
}

/* The end of the program (the harness's process, not a test's): nothing left behind. */
static void __attribute__((destructor)) devrm_cleanup(void)
{
	if (ibdev_present() || netns_present())
		devices_down();
}

/* Forks the holder; its first report in self->rep: 0, or -1 (printed). */
static int start_holder(FIXTURE_DATA(devrm) *self)
{
	int c[2], r[2];

	if (pipe2(c, O_CLOEXEC) || pipe2(r, O_CLOEXEC))
		return -1;
	self->holder = fork();
	if (self->holder < 0)
		return -1;
	if (self->holder == 0) {
		close(c[1]);
		close(r[0]);
		holder_main(c[0], r[1]);
	}
	close(c[0]);
	close(r[1]);
	self->cmd_fd = c[1];
	self->rep_fd = r[0];
	return 0;
}

/* Reads the holder's next report (10 s at most): 0 or -1. */
static int holder_report(FIXTURE_DATA(devrm) *self)
{
	struct pollfd pfd = { .fd = self->rep_fd, .events = POLLIN };

	if (poll(&pfd, 1, 10000) != 1)
		return -1;
	return read(self->rep_fd, &self->rep, sizeof(self->rep)) == sizeof(self->rep) ? 0 : -1;
}

/* Sends command @c to the holder and reads its report: 0 or -1. */
static int holder_cmd(FIXTURE_DATA(devrm) *self, char c)
{
	if (write(self->cmd_fd, &c, 1) != 1)
		return -1;
	return holder_report(self);
}

static void kill_holder(FIXTURE_DATA(devrm) *self)
{
	int st;

	kill(self->holder, SIGKILL);
	waitpid(self->holder, &st, 0);
	self->holder = 0;
}

/*
 * The device added again works: a VA MR, a WRITE of the whole MR, a remap of
 * pages 2..3, a WRITE and a READ of the whole MR, every byte checked.
 * 0, or the failing step (printed).
 */
static int device_works(void)
{
	struct rdma_pair p;
	struct ibv_mr *mr = NULL, *smr = NULL;
	uint8_t *buf = map_anon(MR_LEN), *src = map_anon(MR_LEN);
	int rc, step = 0;

	if (!buf || !src)
		return -1;
	rc = rdma_pair_open(&p, IBDEV);
	if (rc) {
		printf("# device_works: rdma_pair_open: %s\n", strerror(-rc));
		return 1;
	}
	if (rdma_pair_reg_mr(&p, buf, MR_LEN, ACC_VA, &mr) ||
	    rdma_pair_reg_mr(&p, src, MR_LEN, ACC_REMOTE, &smr)) {
		step = 2;
		goto out;
	}
	pattern_fill(src, MR_LEN, 7, 0);
	step = 3;
	if (rdma_pair_write_sync(&p, 0, src, smr->lkey, (uintptr_t)buf, mr->rkey, MR_LEN, 0) ||
	    pattern_check(buf, MR_LEN, 7, 0) != PATTERN_OK)
		goto out;
	step = 4;
	if (remap_fixed(buf + 2 * PAGE, 2 * PAGE))
		goto out;
	pattern_fill(src, MR_LEN, 8, 0);
	step = 5;
	if (rdma_pair_write_sync(&p, 1, src, smr->lkey, (uintptr_t)buf, mr->rkey, MR_LEN, 0) ||
	    pattern_check(buf, MR_LEN, 8, 0) != PATTERN_OK)
		goto out;
	memset(src, 0, MR_LEN);
	step = 6;
	if (rdma_pair_read_sync(&p, 0, src, smr->lkey, (uintptr_t)buf, mr->rkey, MR_LEN, 0) ||
	    pattern_check(src, MR_LEN, 8, 0) != PATTERN_OK)
		goto out;
	step = 0;
out:
	if (step)
		printf("# device_works: step %d failed\n", step);
	if (mr)
		ibv_dereg_mr(mr);
	if (smr)
		ibv_dereg_mr(smr);
	rdma_pair_close(&p);
	munmap(buf, MR_LEN);
	munmap(src, MR_LEN);
	return step;
}

/* delete_module(@name, O_NONBLOCK): 0 or -errno (never reached with a user of the module). */
static int try_rmmod(const char *name)
{
	return syscall(SYS_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

static long module_refcnt(const char *name)
{
	char path[128];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* After the holder is gone and the device removed: counters, kernel log, device again. */
/* Polls up to FINISH_MS until rxedr is gone: true when it is. */
static bool ibdev_gone(void)
{
	for (int i = 0; i < FINISH_MS && ibdev_present(); i++)
		usleep(1000);
	return !ibdev_present();
}

/* After the device's removal: vamr's counters back, no kernel complaint. */
#define CHECK_CLEAN()                                                                  \
	do {                                                                           \
		struct globals _now;                                                   \
		EXPECT_EQ(0, globals_settle(self->vfd, &self->base, &_now))            \
			TH_LOG("global regions %llu (was %llu), pages pinned %llu (was %llu)", \
			       (unsigned long long)_now.regions,                       \
			       (unsigned long long)self->base.regions,                 \
			       (unsigned long long)_now.pages_pinned,                  \
			       (unsigned long long)self->base.pages_pinned);           \
		EXPECT_EQ(0, kmsg_problems(self->kfd));                                \
	} while (0)

/* The index of ::ffff:127.0.0.1 on port 1 once the port is ACTIVE (3 s at most), or -1. */
static int wait_gid(struct rdma_pair *p)
{
	for (int t = 0; t < 300; t++) {
		struct ibv_port_attr pa;

		if (!ibv_query_port(p->ctx, 1, &pa) && pa.state == IBV_PORT_ACTIVE)
			for (int i = 0; i < pa.gid_tbl_len; i++) {
				union ibv_gid g;

				if (!ibv_query_gid(p->ctx, 1, i, &g) && g.raw[10] == 0xff &&
				    g.raw[11] == 0xff && !memcmp(g.raw + 12, "\x7f\0\0\x01", 4) &&
				    !memcmp(g.raw, "\0\0\0\0\0\0\0\0\0\0", 10)) {
					p->gid = g;
					return i;
				}
			}
		usleep(10000);
	}
	return -1;
}

TEST_F(devrm, netdev_down_up)
{
	struct rdma_pair p;
	struct ibv_mr *mr = NULL, *smr = NULL;
	uint8_t *buf = map_anon(MR_LEN), *src = map_anon(MR_LEN);
	int ok = 0, err = 0, bad = 0, st, idx;
	struct ibv_wc wc;

	ASSERT_TRUE(buf && src);
	ASSERT_EQ(0, rdma_pair_open(&p, IBDEV));
	memset(buf, BG, MR_LEN);
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, buf, MR_LEN, ACC_VA, &mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, src, MR_LEN, ACC_REMOTE, &smr));
	pattern_fill(src, MR_LEN, 200, 0);
	/* One WRITE per page in flight, then the netdev goes down. */
	for (int i = 0; i < NPAGES; i++)
		ASSERT_EQ(0, rdma_pair_post_write(&p, 0, (uint64_t)i, src + i * PAGE, smr->lkey,
						  (uintptr_t)(buf + i * PAGE), mr->rkey, PAGE));
	ASSERT_EQ(0, run("ip -n " NETNS " link set lo down"));
	for (int i = 0; i < NPAGES; i++) {
		st = rdma_pair_wait_send(&p, 0, 5000, &wc);
		ASSERT_LE(0, st) TH_LOG("completion %d missing", i);
		if (st == IBV_WC_SUCCESS) {
			ok++;
			if (pattern_check(buf + wc.wr_id * PAGE, PAGE, 200, wc.wr_id * PAGE) !=
			    PATTERN_OK)
				bad++;
		} else {
			err++;
		}
	}
	/* One more while the port is down: a success with the right bytes or an error. */
	if (!err) {
		pattern_fill(src, PAGE, 201, 0);
		st = rdma_pair_write_sync(&p, 0, src, smr->lkey, (uintptr_t)buf, mr->rkey, PAGE,
					  5000);
		ASSERT_LE(0, st);
		if (st == IBV_WC_SUCCESS)
			EXPECT_EQ(PATTERN_OK, pattern_check(buf, PAGE, 201, 0));
	}
	TH_LOG("while down: %d successes, %d errors", ok, err);
	EXPECT_EQ(0, bad);

	ASSERT_EQ(0, run("ip -n " NETNS " link set lo up"));
	idx = wait_gid(&p);
	ASSERT_LE(0, idx) TH_LOG("no GID of lo after up");
	p.gid_index = idx;
	ASSERT_EQ(0, rdma_pair_recover(&p));
	/* The same MR after a remap: WRITE and READ, every byte. */
	ASSERT_EQ(0, remap_fixed(buf + 4 * PAGE, 4 * PAGE));
	pattern_fill(src, MR_LEN, 202, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&p, 0, src, smr->lkey, (uintptr_t)buf,
						       mr->rkey, MR_LEN, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, MR_LEN, 202, 0));
	memset(src, 0, MR_LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 1, src, smr->lkey, (uintptr_t)buf,
						      mr->rkey, MR_LEN, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(src, MR_LEN, 202, 0));
	ibv_dereg_mr(mr);
	ibv_dereg_mr(smr);
	rdma_pair_close(&p);
	EXPECT_EQ(0, kmsg_problems(self->kfd));
}

TEST_F(devrm, dellink_with_holder)
{
	struct globals live;
	int st;

	ASSERT_EQ(0, start_holder(self));
	ASSERT_EQ(0, holder_report(self));
	ASSERT_EQ(0, self->rep.rc) TH_LOG("holder: %s", self->rep.msg);
	EXPECT_LE(1u, self->rep.fault_requests);
	/* 10 VA pages pinned at least (not the 6 remapped) and 16 of the normal MR. */
	EXPECT_LE(self->rep.vmpin_base + (long)(NPAGES + NPAGES - 6) * 4, self->rep.vmpin_kb);
	ASSERT_EQ(0, globals_get(self->vfd, &live));
	EXPECT_EQ(self->base.regions + 1, live.regions);

	/* Modules in use: the holder's uverbs file holds rdma_rxe, which holds vamr. */
	ASSERT_LT(0, module_refcnt("rdma_rxe"));
	ASSERT_LT(0, module_refcnt("vamr"));
	st = try_rmmod("rdma_rxe");
	EXPECT_TRUE(st == -EWOULDBLOCK || st == -EBUSY) TH_LOG("rmmod rdma_rxe: %d", st);
	st = try_rmmod("vamr");
	EXPECT_TRUE(st == -EWOULDBLOCK || st == -EBUSY) TH_LOG("rmmod vamr: %d", st);
	EXPECT_EQ(0, access("/sys/module/rdma_rxe", F_OK));
	EXPECT_EQ(0, access("/sys/module/vamr", F_OK));

	/*
	 * rxe disassociates a removed device's user contexts (an empty
	 * disassociate_ucontext): the delete destroys the holder's QPs and MRs
	 * (the pin waiting for the userfault is cancelled) and returns while the
	 * holder lives.
	 */
	self->cmd[0] = spawn("rdma link delete " IBDEV);
	ASSERT_LT(0, self->cmd[0]);
	ASSERT_EQ(1, reap(self->cmd[0], FINISH_MS, &st)) TH_LOG("the delete still waits");
	self->cmd[0] = 0;
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_FALSE(ibdev_present());
	/* Nothing pinned for the holder any more, nothing live in vamr. */
	ASSERT_EQ(0, holder_cmd(self, 'v'));
	EXPECT_EQ(self->rep.vmpin_base, self->rep.vmpin_kb);
	/* Its /dev/vamr file outlives the device: a clean ENOENT for the MR. */
	EXPECT_EQ(-ENOENT, self->rep.rc);
	CHECK_CLEAN();
	/* Completions of WRITEs in flight: successes with their bytes, or none. */
	ASSERT_EQ(0, holder_cmd(self, 'x'));
	EXPECT_EQ(0, self->rep.bad_pages);
	EXPECT_EQ(0, self->rep.wc_err);
	EXPECT_EQ(self->rep.vmpin_base, self->rep.vmpin_kb);
	EXPECT_EQ(0, write(self->cmd_fd, "e", 1) == 1 ? 0 : -1);
	ASSERT_EQ(self->holder, waitpid(self->holder, &st, 0));
	self->holder = 0;
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* The device again: a VA MR, a remap, the right bytes. */
	ASSERT_EQ(0, run("ip netns exec " NETNS " rdma link add " IBDEV " type rxe netdev lo"));
	EXPECT_EQ(0, device_works());
	EXPECT_EQ(0, kmsg_problems(self->kfd));
}

/*
 * A child that registers a VA MR of rxedr2 over a page under a userfaultfd
 * nobody answers: the registration pins the page and waits inside the
 * REG_MR command. Writes one byte to @ready_fd before it registers; never
 * returns unless the registration fails.
 */
static void blocked_registration(int ready_fd)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	uint8_t *page = map_anon(PAGE);

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), IBDEV2))
			ctx = ibv_open_device(list[i]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd || !page || uffd_open(page, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0) < 0)
		_exit(2);
	if (write(ready_fd, "r", 1) != 1)
		_exit(3);
	ibv_reg_mr(pd, page, PAGE, ACC_VA);
	_exit(4);
}

/* 0 when a UDP socket of the namespace listens on port 4791 (RoCEv2), else 1. */
static int roce_socket_in_netns(void)
{
	return run("ip netns exec " NETNS " grep -qi ':12B7 ' /proc/net/udp");
}

TEST_F(devrm, dellink_and_netdev_unregister)
{
	int ready[2], st;
	char c;

	/* A second device in the namespace, over a sit tunnel (any netdev will do). */
	if (run("ip -n " NETNS " link add vdr0 type sit local 127.0.0.2 remote 127.0.0.3 && "
		"ip -n " NETNS " link set vdr0 up"))
		SKIP(return, "no sit tunnel (CONFIG_IPV6_SIT)");
	ASSERT_EQ(0, run("ip netns exec " NETNS " rdma link add " IBDEV2
			 " type rxe netdev vdr0"));
	ASSERT_EQ(0, roce_socket_in_netns());

	/* A registration in progress keeps "rdma link delete" of rxedr2 waiting. */
	ASSERT_EQ(0, pipe2(ready, O_CLOEXEC));
	self->holder = fork();
	ASSERT_LE(0, self->holder);
	if (!self->holder)
		blocked_registration(ready[1]);
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &c, 1));
	close(ready[0]);
	usleep(100000);
	self->cmd[0] = spawn("rdma link delete " IBDEV2);
	ASSERT_LT(0, self->cmd[0]);
	EXPECT_EQ(0, reap(self->cmd[0], WAITS_MS, &st)) TH_LOG("the delete did not wait");
	/*
	 * vdr0 goes meanwhile: rxe's NETDEV_UNREGISTER finds rxedr2 still
	 * registered. Each rxe device holds one reference on the namespace's UDP
	 * tunnel sockets; rxedr2's must be dropped once, and rxedr's kept.
	 */
	self->cmd[1] = spawn("ip -n " NETNS " link del vdr0");
	ASSERT_LT(0, self->cmd[1]);
	reap(self->cmd[1], WAITS_MS, &st);
	EXPECT_EQ(0, roce_socket_in_netns()) TH_LOG("rxedr lost its UDP sockets");

	kill_holder(self);
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(1, reap(self->cmd[i], FINISH_MS, &st)) TH_LOG("command %d still waits", i);
		self->cmd[i] = 0;
	}
	EXPECT_NE(0, access("/sys/class/infiniband/" IBDEV2, F_OK));
	EXPECT_TRUE(ibdev_present());
	EXPECT_EQ(0, roce_socket_in_netns()) TH_LOG("rxedr lost its UDP sockets");
	EXPECT_EQ(0, device_works());
	CHECK_CLEAN();
}

TEST_F(devrm, netdev_delete_with_holder)
{
	ASSERT_EQ(0, start_holder(self));
	ASSERT_EQ(0, holder_report(self));
	ASSERT_EQ(0, self->rep.rc) TH_LOG("holder: %s", self->rep.msg);

	/*
	 * The namespace goes, and its lo with it: rxe's netdev notifier queues
	 * the device's unregistration (NETDEV_UNREGISTER), which disassociates
	 * the holder's context as "rdma link delete" does.
	 */
	ASSERT_EQ(0, run("ip netns del " NETNS));
	/* Traffic of the holder now: a success with the right bytes or an error. */
	ASSERT_EQ(0, holder_cmd(self, 'w'));
	EXPECT_EQ(0, self->rep.bad_pages);
	TH_LOG("WRITE after the netdev's removal: %s",
	       self->rep.status < 0 ? strerror(-self->rep.status) :
	       ibv_wc_status_str((enum ibv_wc_status)self->rep.status));
	EXPECT_TRUE(ibdev_gone());
	ASSERT_EQ(0, holder_cmd(self, 'v'));
	EXPECT_EQ(self->rep.vmpin_base, self->rep.vmpin_kb);
	EXPECT_EQ(-ENOENT, self->rep.rc);
	CHECK_CLEAN();
	kill_holder(self);
	EXPECT_EQ(0, kmsg_problems(self->kfd));
}

TEST_HARNESS_MAIN
