// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the ioctl threads' operations: every /dev/vamr ioctl with valid
 * and invalid arguments, open/register/close cycles, and a private region
 * whose data is checked.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

/* ---- ioctl operations ------------------------------------------------ */

void op_query(struct thr *t)
{
	struct vamr_query q = { 0 };
	enum loc loc = pick_loc(&t->rng);
	bool bad = false, back;
	int ret, fd = G.vfd[below(&t->rng, NR_VFDS)];

	if (chance(&t->rng, 15)) {
		q.flags = (uint32_t)rnd(&t->rng) | 1;
		bad = true;
	}
	if (chance(&t->rng, 10)) {
		q.reserved = (uint32_t)rnd(&t->rng) | 0x100;
		bad = true;
	}
	if (chance(&t->rng, 20)) {	/* output fields: ignored on input */
		q.abi_version = (uint32_t)rnd(&t->rng);
		q.features = rnd(&t->rng);
		q.page_size = (uint32_t)rnd(&t->rng);
	}
	ret = ioc_at(t, fd, VAMR_IOC_QUERY, &q, sizeof(q), loc, &back);
	op_result(K_ioc_query, ret);
	if (!ioc_check(K_ioc_query, "QUERY", loc, true, ret, ERR_QUERY))
		return;
	if (bad) {
		if (ret != EINVAL)
			violation(K_ioc_query, "QUERY with flags %#x reserved %#x: %s, expected EINVAL",
				  q.flags, q.reserved, ename(ret));
		return;
	}
	if (ret)
		violation(K_ioc_query, "valid QUERY failed: %s", ename(ret));
	else if (back && (q.abi_version != VAMR_ABI_VERSION || q.page_size != PAGE ||
			  (q.features & ~VAMR_FEATURES_KNOWN) ||
			  !(q.features & VAMR_FEATURE_REGIONS) || q.reserved || q.flags))
		violation(K_ioc_query, "QUERY answer abi %u page %u features %#llx reserved %u",
			  q.abi_version, q.page_size, (unsigned long long)q.features, q.reserved);
}

enum expect { EXP_OK, EXP_EINVAL, EXP_EFAULT };

void op_register(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_register reg = { 0 };
	enum loc loc = pick_loc(r);
	enum expect exp = EXP_OK;
	bool writable_ok = true, back;
	unsigned int c = (unsigned int)below(r, 100);
	uint8_t on_stack;
	int ret;

	if (c < 70) {
		struct range g = pick_range(r, 0);

		if (chance(r, 30))
			unalign(r, &g);
		if (chance(r, 10))
			into_gap(r, &g);
		reg.addr = (uintptr_t)g.addr;
		reg.len = g.len;
	} else if (c < 76) {		/* the window up to the argument pages */
		reg.addr = (uintptr_t)G.win;
		reg.len = ARG_OFF;
	} else if (c < 78) {		/* large and sparse: nothing mapped */
		reg.addr = SPARSE_ADDR + below(r, 1 << 20) * PAGE;
		reg.len = (1 + below(r, 256)) * MIB;
		writable_ok = false;
	} else if (c < 82) {		/* our own stack: read-only regions only */
		reg.addr = (uintptr_t)&on_stack - below(r, 2 * PAGE);
		reg.len = 1 + below(r, 2 * PAGE);
		writable_ok = false;
	} else if (c < 87) {		/* kernel addresses */
		reg.addr = bad_addrs[2 + below(r, NR_BAD_ADDRS - 4)];
		reg.len = 1 + below(r, 16 * PAGE);
		exp = EXP_EFAULT;
	} else if (c < 91) {		/* wraps around */
		reg.addr = UINT64_MAX - below(r, 4 * PAGE);
		reg.len = 4 * PAGE + below(r, UINT64_MAX / 2);
		exp = EXP_EINVAL;
	} else if (c < 94) {		/* empty */
		reg.addr = (uintptr_t)G.win + below(r, WINDOW_LEN);
		reg.len = 0;
		exp = EXP_EINVAL;
	} else {			/* low addresses, nothing mapped */
		reg.addr = below(r, 16) * PAGE + below(r, 2) * below(r, PAGE);
		reg.len = 1 + below(r, 8 * PAGE);
		writable_ok = false;
	}
	reg.access = VAMR_ACCESS_READ;
	if (writable_ok && chance(r, 75))
		reg.access |= VAMR_ACCESS_WRITE;
	if (chance(r, 10))
		reg.access &= ~VAMR_ACCESS_READ;	/* READ is implied */
	reg.cookie = COOKIE_MAGIC << 48 | (uint64_t)fdi << 40 | (rnd(r) & 0xffffffffffull);
	if (chance(r, 8)) {
		switch (below(r, 3)) {
		case 0:
			reg.flags = (uint32_t)rnd(r) | 1;
			break;
		case 1:
			reg.reserved = (uint32_t)rnd(r) | 2;
			break;
		default:
			reg.access |= (uint32_t)(rnd(r) | 4) & ~VAMR_ACCESS_KNOWN & ~1u;
			if (!(reg.access & ~VAMR_ACCESS_KNOWN))
				reg.access |= 1u << 31;
			break;
		}
		exp = EXP_EINVAL;	/* checked before anything else */
	}
	if (chance(r, 10))
		reg.handle = (uint32_t)rnd(r);		/* output: ignored */

	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_REGISTER, &reg, sizeof(reg), loc, &back);
	op_result(K_ioc_register, ret);
	if (!ret && loc == LOC_UNSTABLE) {
		/* Keep the handle if the reply is still there, intact. */
		struct vamr_register rb;

		if (!self_read(&rb, t->unstable_at, sizeof(rb)) && rb.addr == reg.addr &&
		    rb.len == reg.len && rb.cookie == reg.cookie && rb.access == reg.access &&
		    !rb.flags && !rb.reserved) {
			struct hent e = { rb.handle, rb.addr, rb.len, rb.access };

			ht_add(fdi, t, &e);
		} else {
			__atomic_add_fetch(&G.lost_handles, 1, __ATOMIC_RELAXED);
		}
	}
	if (!ioc_check(K_ioc_register, "REGISTER", loc, true, ret, ERR_REGISTER))
		return;
	if (exp == EXP_EINVAL && ret != EINVAL)
		violation(K_ioc_register, "REGISTER addr %#llx len %#llx access %#x flags %#x reserved %#x: %s, expected EINVAL",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, reg.access,
			  reg.flags, reg.reserved, ename(ret));
	else if (exp == EXP_EFAULT && ret != EFAULT && ret != ENOSPC && ret != ENOMEM)
		violation(K_ioc_register, "REGISTER of kernel range %#llx+%#llx: %s, expected EFAULT",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, ename(ret));
	else if (exp == EXP_OK && ret && !in_set(ret, ERR_PIN))
		violation(K_ioc_register, "REGISTER of user range %#llx+%#llx access %#x: %s",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, reg.access,
			  ename(ret));
	if (!ret && back) {
		struct hent e = { reg.handle, reg.addr, reg.len, reg.access };

		ht_add(fdi, t, &e);
	}
}

void op_unregister(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_handle_arg a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool mine = false, back, strict;
	int ret;

	/*
	 * Through the unstable page only never-live handles, in a slot where
	 * nothing else is written: what the kernel reads there is then this
	 * struct or zeros (handle 0, the dummy), never a live handle.
	 */
	if (loc != LOC_UNSTABLE && chance(r, 75) && ht_take(fdi, t, &e)) {
		a.handle = e.handle;
		mine = true;
	} else {
		a.handle = dead_handle(r);
	}
	if (chance(r, 8))
		a.flags = (uint32_t)rnd(r) | 1;
	if (loc == LOC_UNSTABLE) {
		uint8_t *slot = G.argpg + t->idx * ARG_SLICE;
		struct vamr_handle_arg old;

		/* Unwritable but readable (read-only): it holds an older struct. */
		if (self_write(slot, &a, sizeof(a)) && !self_read(&old, slot, sizeof(old)))
			return;
		ret = ioctl(G.vfd[fdi], VAMR_IOC_UNREGISTER, slot) ? errno : 0;
		back = false;
	} else {
		ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_UNREGISTER, &a, sizeof(a), loc, &back);
	}
	op_result(K_ioc_unregister, ret);
	strict = ioc_check(K_ioc_unregister, "UNREGISTER", loc, false, ret, ERR_UNREGISTER);
	if (strict) {
		if (a.flags && ret != EINVAL)
			violation(K_ioc_unregister, "UNREGISTER with flags %#x: %s, expected EINVAL",
				  a.flags, ename(ret));
		else if (!a.flags && mine && ret)
			violation(K_ioc_unregister, "UNREGISTER of live handle %u: %s",
				  a.handle, ename(ret));
		else if (!a.flags && !mine && ret != ENOENT)
			violation(K_ioc_unregister, "UNREGISTER of never-live handle %u: %s, expected ENOENT",
				  a.handle, ename(ret));
	}
	/* Still registered? Then it goes back (unless we cannot know). */
	if (mine && ret && loc != LOC_UNSTABLE)
		ht_add(fdi, t, &e);
	else if (mine && loc == LOC_UNSTABLE && ret)
		__atomic_add_fetch(&G.lost_handles, 1, __ATOMIC_RELAXED);
}

/* A buffer for ACCESS: bounce, window, or bad. *len may be shortened. */
static uint64_t pick_buf(struct thr *t, __u64 *len, bool *bad)
{
	struct rng *r = &t->rng;
	unsigned int c = (unsigned int)below(r, 100);

	*bad = false;
	if (c < 50) {
		if (*len > BUF_LEN)
			*len = BUF_LEN;
		return (uintptr_t)t->bounce;
	}
	if (c < 80) {		/* the window: arenas and gaps, not the argument pages */
		uint64_t off;

		if (*len > ARG_OFF / 4)
			*len = ARG_OFF / 4;
		off = below(r, ARG_OFF - *len + 1);
		return (uintptr_t)G.win + off;
	}
	if (c < 88) {		/* the read-only page: kernel writes fail */
		if (*len > PAGE)
			*len = PAGE;
		return (uintptr_t)t->argbuf + 2 * PAGE;
	}
	*bad = true;
	if (c < 94)
		return 0;
	return bad_addrs[below(r, NR_BAD_ADDRS)];
}

/* Address and length inside (mostly) the region of @e. */
static void pick_sub(struct rng *r, const struct hent *e, __u64 *addr, __u64 *len,
		     uint64_t max)
{
	unsigned int c = (unsigned int)below(r, 100);
	uint64_t off;

	if (c < 80) {
		off = below(r, e->len);
		*len = 1 + below(r, e->len - off);
		if (*len > max)
			*len = 1 + below(r, max);
		*addr = e->addr + off;
	} else if (c < 90) {	/* runs past the end */
		off = below(r, e->len);
		*addr = e->addr + off;
		*len = e->len - off + 1 + below(r, 2 * PAGE);
	} else if (c < 95) {	/* starts before */
		*addr = e->addr - 1 - below(r, PAGE);
		*len = 1 + below(r, 2 * PAGE);
	} else {
		*addr = e->addr + below(r, e->len);
		*len = chance(r, 50) ? 0 : UINT64_MAX - below(r, 4 * PAGE);
	}
}

void op_access(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_access a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, badbuf, back, strict;
	__u64 len;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &a.addr, &len, 4 * MIB);
	} else {
		e.handle = dead_handle(r);
		a.addr = (uintptr_t)G.win + below(r, WINDOW_LEN);
		len = 1 + below(r, 4 * PAGE);
	}
	a.handle = e.handle;
	a.op = chance(r, 50) ? VAMR_ACCESS_OP_READ : VAMR_ACCESS_OP_WRITE;
	if (chance(r, 6))
		a.op = 2 + (uint32_t)below(r, 0xfffffff0u);
	badbuf = false;
	if (len && len < UINT64_MAX - 8 * PAGE)	/* (else EINVAL before any copy) */
		a.buf = pick_buf(t, &len, &badbuf);
	else
		a.buf = (uintptr_t)t->bounce;
	a.len = len;
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_ACCESS, &a, sizeof(a), loc, &back);
	op_result(K_ioc_access, ret);
	strict = ioc_check(K_ioc_access, "ACCESS", loc, false, ret, ERR_ACCESS);
	if (!strict)
		return;
	if (a.op > VAMR_ACCESS_OP_WRITE && ret != EINVAL)
		violation(K_ioc_access, "ACCESS with op %u: %s, expected EINVAL", a.op, ename(ret));
	else if (a.op <= VAMR_ACCESS_OP_WRITE && !live && ret != ENOENT)
		violation(K_ioc_access, "ACCESS of never-live handle %u: %s, expected ENOENT",
			  a.handle, ename(ret));
	else if (!ret && badbuf)
		violation(K_ioc_access, "ACCESS with buf %#llx len %llu succeeded",
			  (unsigned long long)a.buf, (unsigned long long)a.len);
	else if (!ret && a.op == VAMR_ACCESS_OP_READ &&
		 a.buf == (uintptr_t)t->argbuf + 2 * PAGE)
		violation(K_ioc_access, "ACCESS READ into a read-only page succeeded");
}

void op_atomic(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_atomic a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, back, misaligned = false;
	__u64 len;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &a.addr, &len, 8);
		if (chance(r, 85))
			a.addr &= ~7ull;
		misaligned = a.addr & 7;
	} else {
		e.handle = dead_handle(r);
		a.addr = ((uintptr_t)G.win + below(r, WINDOW_LEN)) & ~7ull;
	}
	a.handle = e.handle;
	a.op = (uint32_t)below(r, 3);
	if (chance(r, 6))
		a.op = 3 + (uint32_t)below(r, 0xfffffff0u);
	a.compare = rnd(r);
	a.swap = rnd(r);
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_ATOMIC, &a, sizeof(a), loc, &back);
	op_result(K_ioc_atomic, ret);
	if (!ioc_check(K_ioc_atomic, "ATOMIC", loc, true, ret, ERR_ACCESS))
		return;
	if (a.op > VAMR_ATOMIC_WRITE && ret != EINVAL)
		violation(K_ioc_atomic, "ATOMIC with op %u: %s, expected EINVAL", a.op, ename(ret));
	else if (a.op <= VAMR_ATOMIC_WRITE && !live && ret != ENOENT)
		violation(K_ioc_atomic, "ATOMIC on never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (a.op <= VAMR_ATOMIC_WRITE && misaligned && ret != EINVAL && ret != ENOENT)
		violation(K_ioc_atomic, "ATOMIC at misaligned %#llx: %s, expected EINVAL",
			  (unsigned long long)a.addr, ename(ret));
}

void op_prefetch(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_prefetch p = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, bad = false, back;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &p.addr, &p.len, 64 * MIB);
	} else {
		e.handle = dead_handle(r);
		p.addr = (uintptr_t)G.win;
		p.len = PAGE;
	}
	p.handle = e.handle;
	/* the advice: read, VAMR_PREFETCH_WRITE or VAMR_PREFETCH_NO_FAULT */
	p.flags = (uint32_t)below(r, 3);
	if (chance(r, 8)) {
		switch (below(r, 3)) {
		case 0:
			p.flags = VAMR_PREFETCH_KNOWN;	/* both: EINVAL */
			break;
		case 1:
			p.flags |= ((uint32_t)rnd(r) | 4) & ~VAMR_PREFETCH_KNOWN;
			break;
		default:
			p.reserved = (uint32_t)rnd(r) | 1;
			break;
		}
		bad = true;
	}
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_PREFETCH, &p, sizeof(p), loc, &back);
	op_result(K_ioc_prefetch, ret);
	if (!ioc_check(K_ioc_prefetch, "PREFETCH", loc, true, ret, ERR_PREFETCH))
		return;
	if (bad && ret != EINVAL)
		violation(K_ioc_prefetch, "PREFETCH with flags %#x reserved %#x: %s, expected EINVAL",
			  p.flags, p.reserved, ename(ret));
	else if (!bad && !live && ret != ENOENT)
		violation(K_ioc_prefetch, "PREFETCH on never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (!ret && back && p.pages > (p.len + 2 * PAGE) / PAGE)
		violation(K_ioc_prefetch, "PREFETCH of %llu bytes pinned %u pages",
			  (unsigned long long)p.len, p.pages);
}

void op_stats(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_stats s;
	enum loc loc = pick_loc(r);
	unsigned int c = (unsigned int)below(r, 100);
	bool back, global = false, never = false;
	struct hent e;
	int ret;

	memset(&s, 0, sizeof(s));
	if (c < 40) {
		s.handle = VAMR_STATS_GLOBAL;
		global = true;
	} else if (c < 80 && ht_peek(fdi, t, &e)) {
		s.handle = e.handle;
	} else {
		s.handle = dead_handle(r);
		never = s.handle != VAMR_STATS_GLOBAL;
		global = !never;
	}
	if (chance(r, 8))
		s.flags = (uint32_t)rnd(r) | 1;
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_STATS, &s, sizeof(s), loc, &back);
	op_result(K_ioc_stats, ret);
	if (!ioc_check(K_ioc_stats, "STATS", loc, true, ret, ERR_STATS))
		return;
	if (s.flags && ret != EINVAL)
		violation(K_ioc_stats, "STATS with flags %#x: %s, expected EINVAL", s.flags,
			  ename(ret));
	else if (!s.flags && global && ret)
		violation(K_ioc_stats, "global STATS failed: %s", ename(ret));
	else if (!s.flags && never && ret != ENOENT)
		violation(K_ioc_stats, "STATS of never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (!ret && back && !global && s.counters.regions != 1)
		violation(K_ioc_stats, "STATS of a region reports %llu regions",
			  (unsigned long long)s.counters.regions);
	else if (!ret && back && global && s.generation)
		violation(K_ioc_stats, "global STATS generation %llu, expected 0",
			  (unsigned long long)s.generation);
}

void op_events_open(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_events_open o = { 0 };
	enum loc loc = pick_loc(r);
	bool bad = false, back;
	int ret;

	o.flags = (uint32_t)below(r, 4);
	if (chance(r, 8)) {
		o.flags |= (uint32_t)rnd(r) & ~3u;
		if (!(o.flags & ~3u))
			o.flags |= 4;
		bad = true;
	}
	o.fd = (int32_t)rnd(r);
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_EVENTS_OPEN, &o, sizeof(o), loc, &back);
	op_result(K_ioc_events_open, ret);
	if (!ioc_check(K_ioc_events_open, "EVENTS_OPEN", loc, true, ret, ERR_EVOPEN))
		return;
	if (bad && ret != EINVAL)
		violation(K_ioc_events_open, "EVENTS_OPEN with flags %#x: %s, expected EINVAL",
			  o.flags, ename(ret));
	if (!ret && back) {
		if (o.fd < 0 || fcntl(o.fd, F_GETFD) < 0) {
			violation(K_ioc_events_open, "EVENTS_OPEN returned fd %d", o.fd);
			return;
		}
		if (!!(fcntl(o.fd, F_GETFD) & FD_CLOEXEC) != !!(o.flags & VAMR_EVENTS_CLOEXEC) ||
		    !!(fcntl(o.fd, F_GETFL) & O_NONBLOCK) != !!(o.flags & VAMR_EVENTS_NONBLOCK))
			violation(K_ioc_events_open, "EVENTS_OPEN flags %#x not reflected by fd %d",
				  o.flags, o.fd);
		ev_add(o.fd, fdi, o.flags & VAMR_EVENTS_NONBLOCK);
	}
}

void op_mr_query(struct thr *t)
{
	struct rng *r = &t->rng;
	struct vamr_mr_query q;
	enum loc loc = pick_loc(r);
	bool back;
	int ret;

	memset(&q, 0, sizeof(q));
	if (chance(r, 60))
		q.key = __atomic_load_n(&G.keys[below(r, NR_KEYS)], __ATOMIC_RELAXED);
	else
		q.key = (uint32_t)rnd(r);
	q.ib_index = chance(r, 90) ? G.ib_index : (uint32_t)rnd(r);
	if (chance(r, 8))
		q.flags = (uint32_t)rnd(r) | 1;
	if (chance(r, 4))
		q.reserved = (uint32_t)rnd(r) | 1;
	ret = ioc_at(t, G.vfd[below(r, NR_VFDS)], VAMR_IOC_MR_QUERY, &q, sizeof(q), loc, &back);
	op_result(K_ioc_mr_query, ret);
	if (!ioc_check(K_ioc_mr_query, "MR_QUERY", loc, true, ret, ERR_MRQUERY))
		return;
	if ((q.flags || q.reserved) && ret != EINVAL)
		violation(K_ioc_mr_query, "MR_QUERY with flags %#x reserved %#x: %s, expected EINVAL",
			  q.flags, q.reserved, ename(ret));
	else if (!ret && back && (!q.len || q.counters.regions != 1))
		violation(K_ioc_mr_query, "MR_QUERY of key %#x: len %llu regions %llu", q.key,
			  (unsigned long long)q.len, (unsigned long long)q.counters.regions);
}

static const unsigned long known_cmds[] = {
	VAMR_IOC_QUERY, VAMR_IOC_REGISTER, VAMR_IOC_UNREGISTER, VAMR_IOC_ACCESS,
	VAMR_IOC_ATOMIC, VAMR_IOC_PREFETCH, VAMR_IOC_STATS, VAMR_IOC_EVENTS_OPEN,
	VAMR_IOC_MR_QUERY, VAMR_IOC_DEVICE, VAMR_IOC_EVENTS_OPEN_EX, VAMR_IOC_WATCH,
	VAMR_IOC_UNWATCH, VAMR_IOC_WATCH_SYNC,
};

#define NR_KNOWN_CMDS ARRAY_SIZE(known_cmds)

/* ioctl types the VFS answers itself (fs/ioctl.c do_vfs_ioctl). */
static bool vfs_type(unsigned int type)
{
	return type == 0x00 || type == 0x15 || type == 'T' || type == 'X' ||
	       type == 'f' || type == 0x94;
}

void op_bad_cmd(struct thr *t)
{
	struct rng *r = &t->rng;
	unsigned int c = (unsigned int)below(r, 100);
	unsigned long cmd;
	uint8_t junk[64];
	void *arg;
	bool events = false;
	int fd, ret;
	size_t i;

	do {
		if (c < 40) {
			cmd = _IOC(below(r, 4), VAMR_IOCTL_TYPE, below(r, 256), below(r, 1 << 14));
		} else if (c < 70) {
			unsigned long k = known_cmds[below(r, NR_KNOWN_CMDS)];

			if (below(r, 2))	/* another size */
				cmd = _IOC(_IOC_DIR(k), _IOC_TYPE(k), _IOC_NR(k),
					   (_IOC_SIZE(k) + 1 + below(r, 64)) & 0x3fff);
			else			/* another direction */
				cmd = _IOC((_IOC_DIR(k) + 1 + below(r, 3)) & 3, _IOC_TYPE(k),
					   _IOC_NR(k), _IOC_SIZE(k));
		} else {
			cmd = (uint32_t)rnd(r);
		}
		for (i = 0; i < NR_KNOWN_CMDS; i++)
			if (cmd == known_cmds[i])
				break;
		c = (unsigned int)below(r, 100);
	} while (i < NR_KNOWN_CMDS || vfs_type(_IOC_TYPE(cmd)));

	switch (below(r, 4)) {
	case 0:
		arg = NULL;
		break;
	case 1:
		arg = (void *)(uintptr_t)bad_addrs[below(r, NR_BAD_ADDRS)];
		break;
	default:
		memset(junk, 0xa5, sizeof(junk));
		arg = junk;
		break;
	}
	fd = G.vfd[below(r, NR_VFDS)];
	if (chance(r, 20)) {
		pthread_mutex_lock(&G.ev_lock);
		if (G.nev) {
			fd = G.ev[below(r, G.nev)].fd;
			events = true;
		}
		pthread_mutex_unlock(&G.ev_lock);
	}
	ret = ioctl(fd, cmd, arg) ? errno : 0;
	op_result(K_ioc_bad_cmd, ret);
	/* An events fd may have been closed meanwhile (EBADF) or reused. */
	if (ret != ENOTTY && !(events && (ret == EBADF || ret == ENOTTY)))
		violation(K_ioc_bad_cmd, "unknown command %#lx on %s file: %s, expected ENOTTY",
			  cmd, events ? "an events" : "a /dev/vamr", ename(ret));
}

/* Open a file, register a few regions, maybe an events file, close with all live. */
void op_fd_lifecycle(struct thr *t)
{
	struct rng *r = &t->rng;
	int fd = vamr_open(), n = 1 + (int)below(r, 4), i, ret;
	uint32_t h = 0;

	if (fd < 0) {
		op_result(K_ioc_fd_lifecycle, -fd);
		if (fd != -EMFILE && fd != -ENFILE && fd != -ENOMEM)
			violation(K_ioc_fd_lifecycle, "open /dev/vamr: %s", ename(-fd));
		return;
	}
	for (i = 0; i < n; i++) {
		struct range g = pick_range(r, 0);

		if (chance(r, 30))
			unalign(r, &g);
		ret = vamr_register(fd, g.addr, g.len, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE,
				    COOKIE_MAGIC << 48 | 0xffull << 40 | i, &h);
		if (ret && !in_set(-ret, ERR_PIN))
			violation(K_ioc_fd_lifecycle, "REGISTER %p+%zu on a fresh file: %s",
				  g.addr, g.len, ename(-ret));
		if (!ret && chance(r, 40)) {
			ret = vamr_prefetch(fd, h, g.addr, g.len, NULL);
			if (ret && !in_set(-ret, ERR_PREFETCH))
				violation(K_ioc_fd_lifecycle, "PREFETCH on a fresh file: %s",
					  ename(-ret));
		}
	}
	if (chance(r, 40)) {
		struct vamr_events_open o = { .flags = VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC };

		if (!vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &o))
			ev_add(o.fd, __atomic_add_fetch(&G.next_qid, 1, __ATOMIC_RELAXED), true);
	}
	ret = close(fd) ? errno : 0;
	op_result(K_ioc_fd_lifecycle, ret);
	if (ret)
		violation(K_ioc_fd_lifecycle, "close of a /dev/vamr file: %s", ename(ret));
}

/* True when @buf is not pattern @seed; *at gets the first wrong byte. */
bool data_bad(const void *buf, size_t len, uint64_t seed, size_t *at)
{
	*at = pattern_check(buf, len, seed, 0);
	return *at != PATTERN_OK;
}

/*
 * The private region (not in the window, registered on the first shared
 * file, used by this thread only): remap it, then check the data through
 * ACCESS both ways and through an ATOMIC.
 */
void op_integrity(struct thr *t)
{
	struct rng *r = &t->rng;
	uint64_t seed = rnd(r), off, len, old, res = 0, add;
	int fd = G.vfd[0], ret;
	size_t bad;
	uint64_t *w;

	if (!t->priv_ok)
		return;
	switch (below(r, 4)) {
	case 0:
		madvise(t->priv, VBUF_LEN, MADV_DONTNEED);
		break;
	case 1:
		mmap(t->priv, VBUF_LEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		break;
	case 2:
		mprotect(t->priv, VBUF_LEN, PROT_READ);
		mprotect(t->priv, VBUF_LEN, PROT_READ | PROT_WRITE);
		break;
	}
	off = below(r, VBUF_LEN);
	len = 1 + below(r, VBUF_LEN - off);
	if (len > BUF_LEN)
		len = BUF_LEN;
	pattern_fill(t->priv + off, len, seed, 0);
	ret = vamr_read(fd, t->priv_h, t->priv + off, t->bounce, len);
	if (ret)
		violation(K_ioc_integrity, "ACCESS READ of the private region: %s", ename(-ret));
	else if (data_bad(t->bounce, len, seed, &bad))
		violation(K_ioc_integrity, "ACCESS READ at +%llu: byte %zu of %llu differs from what the CPU wrote",
			  (unsigned long long)off, bad, (unsigned long long)len);
	off = below(r, VBUF_LEN);
	len = 1 + below(r, VBUF_LEN - off);
	if (len > BUF_LEN)
		len = BUF_LEN;
	pattern_fill(t->bounce, len, seed + 1, 0);
	ret = vamr_write(fd, t->priv_h, t->priv + off, t->bounce, len);
	if (ret)
		violation(K_ioc_integrity, "ACCESS WRITE of the private region: %s", ename(-ret));
	else if (data_bad(t->priv + off, len, seed + 1, &bad))
		violation(K_ioc_integrity, "ACCESS WRITE at +%llu: the CPU sees byte %zu of %llu wrong",
			  (unsigned long long)off, bad, (unsigned long long)len);
	w = (uint64_t *)(t->priv + (below(r, VBUF_LEN) & ~7ull));
	old = *w;
	add = rnd(r);
	ret = vamr_atomic(fd, t->priv_h, w, VAMR_ATOMIC_FETCH_ADD, add, 0, &res);
	if (ret)
		violation(K_ioc_integrity, "ATOMIC FETCH_ADD on the private region: %s", ename(-ret));
	else if (res != old || *w != old + add)
		violation(K_ioc_integrity, "ATOMIC FETCH_ADD: old %#llx result %#llx now %#llx",
			  (unsigned long long)old, (unsigned long long)res,
			  (unsigned long long)*w);
	op_result(K_ioc_integrity, ret ? -ret : 0);
}
