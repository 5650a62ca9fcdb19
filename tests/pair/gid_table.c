// SPDX-License-Identifier: GPL-2.0
/*
 * gid_table: the non-empty entries of port 1's GID table of an RDMA device,
 * one a line, in the notation of sysfs (scripts/guest/node-lib.sh, gid_table):
 *   INDEX GID TYPE NETDEV
 *   0 fe80:0000:0000:0000:5054:00ff:fe12:3401 RoCE v2 eth0
 * GID as /sys/class/infiniband/DEV/ports/1/gids/INDEX prints it, TYPE as
 * gid_attrs/types/INDEX ("RoCE v2", "IB/RoCE v1"), NETDEV as
 * gid_attrs/ndevs/INDEX (empty without one).
 *
 * One ibv_query_gid_ex() (an ioctl) per entry: rxe's table has 1024 entries,
 * and reading them from sysfs costs about 2.5 ms a file under TCG (2.5 s for
 * the table, more under load), the ioctls 0.12 s for all of them.
 *
 * usage: gid_table DEV
 * Exit status 0, 1 when the device is missing or a query fails otherwise
 * than with ENODATA (an empty entry).
 */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_port_attr port;
	int n, i, rc = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: gid_table DEV\n");
		return 1;
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		perror("gid_table: ibv_get_device_list");
		return 1;
	}
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "gid_table: no device %s\n", argv[1]);
		return 1;
	}
	if (ibv_query_port(ctx, 1, &port)) {
		perror("gid_table: ibv_query_port");
		return 1;
	}
	for (i = 0; i < port.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		char ndev[IF_NAMESIZE] = "";
		const uint8_t *g = e.gid.raw;
		int err = ibv_query_gid_ex(ctx, 1, i, &e, 0);

		if (err == ENODATA)
			continue;
		if (err) {
			fprintf(stderr, "gid_table: %s index %d: %s\n", argv[1], i, strerror(err));
			rc = 1;
			continue;
		}
		if (e.ndev_ifindex && !if_indextoname(e.ndev_ifindex, ndev))
			ndev[0] = 0;
		printf("%d %02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x %s %s\n", i,
		       g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7],
		       g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15],
		       e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1", ndev);
	}
	ibv_close_device(ctx);
	return rc;
}
