/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Position-dependent data patterns for the vamr selftests.
 *
 * Byte i of a buffer filled with pattern_fill(buf, len, seed, base_off) is
 * one byte of a splitmix64-style hash of (seed, base_off + i).  So every
 * byte depends on its absolute position and on the seed: a transfer that
 * lands at a wrong offset, is shifted by any number of bytes, is truncated,
 * or reads the wrong pages shows up as a mismatch, which a uniform fill
 * (memset) would hide.
 *
 * base_off lets a sub-window be checked against the pattern of the buffer
 * it was copied from: if src was filled with (seed, 0) and src + 101 was
 * sent to dst + 777, then pattern_check(dst + 777, n, seed, 101) must hold.
 */
#ifndef VAMR_SELFTEST_PATTERN_H
#define VAMR_SELFTEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/* Returned by pattern_check() when every byte matches. */
#define PATTERN_OK ((size_t)-1)

static inline uint64_t pattern_mix64(uint64_t z)
{
	/* splitmix64 finaliser */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The expected byte at absolute offset @off of a buffer with seed @seed. */
static inline uint8_t pattern_byte(uint64_t seed, size_t off)
{
	uint64_t z = pattern_mix64(seed ^ 0x5bd1e9955bd1e995ULL) +
		     (uint64_t)off * 0x9e3779b97f4a7c15ULL;

	return (uint8_t)(pattern_mix64(z) >> 24);
}

/* Fill @len bytes of @buf; byte i gets pattern_byte(seed, base_off + i). */
static inline void pattern_fill(void *buf, size_t len, uint64_t seed,
				size_t base_off)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pattern_byte(seed, base_off + i);
}

/*
 * Check @len bytes of @buf against pattern_fill(.., seed, base_off).
 * Returns the offset (relative to @buf) of the first mismatching byte, or
 * PATTERN_OK ((size_t)-1) if all bytes match.
 */
static inline size_t pattern_check(const void *buf, size_t len, uint64_t seed,
				   size_t base_off)
{
	const volatile uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, base_off + i))
			return i;
	return PATTERN_OK;
}

#endif /* VAMR_SELFTEST_PATTERN_H */
