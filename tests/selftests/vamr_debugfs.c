// SPDX-License-Identifier: GPL-2.0
/*
 * vamr's debugfs files (root only; Documentation/vamr.rst, "Pinning"):
 * vamr/access_pins, the pages, rounds and times of the pin rounds, and
 * vamr/pin_clocks, which turns the clocks behind those times on (1) and off
 * (0, the state at load): with them off, rounds are still counted but no
 * clock is read; anything but 0 or 1 is refused with EINVAL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define NPAGES 64
#define ACCESS_PINS "/sys/kernel/debug/vamr/access_pins"
#define PIN_CLOCKS "/sys/kernel/debug/vamr/pin_clocks"

struct pins {
	unsigned long long pages, ns, cpu_ns, reg_pages, reg_ns, reg_cpu_ns, rounds;
};

static int read_pins(struct pins *p)
{
	FILE *f = fopen(ACCESS_PINS, "r");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "pages %llu ns %llu cpu_ns %llu reg_pages %llu reg_ns %llu reg_cpu_ns %llu rounds %llu",
		   &p->pages, &p->ns, &p->cpu_ns, &p->reg_pages, &p->reg_ns, &p->reg_cpu_ns, &p->rounds);
	fclose(f);
	return n == 7 ? 0 : -1;
}

/* The value of pin_clocks (0 or 1), or -1. */
static int clocks_get(void)
{
	FILE *f = fopen(PIN_CLOCKS, "r");
	int v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* write(2) of len bytes of s to pin_clocks: 0, or -errno. */
static int clocks_write(const char *s, size_t len)
{
	int fd = open(PIN_CLOCKS, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, len) != (ssize_t)len)
		err = -errno;
	close(fd);
	return err;
}

FIXTURE(dbg)
{
	int fd;
	int was; /* pin_clocks before the test, restored after it */
};

FIXTURE_SETUP(dbg)
{
	self->was = -1;
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	if (access(PIN_CLOCKS, W_OK))
		SKIP(return, "%s not writable (debugfs not mounted, or not root)", PIN_CLOCKS);
	self->was = clocks_get();
	ASSERT_TRUE(self->was == 0 || self->was == 1);
}

FIXTURE_TEARDOWN(dbg)
{
	if (self->was >= 0)
		clocks_write(self->was ? "1" : "0", 1);
	if (self->fd >= 0)
		close(self->fd);
}

/* 0 and 1, with or without a newline, are taken; nothing else, and the value stays. */
TEST_F(dbg, pin_clocks_takes_only_0_or_1)
{
	static const char *const bad[] = { "2", "-1", "11", "1 ", " 1", "on", "1\n\n", "0x1",
					   "000000000" };
	size_t i;

	ASSERT_EQ(0, clocks_write("1\n", 2));
	ASSERT_EQ(1, clocks_get());
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(-EINVAL, clocks_write(bad[i], strlen(bad[i]))) TH_LOG("'%s'", bad[i]);
		EXPECT_EQ(1, clocks_get()) TH_LOG("after '%s'", bad[i]);
	}
	ASSERT_EQ(0, clocks_write("0", 1));
	ASSERT_EQ(0, clocks_get());
	EXPECT_EQ(-EINVAL, clocks_write("1\0", 2));
	EXPECT_EQ(0, clocks_get());
}

/*
 * With the clocks off, a registration and an access that pins on demand add
 * their pages (and the access its round) but no time; with them on, time too.
 * The bytes the access wrote are where the CPU looks.
 */
TEST_F(dbg, times_only_while_clocks_on)
{
	size_t len = NPAGES * PAGE;
	struct pins p0, p1, p2, p3;
	uint8_t *a = map_anon(len), b = 0x5a;
	uint32_t h;
	int on;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, madvise(a, len, MADV_NOHUGEPAGE));
	for (on = 0; on <= 1; on++) {
		ASSERT_EQ(0, clocks_write(on ? "1" : "0", 1));
		pattern_fill(a, len, 40 + on, 0);
		ASSERT_EQ(0, read_pins(&p0));
		ASSERT_EQ(0, vamr_register(self->fd, a, len, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, 0, &h));
		ASSERT_EQ(0, read_pins(&p1));
		/* New pages at the same VA, written by the CPU: the access pins them on demand. */
		ASSERT_EQ(0, remap_fixed(a, len));
		ASSERT_EQ(0, madvise(a, len, MADV_NOHUGEPAGE));
		pattern_fill(a, len, 50 + on, 0);
		ASSERT_EQ(0, read_pins(&p2));
		ASSERT_EQ(0, vamr_write(self->fd, h, a + 5 * PAGE + 7, &b, 1));
		ASSERT_EQ(b, a[5 * PAGE + 7]);
		ASSERT_EQ(pattern_byte(50 + on, 5 * PAGE + 6), a[5 * PAGE + 6]);
		ASSERT_EQ(0, read_pins(&p3));
		ASSERT_EQ(0, vamr_unregister(self->fd, h));

		EXPECT_EQ(p0.reg_pages + NPAGES, p1.reg_pages);
		EXPECT_LT(p2.pages, p3.pages);
		EXPECT_EQ(p2.rounds + 1, p3.rounds);
		if (on) {
			/* CPU time in ns: a round that pins pages takes more than 0. */
			EXPECT_LT(p0.reg_ns, p1.reg_ns);
			EXPECT_LT(p0.reg_cpu_ns, p1.reg_cpu_ns);
			EXPECT_LT(p2.ns, p3.ns);
			EXPECT_LT(p2.cpu_ns, p3.cpu_ns);
		} else {
			EXPECT_EQ(p0.reg_ns, p1.reg_ns);
			EXPECT_EQ(p0.reg_cpu_ns, p1.reg_cpu_ns);
			EXPECT_EQ(p2.ns, p3.ns);
			EXPECT_EQ(p2.cpu_ns, p3.cpu_ns);
		}
	}
	munmap(a, len);
}

TEST_HARNESS_MAIN
