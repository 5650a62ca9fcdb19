// SPDX-License-Identifier: GPL-2.0
/*
 * va_mr_dlopen: runs va_mr_remap from libva_mr_remap.so, loaded the way UCX
 * loads its IB transport: dlopen(RTLD_LOCAL) of a library that depends on
 * libibverbs, by a program that is not linked with libibverbs. libibverbs
 * then lives in a private scope: the library's calls of ibv_reg_mr still
 * reach an LD_PRELOAD wrapper (the global scope is searched first), but
 * dlsym(RTLD_NEXT) in the wrapper does not find the real function.
 * For va_mr_jobs.sh; built into OUT/helpers/ next to the library.
 *
 * usage: va_mr_dlopen [va_mr_remap arguments]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char path[PATH_MAX];
	int (*entry)(int, char **);
	ssize_t n;
	char *slash;
	void *h;

	/* libva_mr_remap.so is next to this program. */
	n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	if (n <= 0)
		return 1;
	path[n] = 0;
	slash = strrchr(path, '/');
	strcpy(slash + 1, "libva_mr_remap.so");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "va_mr_dlopen: %s\n", dlerror());
		return 1;
	}
	if (dlsym(RTLD_DEFAULT, "ibv_get_device_list"))
		printf("# libibverbs is in the global scope: not a private dlopen\n");
	else
		printf("# libibverbs is in a private scope (dlopen RTLD_LOCAL)\n");
	entry = (int (*)(int, char **))dlsym(h, "va_mr_remap_main");
	if (!entry) {
		fprintf(stderr, "va_mr_dlopen: %s\n", dlerror());
		return 1;
	}
	return entry(argc, argv);
}
