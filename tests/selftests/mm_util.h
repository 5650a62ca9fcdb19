/* SPDX-License-Identifier: GPL-2.0 */
/* Mapping helpers shared by the selftests. */
#ifndef VAMR_SELFTEST_MM_UTIL_H
#define VAMR_SELFTEST_MM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

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

#endif /* VAMR_SELFTEST_MM_UTIL_H */
