// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_api_test: drives vamr's in-kernel API from user space, for the
 * selftest tests/selftests/vamr_api.c. It is a consumer the way an RDMA
 * driver is: it links against vamr.ko's exported symbols and copies through a
 * region with kernel buffers.
 *
 * /dev/vamr_api_test, one region per open file:
 *   VAMR_API_TEST_CREATE   {addr, len, access, compare}
 *                          compare != 0: vamr_region_create_on() of the
 *                          module's device (VAMR_API_TEST_IB_INDEX), key =
 *                          compare; compare == 0: vamr_region_create(), not
 *                          listed on any device
 *   VAMR_API_TEST_READ     {addr, len, buf}         vamr_region_read() into a
 *                                                   kernel buffer, then to buf
 *   VAMR_API_TEST_WRITE    {addr, len, buf}         buf to a kernel buffer, then
 *                                                   vamr_region_write()
 *   VAMR_API_TEST_ATOMIC   {addr, op, compare, swap, result}
 *   VAMR_API_TEST_PREFETCH {addr, len} -> result
 *   VAMR_API_TEST_STATS    struct vamr_counters
 *   VAMR_API_TEST_DESTROY
 *   VAMR_API_TEST_CANCEL
 *   VAMR_API_TEST_DEVICE_REMOVE  vamr_device_remove() of the module's device
 *   VAMR_API_TEST_DEVICE_ADD     vamr_device_add() again (-EEXIST when there)
 * close() destroys a region left behind.
 *
 * Regions created on the device are listed here, in the module's own MR
 * table (api_test_mrs), which the device's find_mr searches by the key's
 * index part (key >> 8), as rdma_rxe searches its MR pool: VAMR_IOC_MR_QUERY
 * goes through it.
 */
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vamr.h>

#include "vamr_api_test.h"

/*
 * This module's announcement as an RDMA device offering VA MRs, NULL while
 * removed (VAMR_API_TEST_DEVICE_REMOVE); under api_test_dev_lock. Lock order:
 * a file's lock, then api_test_dev_lock; api_test_dev_lock is never taken
 * under api_test_mrs_lock (vamr_device_remove() waits for find_mr, which
 * takes api_test_mrs_lock).
 */
static struct vamr_device *api_test_vamr_dev;
static DEFINE_MUTEX(api_test_dev_lock);

/*
 * The MR table: files whose region was created on the device, by key.
 * find_mr hands out a region only under api_test_mrs_lock, and a region is
 * taken out of the table under it before it is destroyed (vamr.h's lifetime
 * rule). A leaf lock.
 */
static LIST_HEAD(api_test_mrs);
static DEFINE_MUTEX(api_test_mrs_lock);

struct api_test_file {
	/*
	 * Create and destroy hold it for writing; every other call for reading,
	 * so that threads of one file copy through the region concurrently, as
	 * an RDMA driver's tasks do on several CPUs.
	 */
	struct rw_semaphore lock;
	struct vamr_region *region;	/* NULL when none */
	u32 key;			/* the region's key when listed */
	struct list_head mr_node;	/* in api_test_mrs when listed, else empty */
};

/* The device's find_mr: the region of the listed MR with @key's index part. */
static int api_test_find_mr(void *priv, u32 key,
			    void (*visit)(struct vamr_region *region, void *arg), void *arg)
{
	struct list_head *mrs = priv;
	struct api_test_file *f;
	int ret = -ENOENT;

	mutex_lock(&api_test_mrs_lock);
	list_for_each_entry(f, mrs, mr_node) {
		if (f->key >> 8 == key >> 8) {
			visit(f->region, arg);
			ret = 0;
			break;
		}
	}
	mutex_unlock(&api_test_mrs_lock);
	return ret;
}

static const struct vamr_device_ops api_test_ops = {
	.find_mr = api_test_find_mr,
};

static struct vamr_device *api_test_device_add(void)
{
	return vamr_device_add("vamr_api_test", VAMR_API_TEST_IB_INDEX,
			       VAMR_API_TEST_ACCESS_VA, &api_test_ops, &api_test_mrs);
}

/* Takes the file's region out of the MR table (a no-op when not listed). */
static void api_test_unlist(struct api_test_file *f)
{
	mutex_lock(&api_test_mrs_lock);
	list_del_init(&f->mr_node);
	mutex_unlock(&api_test_mrs_lock);
}

/* Creates the file's region on the device, listed under @key. */
static long api_test_create_on(struct api_test_file *f, struct vamr_api_test_arg *a, u32 key)
{
	struct api_test_file *o;
	struct vamr_region *r;
	long ret = 0;

	mutex_lock(&api_test_dev_lock);
	if (!api_test_vamr_dev) {
		ret = -ENODEV;
		goto out;
	}
	/* The index part is unique among the device's MRs, as in a driver. */
	mutex_lock(&api_test_mrs_lock);
	list_for_each_entry(o, &api_test_mrs, mr_node)
		if (o->key >> 8 == key >> 8)
			ret = -EEXIST;
	mutex_unlock(&api_test_mrs_lock);
	if (ret)
		goto out;
	r = vamr_region_create_on(api_test_vamr_dev, a->addr, a->len, a->access, key);
	if (IS_ERR(r)) {
		ret = PTR_ERR(r);
		goto out;
	}
	f->region = r;
	f->key = key;
	mutex_lock(&api_test_mrs_lock);
	list_add_tail(&f->mr_node, &api_test_mrs);
	mutex_unlock(&api_test_mrs_lock);
out:
	mutex_unlock(&api_test_dev_lock);
	return ret;
}

static int api_test_open(struct inode *inode, struct file *file)
{
	struct api_test_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	init_rwsem(&f->lock);
	INIT_LIST_HEAD(&f->mr_node);
	file->private_data = f;
	return 0;
}

static int api_test_release(struct inode *inode, struct file *file)
{
	struct api_test_file *f = file->private_data;

	api_test_unlist(f);
	if (f->region)
		vamr_region_destroy(f->region);
	kfree(f);
	return 0;
}

static long api_test_copy(struct vamr_region *region, struct vamr_api_test_arg *a, bool write)
{
	void __user *ubuf = u64_to_user_ptr(a->buf);
	void *kbuf;
	long ret;

	if (!a->len || a->len > (8u << 20))
		return -EINVAL;
	kbuf = kvmalloc(a->len, GFP_KERNEL);
	if (!kbuf)
		return -ENOMEM;
	if (write) {
		ret = copy_from_user(kbuf, ubuf, a->len) ? -EFAULT : 0;
		if (!ret)
			ret = vamr_region_write(region, a->addr, kbuf, a->len);
	} else {
		ret = vamr_region_read(region, a->addr, kbuf, a->len);
		if (!ret && copy_to_user(ubuf, kbuf, a->len))
			ret = -EFAULT;
	}
	kvfree(kbuf);
	return ret;
}

static long api_test_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct api_test_file *f = file->private_data;
	struct vamr_api_test_arg a;
	struct vamr_counters c;
	bool excl = cmd == VAMR_API_TEST_CREATE || cmd == VAMR_API_TEST_DESTROY;
	long ret = 0;

	if (cmd == VAMR_API_TEST_DEVICE_REMOVE || cmd == VAMR_API_TEST_DEVICE_ADD) {
		mutex_lock(&api_test_dev_lock);
		if (cmd == VAMR_API_TEST_DEVICE_REMOVE) {
			vamr_device_remove(api_test_vamr_dev);
			api_test_vamr_dev = NULL;
		} else if (api_test_vamr_dev) {
			ret = -EEXIST;
		} else {
			struct vamr_device *d = api_test_device_add();

			if (IS_ERR(d))
				ret = PTR_ERR(d);
			else
				api_test_vamr_dev = d;
		}
		mutex_unlock(&api_test_dev_lock);
		return ret;
	}
	if (cmd != VAMR_API_TEST_STATS && cmd != VAMR_API_TEST_DESTROY &&
	    cmd != VAMR_API_TEST_CANCEL &&
	    copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;

	if (excl)
		down_write(&f->lock);
	else
		down_read(&f->lock);
	if (cmd != VAMR_API_TEST_CREATE && !f->region) {
		ret = -ENOENT;
		goto out;
	}
	switch (cmd) {
	case VAMR_API_TEST_CREATE: {
		struct vamr_region *r;

		if (f->region) {
			ret = -EBUSY;
			break;
		}
		if (a.compare) {
			ret = api_test_create_on(f, &a, (u32)a.compare);
			break;
		}
		r = vamr_region_create(a.addr, a.len, a.access, 0);
		if (IS_ERR(r))
			ret = PTR_ERR(r);
		else
			f->region = r;
		break;
	}
	case VAMR_API_TEST_DESTROY:
		/* Out of the MR table first: find_mr no longer hands it out. */
		api_test_unlist(f);
		vamr_region_destroy(f->region);
		f->region = NULL;
		break;
	case VAMR_API_TEST_READ:
	case VAMR_API_TEST_WRITE:
		ret = api_test_copy(f->region, &a, cmd == VAMR_API_TEST_WRITE);
		break;
	case VAMR_API_TEST_ATOMIC:
		ret = vamr_region_atomic(f->region, a.addr, a.op, a.compare, a.swap, &a.result);
		if (!ret && copy_to_user((void __user *)arg, &a, sizeof(a)))
			ret = -EFAULT;
		break;
	case VAMR_API_TEST_PREFETCH:
		ret = vamr_region_prefetch(f->region, a.addr, a.len, a.op);
		if (ret >= 0) {
			a.result = ret;
			ret = copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
		}
		break;
	case VAMR_API_TEST_CANCEL:
		vamr_region_cancel(f->region);
		break;
	case VAMR_API_TEST_STATS:
		vamr_region_stats(f->region, &c);
		ret = copy_to_user((void __user *)arg, &c, sizeof(c)) ? -EFAULT : 0;
		break;
	default:
		ret = -ENOTTY;
	}
out:
	if (excl)
		up_write(&f->lock);
	else
		up_read(&f->lock);
	return ret;
}

static const struct file_operations api_test_fops = {
	.owner = THIS_MODULE,
	.open = api_test_open,
	.release = api_test_release,
	.unlocked_ioctl = api_test_ioctl,
};

static struct miscdevice api_test_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "vamr_api_test",
	.fops = &api_test_fops,
};

static int __init api_test_init(void)
{
	int ret;

	api_test_vamr_dev = api_test_device_add();
	if (IS_ERR(api_test_vamr_dev))
		return PTR_ERR(api_test_vamr_dev);
	ret = misc_register(&api_test_dev);
	if (ret)
		vamr_device_remove(api_test_vamr_dev);
	return ret;
}

static void __exit api_test_exit(void)
{
	misc_deregister(&api_test_dev);
	vamr_device_remove(api_test_vamr_dev);
}

module_init(api_test_init);
module_exit(api_test_exit);
MODULE_DESCRIPTION("Test consumer of the vamr in-kernel API");
MODULE_LICENSE("GPL");
