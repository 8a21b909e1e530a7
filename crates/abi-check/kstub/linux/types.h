/* SPDX-License-Identifier: GPL-2.0 */
/* Host stand-in for the kernel's linux/types.h: just the types the ABI headers use, same sizes. */
#ifndef ABI_CHECK_LINUX_TYPES_H
#define ABI_CHECK_LINUX_TYPES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#endif
