// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only stand-in for the PROPRIETARY nvidia.ko: a module named "nvidia" that exports the P2P API
 * of nv-p2p.h and declares the proprietary driver's license tag. The packaging tests load it in the
 * VM to show that the kernel refuses to link peermem_rs (a Rust module, so a user of GPL-only
 * symbols) to a proprietary module, and that peermem-rs-explain names that cause.
 *
 * The functions are never called: the kernel refuses the link before peermem_rs runs any code. The
 * MODULE_LICENSE tag below is the test's input; this file's own license is the SPDX line above. The
 * module uses no GPL-only kernel symbol, as a proprietary module must not (modpost checks that).
 */
#include <linux/module.h>
#include <linux/errno.h>
#include <linux/pci.h>
#include "nv-p2p.h"

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_dma_unmap_pages);

/* An exit function, so that the test can unload it again. */
static int __init proprietary_stub_init(void)
{
	return 0;
}
module_init(proprietary_stub_init);

static void __exit proprietary_stub_exit(void)
{
}
module_exit(proprietary_stub_exit);

MODULE_DESCRIPTION("Test-only proprietary-licensed stand-in for nvidia.ko's P2P exports");
MODULE_LICENSE("NVIDIA");
