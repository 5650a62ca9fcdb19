/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The bounds on what users create through vamr (src/limits.rs) and on the
 * work in flight they cause: module parameters of src/vamr_limits.c, read
 * through accessors. The Rust declarations (src/ffi.rs) must match these.
 */
#ifndef _VAMR_LIMITS_H
#define _VAMR_LIMITS_H

#include <linux/types.h>

/*
 * The objects, in the order of enum Object in src/limits.rs (a KUnit test
 * there compares the names).
 */
enum vamr_object {
	VAMR_OBJ_REGIONS,
	VAMR_OBJ_FILES,
	VAMR_OBJ_WATCHES,
	VAMR_OBJ_EVENT_RECORDS,
	VAMR_OBJ_COUNT,
};

/*
 * The limit in force for @object, per address space (@per_user false) or per
 * user (true); 0 for an unknown object. Any context.
 */
unsigned int vamr_limit(unsigned int object, bool per_user);

/* The parameter's name ("max_watches_per_mm", ...), NULL for an unknown one. */
const char *vamr_limit_name(unsigned int object, bool per_user);

/*
 * Work in flight, in the order of enum Budget in src/mm_state.rs: bounded per
 * address space by constants there, per user by these parameters.
 */
enum vamr_budget {
	VAMR_BUDGET_FAULT_REQUESTS,
	VAMR_BUDGET_DEVICE_WAITS,
	VAMR_BUDGET_PREFETCHES,
	VAMR_BUDGET_COUNT,
};

/* The per-user bound of @budget; 0 for an unknown one. Any context. */
unsigned int vamr_budget_limit(unsigned int budget);

/* Its parameter's name ("max_fault_requests_per_user", ...), NULL for an unknown one. */
const char *vamr_budget_name(unsigned int budget);

#endif /* _VAMR_LIMITS_H */
