// SPDX-License-Identifier: GPL-2.0
/*
 * The "RDMA NIC" of the peer-memory host stand-in: QEMU's edu device (PCI 1234:11e8), whose DMA
 * engine copies up to 4096 bytes between any bus address and its internal buffer at 0x40000.
 *
 * An RDMA write of user bytes into an MR goes host memory -> edu buffer -> the MR's DMA address;
 * an RDMA read the other way. The MR's DMA addresses are those of its SG list: for GPU memory the
 * peer client's, i.e. bus addresses of the GPU BAR (or IOVAs for the edu device behind an IOMMU),
 * so the second hop is real device-to-device DMA.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/iopoll.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>

#include "pmh.h"

#define EDU_VENDOR		0x1234
#define EDU_DEVICE		0x11e8
#define EDU_REG_IDENT		0x00
#define EDU_REG_DMA_SRC		0x80
#define EDU_REG_DMA_DST		0x88
#define EDU_REG_DMA_COUNT	0x90
#define EDU_REG_DMA_CMD		0x98
#define EDU_CMD_START		BIT(0)	/* also "busy" while the transfer runs */
#define EDU_CMD_TO_RAM		BIT(1)	/* edu buffer -> bus address; clear: bus address -> buffer */
#define EDU_BUF_ADDR		0x40000
#define EDU_BUF_SIZE		4096
/* QEMU runs each transfer from a timer 100 ms (virtual) after the start. */
#define EDU_POLL_US		2000
#define EDU_TIMEOUT_US		(5 * USEC_PER_SEC)

struct pmh_nic {
	struct pci_dev *pdev;
	void __iomem *regs;
	struct mutex engine_lock;	/* one transfer at a time, and the bounce buffer */
	void *bounce;
	dma_addr_t bounce_dma;
};

static DEFINE_MUTEX(pmh_nic_lock);
static struct pmh_nic *pmh_nic;

struct device *pmh_nic_dma_device(void)
{
	struct device *dev = NULL;

	mutex_lock(&pmh_nic_lock);
	if (pmh_nic)
		dev = &pmh_nic->pdev->dev;
	mutex_unlock(&pmh_nic_lock);
	return dev;
}

static int edu_dma(struct pmh_nic *nic, u64 src, u64 dst, u32 count, bool to_ram)
{
	u64 cmd;
	int ret;

	writeq(src, nic->regs + EDU_REG_DMA_SRC);
	writeq(dst, nic->regs + EDU_REG_DMA_DST);
	writeq(count, nic->regs + EDU_REG_DMA_COUNT);
	/* The bounce buffer's contents must be visible before the engine starts. */
	wmb();
	writeq(EDU_CMD_START | (to_ram ? EDU_CMD_TO_RAM : 0), nic->regs + EDU_REG_DMA_CMD);
	atomic_inc(&pmh_counters.dma_ops);
	ret = readq_poll_timeout(nic->regs + EDU_REG_DMA_CMD, cmd, !(cmd & EDU_CMD_START),
				 EDU_POLL_US, EDU_TIMEOUT_US);
	if (ret) {
		pr_err("peer_mem_host: edu DMA %#llx -> %#llx (%u bytes) timed out\n", src, dst, count);
		return ret;
	}
	/* ... and what the engine wrote visible to the CPU after it finished. */
	rmb();
	return 0;
}

int pmh_nic_transfer(struct pmh_mr *mr, u64 offset, void *buf, size_t len, bool to_mr)
{
	struct pmh_nic *nic;
	struct scatterlist *sg;
	u64 pos = mr->sg_head_offset + offset;
	size_t done = 0;
	unsigned int i;
	int ret = 0;

	mutex_lock(&pmh_nic_lock);
	nic = pmh_nic;
	if (!nic || &nic->pdev->dev != mr->dma_dev) {
		mutex_unlock(&pmh_nic_lock);
		return -ENODEV;
	}
	mutex_lock(&nic->engine_lock);
	mutex_unlock(&pmh_nic_lock);

	for_each_sgtable_dma_sg(pmh_mr_sgt(mr), sg, i) {
		u64 seg_len = sg_dma_len(sg);

		if (pos >= seg_len) {
			pos -= seg_len;
			continue;
		}
		/* Chunks fit the edu buffer and never cross an SG entry. */
		while (pos < seg_len && done < len) {
			u32 chunk = min3((u64)(len - done), seg_len - pos, (u64)EDU_BUF_SIZE);
			dma_addr_t target = sg_dma_address(sg) + pos;

			if (to_mr) {
				memcpy(nic->bounce, buf + done, chunk);
				ret = edu_dma(nic, nic->bounce_dma, EDU_BUF_ADDR, chunk, false);
				if (!ret)
					ret = edu_dma(nic, EDU_BUF_ADDR, target, chunk, true);
			} else {
				ret = edu_dma(nic, target, EDU_BUF_ADDR, chunk, false);
				if (!ret)
					ret = edu_dma(nic, EDU_BUF_ADDR, nic->bounce_dma, chunk, true);
				if (!ret)
					memcpy(buf + done, nic->bounce, chunk);
			}
			if (ret)
				goto out;
			pos += chunk;
			done += chunk;
		}
		if (done == len)
			break;
		pos = 0;
	}
	if (done < len) {
		pr_err("peer_mem_host: MR SG list ends %zu bytes short of the transfer\n", len - done);
		ret = -EINVAL;
	}
out:
	mutex_unlock(&nic->engine_lock);
	return ret;
}

static int pmh_nic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct pmh_nic *nic;
	int ret;

	mutex_lock(&pmh_nic_lock);
	ret = pmh_nic ? -EBUSY : 0;
	mutex_unlock(&pmh_nic_lock);
	if (ret) {
		dev_info(&pdev->dev, "peer_mem_host drives one edu device only\n");
		return ret;
	}

	nic = devm_kzalloc(&pdev->dev, sizeof(*nic), GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	nic->pdev = pdev;
	mutex_init(&nic->engine_lock);
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	nic->regs = pcim_iomap_region(pdev, 0, "peer_mem_host");
	if (IS_ERR(nic->regs))
		return PTR_ERR(nic->regs);
	/* An RDMA NIC reaches all of memory, and the GPU BAR wherever the firmware put it. */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	pci_set_master(pdev);
	nic->bounce = dmam_alloc_coherent(&pdev->dev, EDU_BUF_SIZE, &nic->bounce_dma, GFP_KERNEL);
	if (!nic->bounce)
		return -ENOMEM;

	atomic_set(&pmh_counters.nic_iommu, device_iommu_mapped(&pdev->dev));
	mutex_lock(&pmh_nic_lock);
	pmh_nic = nic;
	mutex_unlock(&pmh_nic_lock);
	pci_set_drvdata(pdev, nic);
	dev_info(&pdev->dev, "peer_mem_host: edu %#x is the NIC (DMA %s an IOMMU)\n",
		 readl(nic->regs + EDU_REG_IDENT),
		 device_iommu_mapped(&pdev->dev) ? "through" : "without");
	return 0;
}

static void pmh_nic_remove(struct pci_dev *pdev)
{
	struct pmh_nic *nic = pci_get_drvdata(pdev);

	mutex_lock(&pmh_nic_lock);
	if (pmh_nic == nic)
		pmh_nic = NULL;
	mutex_unlock(&pmh_nic_lock);
	/* Wait for a transfer in flight. */
	mutex_lock(&nic->engine_lock);
	mutex_unlock(&nic->engine_lock);
	if (atomic_read(&pmh_counters.live_mrs))
		dev_err(&pdev->dev, "peer_mem_host: NIC removed with %d MRs registered\n",
			atomic_read(&pmh_counters.live_mrs));
	pci_clear_master(pdev);
}

static const struct pci_device_id pmh_nic_ids[] = {
	{ PCI_DEVICE(EDU_VENDOR, EDU_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, pmh_nic_ids);

static struct pci_driver pmh_nic_driver = {
	.name = "peer_mem_host",
	.id_table = pmh_nic_ids,
	.probe = pmh_nic_probe,
	.remove = pmh_nic_remove,
};

int pmh_nic_init(void)
{
	return pci_register_driver(&pmh_nic_driver);
}

void pmh_nic_exit(void)
{
	pci_unregister_driver(&pmh_nic_driver);
}
