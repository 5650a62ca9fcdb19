// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_mirror_edu: a driver for QEMU's edu PCI device (1234:11e8) that
 * mirrors a process's VA range through vamr's mirror API
 * (include/linux/vamr.h), as lib/test_hmm.c's dmirror mirrors one through
 * HMM, so that tests/mirror/ can check what the device's DMA reaches after
 * every kind of remap, behind an emulated IOMMU (a stale IOVA raises a DMAR
 * fault) or without one.
 *
 * The device: a DMA engine between its 4 KiB buffer (device address
 * EDU_BUF) and DMA addresses, one transfer at a time (src, dst, count, cmd
 * registers; the transfer runs 100 ms of QEMU's virtual time after cmd is
 * written, and cmd's start bit clears when it is done); it masks RAM
 * addresses to 28 bits. Its CPU side has no window onto the buffer: data
 * goes in and out by DMA through a coherent bounce page.
 *
 * The "device table" is this driver's: one DMA address per page of the
 * mirror (VAMR_MIRROR_NO_PAGE when invalid), under the file's table_lock,
 * which is also held across every DMA through it (the fence of
 * ops->invalidate). The driver stands in for the device's own translation:
 * a transfer looks its pages up there, and an invalid entry is a device
 * fault (vamr_mirror_fault(), the sequence checked under table_lock).
 *
 * skip_zap=1 (the break check): ops->invalidate leaves the table as it is,
 * so the device keeps DMAing to addresses vamr has unmapped.
 *
 * Lock order: a file's ioctl_lock, then (vamr's mirror lock in the
 * invalidate callback) its table_lock, then the device's dma_lock.
 * table_lock is taken under reclaim and mmap_lock (the callback): no
 * allocation, user copy or vamr call but vamr_mirror_retry() under it, and
 * dma_lock only nests inside it.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/io.h>
#include <linux/iommu.h>
#include <linux/iopoll.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vamr.h>

#include "vamr_mirror_edu.h"

#define EDU_REG_IDENT 0x00
#define EDU_REG_DMA_SRC 0x80
#define EDU_REG_DMA_DST 0x88
#define EDU_REG_DMA_COUNT 0x90
#define EDU_REG_DMA_CMD 0x98
#define EDU_DMA_START BIT(0)
#define EDU_DMA_TO_RAM BIT(1)
#define EDU_BUF 0x40000
#define EDU_BUF_SIZE 4096
/* The largest mirror, in pages (4 GiB): bounds the device table a file allocates. */
#define EDU_MAX_PAGES (1ul << 20)
/* Device faults (or lost sequence checks) one transfer takes at most. */
#define EDU_FAULT_TRIES 64

static bool skip_zap;
module_param(skip_zap, bool, 0644);
MODULE_PARM_DESC(skip_zap,
		 "Break check: ops->invalidate does not zap the device table, so the device keeps stale DMA addresses (default 0)");

static bool refuse_nonblock;
module_param(refuse_nonblock, bool, 0644);
MODULE_PARM_DESC(refuse_nonblock,
		 "ops->invalidate returns -EAGAIN whenever it may not sleep (the OOM reaper's path), as a driver whose fence must sleep does (default 0)");

static unsigned int dma_bits = 28;
module_param(dma_bits, uint, 0444);
MODULE_PARM_DESC(dma_bits, "The DMA mask of the device, in bits (default 28, the edu device's)");

struct edu_dev {
	struct pci_dev *pdev;
	void __iomem *regs;
	/* The DMA engine and the bounce page; nests inside a file's table_lock. */
	struct mutex dma_lock;
	void *bounce;
	dma_addr_t bounce_dma;
	struct miscdevice misc;
};

struct edu_file {
	struct edu_dev *edu;
	/* Serialises the ioctls of the file; outermost, never taken by the callback. */
	struct mutex ioctl_lock;
	/* Guards mirror and mm for UNMIRROR's cancel, which runs without ioctl_lock. */
	struct mutex life_lock;
	/* The device table and the counts; held across DMA through the table. */
	struct mutex table_lock;
	struct vamr_mirror *mirror;
	struct mm_struct *mm;		/* the mirror's (mmgrab), for the EPERM check */
	unsigned long start;
	unsigned long npages;
	bool write;
	dma_addr_t *table;
	struct vamr_mirror_edu_stats stats;	/* the driver's part */
};

static int edu_dma(struct edu_dev *edu, u64 src, u64 dst, u32 count, bool to_ram)
{
	u64 cmd;

	lockdep_assert_held(&edu->dma_lock);
	writeq(src, edu->regs + EDU_REG_DMA_SRC);
	writeq(dst, edu->regs + EDU_REG_DMA_DST);
	writeq(count, edu->regs + EDU_REG_DMA_COUNT);
	writeq(EDU_DMA_START | (to_ram ? EDU_DMA_TO_RAM : 0), edu->regs + EDU_REG_DMA_CMD);
	return readq_poll_timeout(edu->regs + EDU_REG_DMA_CMD, cmd, !(cmd & EDU_DMA_START),
				  2000, 10 * USEC_PER_SEC);
}

static int edu_invalidate(void *priv, unsigned long start, unsigned long len, bool blockable)
{
	struct edu_file *f = priv;
	unsigned long i = (start - f->start) >> PAGE_SHIFT, end = i + (len >> PAGE_SHIFT);

	if (blockable)
		mutex_lock(&f->table_lock);
	else if (READ_ONCE(refuse_nonblock) || !mutex_trylock(&f->table_lock))
		return -EAGAIN;
	f->stats.invalidations++;
	if (!READ_ONCE(skip_zap)) {
		for (; i < end && i < f->npages; i++) {
			if (f->table[i] != VAMR_MIRROR_NO_PAGE) {
				f->table[i] = VAMR_MIRROR_NO_PAGE;
				f->stats.zapped++;
				f->stats.entries--;
			}
		}
	}
	/* Holding table_lock was the fence: no DMA through the table is in flight. */
	mutex_unlock(&f->table_lock);
	return 0;
}

static const struct vamr_mirror_ops edu_mirror_ops = {
	.invalidate = edu_invalidate,
};

/*
 * A device fault on the page at @va: vamr pins and maps it, and the entry is
 * programmed unless an invalidation began meanwhile. Called and returns with
 * table_lock held (dropped around vamr_mirror_fault()).
 */
static int edu_device_fault(struct edu_file *f, unsigned long va)
{
	unsigned long idx = (va - f->start) >> PAGE_SHIFT, seq;
	dma_addr_t dma;
	long n;

	mutex_unlock(&f->table_lock);
	n = vamr_mirror_fault(f->mirror, va, PAGE_SIZE, &dma, &seq);
	mutex_lock(&f->table_lock);
	f->stats.device_faults++;
	if (n < 0)
		return n;
	if (vamr_mirror_retry(f->mirror, seq)) {
		f->stats.seq_retries++;
		return 0;
	}
	if (f->table[idx] == VAMR_MIRROR_NO_PAGE)
		f->stats.entries++;
	f->table[idx] = dma;
	return 0;
}

/*
 * The device's translation of the pages of [@addr, @addr + @len) into
 * @dmas, faulting in what is invalid. Returns with table_lock held and every
 * entry valid as of that hold, or an error.
 */
static int edu_translate(struct edu_file *f, unsigned long addr, size_t len, dma_addr_t *dmas)
{
	unsigned long first = addr & PAGE_MASK, last = (addr + len - 1) & PAGE_MASK, va;
	int tries, i, ret;

	for (tries = 0; tries < EDU_FAULT_TRIES; tries++) {
		for (va = first, i = 0; va <= last; va += PAGE_SIZE, i++) {
			dmas[i] = f->table[(va - f->start) >> PAGE_SHIFT];
			if (dmas[i] == VAMR_MIRROR_NO_PAGE)
				break;
		}
		if (va > last)
			return 0;
		ret = edu_device_fault(f, va);
		if (ret)
			return ret;
	}
	return -EAGAIN;
}

/*
 * DMA between the edu buffer (from offset 0) and the translated pages;
 * dma_lock held. No dma_sync_*(): a mirror's pages are user memory the CPU
 * touches while they are mapped, so the mirror API wants a coherent device
 * whose mappings do not bounce (as every RDMA MR does); under intel-iommu,
 * or with a DMA mask that reaches all memory, the edu device is one.
 */
static int edu_xfer_pages(struct edu_file *f, unsigned long addr, size_t len,
			  const dma_addr_t *dmas, bool to_ram)
{
	size_t done = 0;
	int i = 0, ret;

	while (done < len) {
		unsigned long va = addr + done;
		size_t n = min_t(size_t, PAGE_SIZE - offset_in_page(va), len - done);
		u64 ram = dmas[i] + offset_in_page(va);

		ret = to_ram ? edu_dma(f->edu, EDU_BUF + done, ram, n, true) :
			       edu_dma(f->edu, ram, EDU_BUF + done, n, false);
		if (ret)
			return ret;
		f->stats.dmas++;
		done += n;
		i++;
	}
	return 0;
}

/* WRITE (@to_va) or READ through the mirror; see vamr_mirror_edu.h. */
static long edu_xfer(struct edu_file *f, const struct vamr_mirror_edu_xfer *x, bool to_va)
{
	struct edu_dev *edu = f->edu;
	void __user *ubuf = u64_to_user_ptr(x->buf);
	dma_addr_t dmas[2];
	void *kbuf;
	long ret;

	if (!f->mirror)
		return -ENODEV;
	if (!x->len || x->len > VAMR_MIRROR_EDU_XFER_MAX || x->addr < f->start ||
	    x->addr + x->len < x->addr || x->addr + x->len > f->start + (f->npages << PAGE_SHIFT))
		return -EINVAL;
	if (to_va && !f->write)
		return -EACCES;
	kbuf = kmalloc(x->len, GFP_KERNEL);
	if (!kbuf)
		return -ENOMEM;
	if (to_va && copy_from_user(kbuf, ubuf, x->len)) {
		ret = -EFAULT;
		goto out;
	}
	mutex_lock(&f->table_lock);
	ret = edu_translate(f, x->addr, x->len, dmas);
	if (!ret) {
		mutex_lock(&edu->dma_lock);
		if (to_va) {
			memcpy(edu->bounce, kbuf, x->len);
			ret = edu_dma(edu, edu->bounce_dma, EDU_BUF, x->len, false);
			if (!ret)
				ret = edu_xfer_pages(f, x->addr, x->len, dmas, true);
		} else {
			ret = edu_xfer_pages(f, x->addr, x->len, dmas, false);
			if (!ret)
				ret = edu_dma(edu, EDU_BUF, edu->bounce_dma, x->len, true);
			memcpy(kbuf, edu->bounce, x->len);
		}
		mutex_unlock(&edu->dma_lock);
	}
	mutex_unlock(&f->table_lock);
	if (!ret && !to_va && copy_to_user(ubuf, kbuf, x->len))
		ret = -EFAULT;
out:
	kfree(kbuf);
	return ret;
}

static long edu_mirror(struct edu_file *f, const struct vamr_mirror_edu_range *r)
{
	struct device *dev = &f->edu->pdev->dev;
	struct vamr_mirror *m;
	unsigned long i, npages = r->len >> PAGE_SHIFT;

	if (f->mirror)
		return -EBUSY;
	if (!r->len || (r->len & ~PAGE_MASK) || (r->addr & ~PAGE_MASK) || npages > EDU_MAX_PAGES)
		return -EINVAL;
	f->table = kvmalloc_array(npages, sizeof(*f->table), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!f->table)
		return -ENOMEM;
	for (i = 0; i < npages; i++)
		f->table[i] = VAMR_MIRROR_NO_PAGE;
	f->start = r->addr;
	f->npages = npages;
	f->write = r->access & VAMR_ACCESS_WRITE;
	/* The callback may run from here on: the table is ready. */
	m = vamr_mirror_create(dev, r->addr, r->len, r->access, &edu_mirror_ops, f);
	if (IS_ERR(m)) {
		kvfree(f->table);
		f->table = NULL;
		return PTR_ERR(m);
	}
	mmgrab(current->mm);
	mutex_lock(&f->life_lock);
	f->mm = current->mm;
	f->mirror = m;
	mutex_unlock(&f->life_lock);
	return 0;
}

/* The mirror of @f goes (ioctl_lock held, or the file's last reference). */
static void edu_drop_mirror(struct edu_file *f)
{
	struct vamr_mirror *m;
	struct mm_struct *mm;

	mutex_lock(&f->life_lock);
	m = f->mirror;
	mm = f->mm;
	f->mirror = NULL;
	f->mm = NULL;
	mutex_unlock(&f->life_lock);
	if (!m)
		return;
	/* Calls edu_invalidate() for the whole mirror, then unmaps and unpins. */
	vamr_mirror_destroy(m);
	mmdrop(mm);
	kvfree(f->table);
	f->table = NULL;
	f->npages = 0;
	f->stats.entries = 0;
}

/*
 * UNMIRROR: deregistration while another thread's call on the file may wait
 * for user space (a POPULATE or a transfer's device fault on a page whose
 * userfaultfd handler or FUSE server does not answer): cancel first, without
 * ioctl_lock (which that call holds), then destroy once it has returned.
 */
static long edu_unmirror(struct edu_file *f)
{
	mutex_lock(&f->life_lock);
	if (!f->mirror || f->mm != current->mm) {
		long ret = f->mirror ? -EPERM : -ENODEV;

		mutex_unlock(&f->life_lock);
		return ret;
	}
	vamr_mirror_cancel(f->mirror);
	mutex_unlock(&f->life_lock);
	mutex_lock(&f->ioctl_lock);
	edu_drop_mirror(f);
	mutex_unlock(&f->ioctl_lock);
	return 0;
}

static long edu_populate(struct edu_file *f, struct vamr_mirror_edu_range *r)
{
	unsigned long n = r->len >> PAGE_SHIFT, first, i, seq;
	dma_addr_t *dmas;
	int tries;
	long ret;

	if (!f->mirror)
		return -ENODEV;
	if (!r->len || (r->len & ~PAGE_MASK) || (r->addr & ~PAGE_MASK) || r->addr < f->start ||
	    r->addr + r->len < r->addr || r->addr + r->len > f->start + (f->npages << PAGE_SHIFT))
		return -EINVAL;
	dmas = kvmalloc_array(n, sizeof(*dmas), GFP_KERNEL);
	if (!dmas)
		return -ENOMEM;
	first = (r->addr - f->start) >> PAGE_SHIFT;
	for (tries = 0; tries < EDU_FAULT_TRIES; tries++) {
		ret = vamr_mirror_populate(f->mirror, r->addr, r->len, dmas, &seq);
		if (ret < 0)
			break;
		mutex_lock(&f->table_lock);
		if (vamr_mirror_retry(f->mirror, seq)) {
			f->stats.seq_retries++;
			mutex_unlock(&f->table_lock);
			ret = -EAGAIN;
			continue;
		}
		for (i = 0; i < n; i++) {
			if (dmas[i] == VAMR_MIRROR_NO_PAGE)
				continue;
			if (f->table[first + i] == VAMR_MIRROR_NO_PAGE)
				f->stats.entries++;
			f->table[first + i] = dmas[i];
		}
		mutex_unlock(&f->table_lock);
		r->result = ret;
		ret = 0;
		break;
	}
	kvfree(dmas);
	return ret;
}

static long edu_stats(struct edu_file *f, struct vamr_mirror_edu_stats *s)
{
	struct vamr_mirror_counters c = {};

	mutex_lock(&f->table_lock);
	*s = f->stats;
	mutex_unlock(&f->table_lock);
	if (f->mirror)
		vamr_mirror_stats(f->mirror, &c);
	s->pages_mapped = c.pages_mapped;
	s->populates = c.populates;
	s->mirror_faults = c.device_faults;
	s->pages_filled = c.pages_filled;
	s->mirror_invalidations = c.invalidations;
	s->invalidations_refused = c.invalidations_refused;
	s->pages_unmapped = c.pages_unmapped;
	s->retries = c.retries;
	return 0;
}

static long edu_info(struct edu_file *f, struct vamr_mirror_edu_info *info)
{
	struct device *dev = &f->edu->pdev->dev;
	struct iommu_domain *dom = iommu_get_domain_for_dev(dev);

	info->iommu = dom && dom->type != IOMMU_DOMAIN_IDENTITY &&
		      dom->type != IOMMU_DOMAIN_BLOCKED;
	info->dma_bits = dma_bits;
	info->skip_zap = READ_ONCE(skip_zap);
	strscpy(info->name, dev_name(dev), sizeof(info->name));
	return 0;
}

/* The argument of any of the ioctls. */
union edu_arg {
	struct vamr_mirror_edu_range r;
	struct vamr_mirror_edu_xfer x;
	struct vamr_mirror_edu_stats s;
	struct vamr_mirror_edu_info i;
};

static long edu_ioctl_locked(struct edu_file *f, unsigned int cmd, void __user *arg)
{
	union edu_arg u = {};
	long ret;

	if (_IOC_DIR(cmd) & _IOC_WRITE && copy_from_user(&u, arg, _IOC_SIZE(cmd)))
		return -EFAULT;
	if (cmd != VAMR_MIRROR_EDU_INFO && cmd != VAMR_MIRROR_EDU_STATS && f->mm &&
	    f->mm != current->mm)
		return -EPERM;
	switch (cmd) {
	case VAMR_MIRROR_EDU_MIRROR:
		return edu_mirror(f, &u.r);
	case VAMR_MIRROR_EDU_POPULATE:
		ret = edu_populate(f, &u.r);
		break;
	case VAMR_MIRROR_EDU_WRITE:
		return edu_xfer(f, &u.x, true);
	case VAMR_MIRROR_EDU_READ:
		return edu_xfer(f, &u.x, false);
	case VAMR_MIRROR_EDU_STATS:
		ret = edu_stats(f, &u.s);
		break;
	case VAMR_MIRROR_EDU_INFO:
		ret = edu_info(f, &u.i);
		break;
	default:
		return -ENOTTY;
	}
	if (!ret && _IOC_DIR(cmd) & _IOC_READ && copy_to_user(arg, &u, _IOC_SIZE(cmd)))
		ret = -EFAULT;
	return ret;
}

static long edu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct edu_file *f = file->private_data;
	long ret;

	if (_IOC_TYPE(cmd) != VAMR_MIRROR_EDU_MAGIC || _IOC_SIZE(cmd) > sizeof(union edu_arg))
		return -ENOTTY;
	if (cmd == VAMR_MIRROR_EDU_UNMIRROR)
		return edu_unmirror(f);
	mutex_lock(&f->ioctl_lock);
	ret = edu_ioctl_locked(f, cmd, (void __user *)arg);
	mutex_unlock(&f->ioctl_lock);
	return ret;
}

static int edu_open(struct inode *inode, struct file *file)
{
	struct edu_dev *edu = container_of(file->private_data, struct edu_dev, misc);
	struct edu_file *f = kzalloc(sizeof(*f), GFP_KERNEL_ACCOUNT);

	if (!f)
		return -ENOMEM;
	f->edu = edu;
	mutex_init(&f->ioctl_lock);
	mutex_init(&f->life_lock);
	mutex_init(&f->table_lock);
	file->private_data = f;
	return 0;
}

static int edu_release(struct inode *inode, struct file *file)
{
	struct edu_file *f = file->private_data;

	/* No call on the file runs any more: each held a reference to it. */
	edu_drop_mirror(f);
	kfree(f);
	return 0;
}

static const struct file_operations edu_fops = {
	.owner = THIS_MODULE,
	.open = edu_open,
	.release = edu_release,
	.unlocked_ioctl = edu_ioctl,
	.llseek = noop_llseek,
};

static int edu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct edu_dev *edu;
	int ret;

	edu = devm_kzalloc(&pdev->dev, sizeof(*edu), GFP_KERNEL);
	if (!edu)
		return -ENOMEM;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	edu->regs = pcim_iomap_region(pdev, 0, "vamr_mirror_edu");
	if (IS_ERR(edu->regs))
		return PTR_ERR(edu->regs);
	if ((readl(edu->regs + EDU_REG_IDENT) & 0xff) != 0xed)
		return -ENODEV;
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(dma_bits));
	if (ret)
		return ret;
	pci_set_master(pdev);
	edu->bounce = dmam_alloc_coherent(&pdev->dev, EDU_BUF_SIZE, &edu->bounce_dma, GFP_KERNEL);
	if (!edu->bounce)
		return -ENOMEM;
	edu->pdev = pdev;
	mutex_init(&edu->dma_lock);
	edu->misc.minor = MISC_DYNAMIC_MINOR;
	edu->misc.name = "vamr_mirror_edu";
	edu->misc.fops = &edu_fops;
	edu->misc.mode = 0600;
	ret = misc_register(&edu->misc);
	if (ret)
		return ret;
	pci_set_drvdata(pdev, edu);
	dev_info(&pdev->dev, "edu device, DMA mask %u bits, %s\n", dma_bits,
		 iommu_get_domain_for_dev(&pdev->dev) ? "behind an IOMMU" : "no IOMMU");
	return 0;
}

static void edu_remove(struct pci_dev *pdev)
{
	struct edu_dev *edu = pci_get_drvdata(pdev);

	/* Module unload only (no sysfs unbind): no file is open, each holds the module. */
	misc_deregister(&edu->misc);
}

static const struct pci_device_id edu_ids[] = {
	{ PCI_DEVICE(0x1234, 0x11e8) },
	{ }
};
MODULE_DEVICE_TABLE(pci, edu_ids);

static struct pci_driver edu_driver = {
	.name = "vamr_mirror_edu",
	.id_table = edu_ids,
	.probe = edu_probe,
	.remove = edu_remove,
	/* No unbinding through sysfs: open files use the device until they are closed. */
	.driver.suppress_bind_attrs = true,
};
module_pci_driver(edu_driver);

MODULE_DESCRIPTION("vamr mirror API test driver for QEMU's edu device");
MODULE_LICENSE("GPL");
