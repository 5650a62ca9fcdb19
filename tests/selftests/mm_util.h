/* SPDX-License-Identifier: GPL-2.0 */
/* Mapping helpers shared by the selftests. */
#ifndef VAMR_SELFTEST_MM_UTIL_H
#define VAMR_SELFTEST_MM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Advice values the libc headers may lack (asm-generic/mman-common.h). */
#ifndef MADV_FREE
#define MADV_FREE 8
#endif
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
#ifndef MADV_KEEPONFORK
#define MADV_KEEPONFORK 19
#endif
#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_HWPOISON
#define MADV_HWPOISON 100
#endif
#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif

/* A private anonymous read-write mapping of len bytes, or NULL. */
static inline uint8_t *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Map fresh anonymous memory exactly at addr, replacing what is there: 0 or -1. */
static inline int remap_fixed(void *addr, size_t len)
{
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

	return p == addr ? 0 : -1;
}

/*
 * len bytes of private anonymous memory aligned to 2 MiB (so that a VMA split
 * inside it invalidates whole 2 MiB blocks), with THP off, or NULL. Not
 * touched.
 */
static inline uint8_t *map_aligned_2m(size_t len)
{
	const size_t huge = 2ul << 20;
	uint8_t *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *a;

	if (raw == MAP_FAILED)
		return NULL;
	a = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(huge - 1));
	if (a > raw)
		munmap(raw, a - raw);
	munmap(a + len, raw + huge - a);
	madvise(a, len, MADV_NOHUGEPAGE);
	return a;
}

/* Pages of [addr, addr + len) (at most 4096 pages) present in the page table, or -1. */
static inline long resident_pages(void *addr, size_t len)
{
	unsigned char vec[4096];
	size_t n = len / 4096, i;
	long r = 0;

	if (n > sizeof(vec) || mincore(addr, len, vec))
		return -1;
	for (i = 0; i < n; i++)
		r += vec[i] & 1;
	return r;
}

/*
 * AnonHugePages (kB) of the VMA that contains addr, from /proc/self/smaps, or
 * -1 when it cannot be read. A THP test calls it after touching its range and
 * skips when no huge page backs it (THP disabled, no free 2 MiB block).
 */
static inline long anon_huge_kb(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in_vma = 0;
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end;

		/* A VMA's header line; its fields are "Name:  value" lines. */
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2) {
			in_vma = start <= (uintptr_t)addr && (uintptr_t)addr < end;
			continue;
		}
		if (in_vma && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif /* VAMR_SELFTEST_MM_UTIL_H */
