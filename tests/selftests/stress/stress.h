/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the stress collection's programs: the client under test (peermem-rs, or
 * NVIDIA's nvidia-peermem for the side-by-side runs), its statistics, and the kernel's failslab /
 * fail_page_alloc scoped to the client's code. Header-only, libc only.
 */
#ifndef PEERMEM_SELFTESTS_STRESS_H
#define PEERMEM_SELFTESTS_STRESS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem.h"
#include "pmh.h"

#define NV_MODULE "nvidia_p2p_standin"
#define HOST_MODULE "peer_mem_host"
#define FAILSLAB "/sys/kernel/debug/failslab"
#define FAIL_PAGE_ALLOC "/sys/kernel/debug/fail_page_alloc"

/* The client's module name in /sys/module: "peermem_rs" or "nvidia_peermem". */
static inline const char *client_module(const char *client)
{
	return !strcmp(client, "peermem_rs") ? "peermem_rs" : "nvidia_peermem";
}

/* Does @client keep peermem-rs's statistics? (NVIDIA's module has none.) */
static inline int client_has_stats(const char *client)
{
	return !strcmp(client, "peermem_rs");
}

/* A line "key value" of peermem-rs's statistics; -1 if missing. */
static inline long long peermem_stat(const char *key)
{
	char buf[8192], *line, *save = NULL;
	size_t klen = strlen(key);

	if (read_text("/sys/kernel/debug/peermem_rs/stats", buf, sizeof(buf)))
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			return strtoll(line + klen + 1, NULL, 10);
	return -1;
}

/*
 * The text of module @mod: [*start, *end) from /proc/kallsyms, its lowest function to a page past
 * its highest (a module's text lives in pages of its own, so that page holds nothing else).
 * With @init, the .init.text functions count too (they exist only while the module loads).
 */
static inline int module_text(const char *mod, uint64_t *start, uint64_t *end)
{
	char line[512], want[80];
	FILE *f = fopen("/proc/kallsyms", "r");

	*start = UINT64_MAX;
	*end = 0;
	if (!f)
		return -1;
	snprintf(want, sizeof(want), "[%s]", mod);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long a;
		char type, name[400], m[80] = "";

		if (sscanf(line, "%llx %c %399s %79s", &a, &type, name, m) < 4 || strcmp(m, want))
			continue;
		if (type != 't' && type != 'T')
			continue;
		if (a < *start)
			*start = a;
		if (a > *end)
			*end = a;
	}
	fclose(f);
	if (*start == UINT64_MAX)
		return -1;
	*end = (*end + 2 * 4096) & ~4095ull;
	return 0;
}

static inline void fault_write(const char *attr, const char *file, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", attr, file);
	if (write_text(path, value))
		fprintf(stderr, "# cannot write %s to %s\n", value, path);
}

static inline void fault_write_u64(const char *attr, const char *file, uint64_t v, int hex)
{
	char buf[32];

	snprintf(buf, sizeof(buf), hex ? "%#" PRIx64 : "%" PRIu64, v);
	fault_write(attr, file, buf);
}

/*
 * Points failslab and fail_page_alloc at [start, end): only allocations with a return address in
 * that range on their stack can fail, each attribute failing GFP_KERNEL allocations too and
 * order-0 pages. Probability and times are the caller's (fail-nth needs neither).
 */
static inline void fault_scope(uint64_t start, uint64_t end)
{
	const char *attrs[] = { FAILSLAB, FAIL_PAGE_ALLOC };

	for (int i = 0; i < 2; i++) {
		fault_write(attrs[i], "probability", "0");
		fault_write_u64(attrs[i], "require-start", start, 1);
		fault_write_u64(attrs[i], "require-end", end, 1);
		fault_write(attrs[i], "stacktrace-depth", "32");
		fault_write(attrs[i], "ignore-gfp-wait", "N");
		fault_write(attrs[i], "task-filter", "N");
		fault_write(attrs[i], "interval", "1");
		fault_write(attrs[i], "space", "0");
	}
	fault_write(FAIL_PAGE_ALLOC, "min-order", "0");
	fault_write(FAIL_PAGE_ALLOC, "ignore-gfp-highmem", "N");
}

/* Back to the kernel's defaults: nothing fails. */
static inline void fault_unscope(void)
{
	const char *attrs[] = { FAILSLAB, FAIL_PAGE_ALLOC };

	for (int i = 0; i < 2; i++) {
		fault_write(attrs[i], "probability", "0");
		fault_write(attrs[i], "times", "1");
		fault_write(attrs[i], "require-start", "0");
		fault_write(attrs[i], "require-end", "0xffffffffffffffff");
		fault_write(attrs[i], "ignore-gfp-wait", "Y");
		fault_write(attrs[i], "verbose", "2");
	}
	fault_write(FAIL_PAGE_ALLOC, "min-order", "1");
	fault_write(FAIL_PAGE_ALLOC, "ignore-gfp-highmem", "Y");
}

#endif /* PEERMEM_SELFTESTS_STRESS_H */
