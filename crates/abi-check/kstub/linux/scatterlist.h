/* SPDX-License-Identifier: GPL-2.0 */
/* Host stand-in for linux/scatterlist.h: the ABI headers only pass these by pointer. */
#ifndef ABI_CHECK_LINUX_SCATTERLIST_H
#define ABI_CHECK_LINUX_SCATTERLIST_H
struct scatterlist;
struct sg_table;
#endif
