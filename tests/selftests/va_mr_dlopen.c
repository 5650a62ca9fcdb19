// SPDX-License-Identifier: GPL-2.0
/*
 * va_mr_dlopen: runs va_mr_remap from libva_mr_remap.so, loaded the way UCX
 * loads its IB transport: dlopen(RTLD_LOCAL) of a library that depends on
 * libibverbs, by a program that is not linked with libibverbs. libibverbs
 * then lives in a private scope: the library's calls of ibv_reg_mr still
 * reach an LD_PRELOAD wrapper (the global scope is searched first), but
 * dlsym(RTLD_NEXT) in the wrapper does not find the real function.
 * For va_mr_jobs.sh and va_mr_preload.sh; built into OUT/helpers/ next to the
 * library.
 *
 * usage: va_mr_dlopen [--cycles N] [--dlmopen] [va_mr_remap arguments]
 *   --cycles N  dlopen, run, dlclose N times (default 1); after each dlclose
 *               prints "# cycle I rc R libibverbs mapped|unmapped" (whether
 *               a libibverbs.so is still mapped in the process)
 *   --dlmopen   load it into a link-map namespace of its own
 *               (dlmopen(LM_ID_NEWLM)) instead
 * Exit status: that of the last run, 1 on a loading failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether a libibverbs.so is mapped in this process. */
static int libibverbs_mapped(void)
{
	char line[512];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/libibverbs.so"))
			found = 1;
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	int cycles = 1, use_dlmopen = 0, i, ret = 0;
	int (*entry)(int, char **);
	char path[PATH_MAX];
	ssize_t n;
	char *slash;
	void *h;

	while (argc > 1) {
		if (!strcmp(argv[1], "--cycles") && argc > 2) {
			cycles = atoi(argv[2]);
			argc -= 2;
			argv += 2;
		} else if (!strcmp(argv[1], "--dlmopen")) {
			use_dlmopen = 1;
			argc--;
			argv++;
		} else {
			break;
		}
	}
	/* libva_mr_remap.so is next to this program. */
	n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	if (n <= 0)
		return 1;
	path[n] = 0;
	slash = strrchr(path, '/');
	strcpy(slash + 1, "libva_mr_remap.so");
	for (i = 0; i < cycles; i++) {
		if (use_dlmopen)
			h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
		else
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "va_mr_dlopen: %s\n", dlerror());
			return 1;
		}
		if (dlsym(RTLD_DEFAULT, "ibv_get_device_list"))
			printf("# libibverbs is in the global scope: not a private dlopen\n");
		else if (use_dlmopen)
			printf("# libibverbs is in a namespace of its own (dlmopen LM_ID_NEWLM)\n");
		else
			printf("# libibverbs is in a private scope (dlopen RTLD_LOCAL)\n");
		fflush(stdout);
		entry = (int (*)(int, char **))dlsym(h, "va_mr_remap_main");
		if (!entry) {
			fprintf(stderr, "va_mr_dlopen: %s\n", dlerror());
			return 1;
		}
		ret = entry(argc, argv);
		if (cycles > 1 || use_dlmopen) {
			dlclose(h);
			printf("# cycle %d rc %d libibverbs %s\n", i, ret,
			       libibverbs_mapped() ? "mapped" : "unmapped");
			fflush(stdout);
		}
	}
	return ret;
}
