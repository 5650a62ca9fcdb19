// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_regloop: ibv_reg_mr/ibv_dereg_mr of one MR in a loop, for profiling
 * the fixed cost of a registration and a deregistration of each kind of MR
 * (run it under perf record/stat; scripts/bench.sh does not run it).
 *
 * usage: vamr_regloop KINDS KIB ITERS
 *   KINDS  comma-separated list of normal, odp, va: each iteration registers
 *          and deregisters one MR of each kind in turn, so that the kinds
 *          share whatever load the machine has
 *   KIB    MR size in KiB (anonymous memory, touched once, 2 MiB aligned,
 *          no THP)
 *   ITERS  number of timed iterations (one more, untimed, comes first)
 * Prints one line per kind, "KIND N KiB: reg X us, dereg Y us (median of
 * ITERS; means M, M)", then for va with normal in the list "va/normal: reg
 * R, dereg D" (ratios of the medians: a median shrugs off the iterations that
 * another guest or host task interrupted).
 * Environment: VAMR_IBDEV as for the selftests. Exit status 0, 1 when a verbs
 * call failed, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/mm_util.h"
#include "../selftests/rdma_pair.h"
#include "bench_util.h"

#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

enum kind { NORMAL, ODP, VA, NKIND };
static const char *const kind_name[NKIND] = { "normal", "odp", "va" };
static const unsigned int kind_access[NKIND] = { 0, IBV_ACCESS_ON_DEMAND, VAMR_ACCESS_VA };

int main(int argc, char **argv)
{
	double treg[NKIND] = { 0 }, tdereg[NKIND] = { 0 }, mreg[NKIND] = { 0 }, mdereg[NKIND] = { 0 };
	double *sreg[NKIND], *sdereg[NKIND];
	int kinds[NKIND], nk = 0, i, k;
	struct rdma_pair p;
	char *list, *tok;
	long iters, it;
	size_t len;
	uint8_t *a;
	int ret;

	if (argc < 4) {
		fprintf(stderr, "usage: %s normal,odp,va KIB ITERS\n", argv[0]);
		return 2;
	}
	list = strdup(argv[1]);
	for (tok = strtok(list, ","); tok && nk < NKIND; tok = strtok(NULL, ",")) {
		for (k = 0; k < NKIND && strcmp(tok, kind_name[k]); k++)
			;
		if (k == NKIND) {
			fprintf(stderr, "unknown kind %s\n", tok);
			return 2;
		}
		kinds[nk++] = k;
	}
	len = strtoul(argv[2], NULL, 0) * 1024;
	iters = strtol(argv[3], NULL, 0);
	if (!nk || !len || iters <= 0)
		return 2;
	for (k = 0; k < NKIND; k++) {
		sreg[k] = calloc(iters, sizeof(double));
		sdereg[k] = calloc(iters, sizeof(double));
		if (!sreg[k] || !sdereg[k])
			return 1;
	}
	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "rdma_pair_open: %s\n", strerror(-ret));
		return 1;
	}
	a = map_aligned_2m(len);
	if (!a) {
		fprintf(stderr, "mmap: %s\n", strerror(errno));
		return 1;
	}
	memset(a, 0x5a, len);
	/* The first iteration (it == -1) sets things up and is not timed. */
	for (it = -1; it < iters; it++) {
		for (i = 0; i < nk; i++) {
			struct ibv_mr *mr;
			double t0, t1, t2;

			k = kinds[i];
			t0 = now_us();
			ret = rdma_pair_reg_mr(&p, a, len, ACC | kind_access[k], &mr);
			t1 = now_us();
			if (ret) {
				fprintf(stderr, "%s: ibv_reg_mr: %s\n", kind_name[k], strerror(-ret));
				return 1;
			}
			ret = ibv_dereg_mr(mr);
			t2 = now_us();
			if (ret) {
				fprintf(stderr, "%s: ibv_dereg_mr: %s\n", kind_name[k], strerror(ret));
				return 1;
			}
			if (it >= 0) {
				sreg[k][it] = t1 - t0;
				sdereg[k][it] = t2 - t1;
				treg[k] += t1 - t0;
				tdereg[k] += t2 - t1;
			}
		}
	}
	for (i = 0; i < nk; i++) {
		k = kinds[i];
		mreg[k] = median(sreg[k], iters);
		mdereg[k] = median(sdereg[k], iters);
		printf("%s %zu KiB: reg %.2f us, dereg %.2f us (median of %ld; means %.2f, %.2f)\n",
		       kind_name[k], len / 1024, mreg[k], mdereg[k], iters, treg[k] / iters,
		       tdereg[k] / iters);
	}
	if (mreg[NORMAL] > 0 && mreg[VA] > 0)
		printf("va/normal %zu KiB: reg %.2f, dereg %.2f\n", len / 1024,
		       mreg[VA] / mreg[NORMAL], mdereg[VA] / mdereg[NORMAL]);
	munmap(a, len);
	rdma_pair_close(&p);
	free(list);
	return 0;
}
