// SPDX-License-Identifier: GPL-2.0
/*
 * Holds registrations of GPU memory for unload.sh: allocates N GPU pages, registers each (one
 * page per registration), optionally ends them in a way that leaves a pin with the driver, prints
 * one line "held R live, D deregistered, E failed" and waits until its standard input is closed;
 * then it frees the GPU memory and exits (closing its files deregisters what is still live).
 *
 *   holdreg N                  N live registrations
 *   holdreg N --kworker        then deregister them from the host's kworker: a task that is not
 *                              the owner, which cannot unpin an invalidating client's
 *                              non-persistent pin (it stays with the driver until the free)
 *   holdreg N --owner          then deregister them from this task, the owner: an invalidating
 *                              client's non-persistent pin lingers with the driver until the free
 *
 * Exit status 0 when every step did what it says, 1 otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"

int main(int argc, char **argv)
{
	unsigned int n = argc > 1 ? strtoul(argv[1], NULL, 0) : 0, live = 0, dereg = 0, failed = 0;
	int kworker = argc > 2 && !strcmp(argv[2], "--kworker");
	int owner = argc > 2 && !strcmp(argv[2], "--owner");
	__u64 gpu_handle, *mr;
	int gpu, pmh, ret = 0, ret_free;
	char *va, c;

	if (!n || n > 4096) {
		fprintf(stderr, "usage: holdreg N [--kworker|--owner]\n");
		return 2;
	}
	gpu = gpu_open();
	pmh = pmh_open();
	if (gpu < 0 || pmh < 0) {
		fprintf(stderr, "holdreg: cannot open the GPU or the host\n");
		return 1;
	}
	va = gpu_alloc(gpu, (size_t)n * NVP2P_GPU_PAGE_SIZE, &gpu_handle);
	mr = calloc(n, sizeof(*mr));
	if (!va || !mr) {
		fprintf(stderr, "holdreg: cannot allocate %u GPU pages: %s\n", n, strerror(errno));
		return 1;
	}
	for (unsigned int i = 0; i < n; i++) {
		struct pmh_reg_mr reg;
		int r = pmh_reg(pmh, va + (size_t)i * NVP2P_GPU_PAGE_SIZE, NVP2P_GPU_PAGE_SIZE,
				PMH_REG_WRITE, &reg);

		if (r) {
			fprintf(stderr, "holdreg: registration %u: %s\n", i, strerror(-r));
			failed++;
			ret = 1;
			continue;
		}
		mr[live++] = reg.handle;
	}
	if (kworker || owner) {
		for (unsigned int i = 0; i < live; i++) {
			int r = kworker ? pmh_dereg_ex(pmh, mr[i], PMH_DEREG_KWORKER)
					: pmh_dereg(pmh, mr[i]);

			if (r) {
				fprintf(stderr, "holdreg: deregistration %u: %s\n", i, strerror(-r));
				ret = 1;
			} else {
				dereg++;
			}
		}
		live -= dereg;
	}
	printf("held %u live, %u deregistered, %u failed\n", live, dereg, failed);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	ret_free = gpu_free(gpu, gpu_handle);
	if (ret_free) {
		fprintf(stderr, "holdreg: free: %s\n", strerror(-ret_free));
		ret = 1;
	}
	return ret;
}
