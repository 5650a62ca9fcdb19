// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: registration and deregistration times by size and MR kind.
 */
#define _GNU_SOURCE
#include "bench.h"

/* --------------------------------------------- registration / deregistration */

size_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	size_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * KIB;
}


void bench_reg(void)
{
	int s, r, k, j;

	/* 1 GiB, all touched, when it fits with room to spare; else the largest power of two. */
	while (big_size > 64 * MIB && mem_available() < big_size + 384 * MIB)
		big_size /= 2;
	for (s = 0; s < NREG; s++) {
		size_t len = s == NREG - 1 ? big_size : reg_size[s];
		int reps = len <= MIB ? REG_REPS : len <= 64 * MIB ? REG_REPS_64M : REG_REPS_BIG;
		double t0 = now_us();
		uint8_t *a = buf_alloc(len, 1);

		if (!a)
			return;
		progress("reg/dereg %zu KiB: touched in %.1f s", len / KIB, (now_us() - t0) / 1e6);
		if (s == 0) {
			/* Untimed: the first registration of each kind sets things up. */
			for (k = 0; k < NKIND; k++) {
				struct ibv_mr *mr = reg(a, len, k);

				if (mr)
					dereg(mr);
			}
		}
		for (r = 0; r < rounds; r++) {
			double treg[NKIND][REG_REPS], tdereg[NKIND][REG_REPS];
			double sreg[NKIND] = { 0 }, sdereg[NKIND] = { 0 };

			/*
			 * The kinds take turns within a round, one registration each, so
			 * that whatever else the host does lands on all of them alike.
			 */
			for (j = 0; j < reps; j++) {
				for (k = 0; k < NKIND; k++) {
					struct ibv_mr *mr;
					double t = now_us();

					mr = reg(a, len, k);
					treg[k][j] = now_us() - t;
					if (!mr)
						goto out;
					t = now_us();
					dereg(mr);
					tdereg[k][j] = now_us() - t;
					sreg[k] += treg[k][j];
					sdereg[k] += tdereg[k][j];
				}
			}
			for (k = 0; k < NKIND; k++) {
				put(&reg_us[k][s], median(treg[k], reps));
				put(&dereg_us[k][s], median(tdereg[k], reps));
				put(&reg_mean_us[k][s], sreg[k] / reps);
				put(&dereg_mean_us[k][s], sdereg[k] / reps);
			}
		}
out:
		munmap(a, len);
	}
}
