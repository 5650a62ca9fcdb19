// SPDX-License-Identifier: GPL-2.0
/*
 * vamr C glue: what the Rust side of the module cannot reach by itself.
 *
 * Rust cannot include the UAPI header, so the values the C compiler derives
 * from it (ioctl numbers, structure sizes and field offsets) are published
 * here and compared with the Rust definitions by the KUnit suite
 * (src/uapi.rs), so the two can never drift apart silently.
 */
#include <linux/build_bug.h>
#include <linux/stddef.h>
#include <linux/types.h>
#include <uapi/misc/vamr.h>

/* Read by the Rust KUnit suite `vamr_uapi`; see src/uapi.rs. */
const u32 vamr_c_abi_version = VAMR_ABI_VERSION;
const u32 vamr_c_ioc_query = VAMR_IOC_QUERY;
const u32 vamr_c_query_size = sizeof(struct vamr_query);
const u32 vamr_c_query_off_features = offsetof(struct vamr_query, features);
const u32 vamr_c_query_off_page_size = offsetof(struct vamr_query, page_size);
const u64 vamr_c_features_known = VAMR_FEATURES_KNOWN;

/* The ABI must not depend on the user-space word size. */
static_assert(sizeof(struct vamr_query) == 24);
