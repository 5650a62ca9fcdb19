// SPDX-License-Identifier: GPL-2.0
/*
 * The bounds on what users create through vamr, as module parameters.
 *
 * The Rust module! macro registers its parameters with no sysfs file (perm 0);
 * these need one, readable by anyone and writable by root at run time
 * (/sys/module/vamr/parameters/), so they are declared here and read through
 * vamr_limit() and vamr_budget_limit(). A lower value applies to new objects
 * (and new work) only: what exists stays. src/limits.rs does the counting;
 * Documentation/vamr.rst ("Security") lists the bounds.
 */
#include <linux/compiler.h>
#include <linux/moduleparam.h>

#include "vamr_limits.h"

struct vamr_limit_param {
	unsigned int per_mm;
	unsigned int per_user;
};

static struct vamr_limit_param vamr_limits[VAMR_OBJ_COUNT] = {
	[VAMR_OBJ_REGIONS] = { 8192, 65536 },
	[VAMR_OBJ_FILES] = { 256, 1024 },
	[VAMR_OBJ_WATCHES] = { 4096, 65536 },
	[VAMR_OBJ_EVENT_RECORDS] = { 262144, 1048576 },
};

#define VAMR_LIMIT_PARAM(name, obj, field, desc)                               \
	module_param_named(name, vamr_limits[obj].field, uint, 0644);          \
	MODULE_PARM_DESC(name, desc)

VAMR_LIMIT_PARAM(max_regions_per_mm, VAMR_OBJ_REGIONS, per_mm,
		 "Most regions (/dev/vamr regions and VA MRs together) one process may have; registering more fails with ENOSPC (default 8192)");
VAMR_LIMIT_PARAM(max_regions_per_user, VAMR_OBJ_REGIONS, per_user,
		 "Most regions (/dev/vamr regions and VA MRs together) the processes of one user may have; ENOSPC past it (default 65536)");
VAMR_LIMIT_PARAM(max_files_per_mm, VAMR_OBJ_FILES, per_mm,
		 "Most open /dev/vamr files of one process; open() fails with ENOSPC past it (default 256)");
VAMR_LIMIT_PARAM(max_files_per_user, VAMR_OBJ_FILES, per_user,
		 "Most open /dev/vamr files of one user; open() fails with ENOSPC past it (default 1024)");
VAMR_LIMIT_PARAM(max_watches_per_mm, VAMR_OBJ_WATCHES, per_mm,
		 "Most monitor-mode watches of one process, over all its /dev/vamr files; VAMR_IOC_WATCH fails with ENOSPC past it (default 4096)");
VAMR_LIMIT_PARAM(max_watches_per_user, VAMR_OBJ_WATCHES, per_user,
		 "Most monitor-mode watches of one user; VAMR_IOC_WATCH fails with ENOSPC past it (default 65536)");
VAMR_LIMIT_PARAM(max_event_records_per_mm, VAMR_OBJ_EVENT_RECORDS, per_mm,
		 "Most event-ring records (the rings' sizes) of the /dev/vamr files of one process; open() or a ring resize fails with ENOSPC past it (default 262144)");
VAMR_LIMIT_PARAM(max_event_records_per_user, VAMR_OBJ_EVENT_RECORDS, per_user,
		 "Most event-ring records of the /dev/vamr files of one user; ENOSPC past it (default 1048576)");

/*
 * Work in flight of one user, over all its processes (the per-process bounds
 * are constants of src/mm_state.rs: 16, 64, 64). Past one the access fails
 * with EAGAIN, an asynchronous prefetch is dropped.
 */
static unsigned int vamr_budget_limits[VAMR_BUDGET_COUNT] = {
	[VAMR_BUDGET_FAULT_REQUESTS] = 256,
	[VAMR_BUDGET_DEVICE_WAITS] = 1024,
	[VAMR_BUDGET_PREFETCHES] = 1024,
};

#define VAMR_BUDGET_PARAM(name, budget, desc)                                  \
	module_param_named(name, vamr_budget_limits[budget], uint, 0644);      \
	MODULE_PARM_DESC(name, desc)

VAMR_BUDGET_PARAM(max_fault_requests_per_user, VAMR_BUDGET_FAULT_REQUESTS,
		  "Most fault requests (faults delivered from vamr_fault for accesses that must not wait themselves) the processes of one user may have outstanding; past it the access fails with EAGAIN (default 256; 16 per process)");
VAMR_BUDGET_PARAM(max_device_waits_per_user, VAMR_BUDGET_DEVICE_WAITS,
		  "Most device tasks waiting for fault requests of the processes of one user; past it the access fails with EAGAIN (default 1024; 64 per process)");
VAMR_BUDGET_PARAM(max_prefetches_per_user, VAMR_BUDGET_PREFETCHES,
		  "Most asynchronous prefetches queued or running for the processes of one user; past it the advice is dropped (default 1024; 64 per process)");

unsigned int vamr_limit(unsigned int object, bool per_user)
{
	if (object >= VAMR_OBJ_COUNT)
		return 0;
	return per_user ? READ_ONCE(vamr_limits[object].per_user) :
			  READ_ONCE(vamr_limits[object].per_mm);
}

const char *vamr_limit_name(unsigned int object, bool per_user)
{
	static const char *const names[VAMR_OBJ_COUNT][2] = {
		[VAMR_OBJ_REGIONS] = { "max_regions_per_mm", "max_regions_per_user" },
		[VAMR_OBJ_FILES] = { "max_files_per_mm", "max_files_per_user" },
		[VAMR_OBJ_WATCHES] = { "max_watches_per_mm", "max_watches_per_user" },
		[VAMR_OBJ_EVENT_RECORDS] = { "max_event_records_per_mm",
					     "max_event_records_per_user" },
	};

	if (object >= VAMR_OBJ_COUNT)
		return NULL;
	return names[object][per_user];
}

unsigned int vamr_budget_limit(unsigned int budget)
{
	if (budget >= VAMR_BUDGET_COUNT)
		return 0;
	return READ_ONCE(vamr_budget_limits[budget]);
}

const char *vamr_budget_name(unsigned int budget)
{
	static const char *const names[VAMR_BUDGET_COUNT] = {
		[VAMR_BUDGET_FAULT_REQUESTS] = "max_fault_requests_per_user",
		[VAMR_BUDGET_DEVICE_WAITS] = "max_device_waits_per_user",
		[VAMR_BUDGET_PREFETCHES] = "max_prefetches_per_user",
	};

	if (budget >= VAMR_BUDGET_COUNT)
		return NULL;
	return names[budget];
}
