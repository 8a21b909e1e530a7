// SPDX-License-Identifier: GPL-2.0
/*
 * The NVIDIA P2P stand-in's cost model (README.md, "Cost model"), off unless cost_model=Y: what
 * nvidia.ko's RM spends pinning and unpinning, spent where RM spends it (standin_rm.c calls it
 * inside the RM API lock). Not a race point: race points open windows, this models time.
 */
#include <linux/ktime.h>
#include <linux/math64.h>
#include <linux/sched.h>

#include "standin.h"

/*
 * The cost model (README.md, "Cost model"): nanoseconds nvidia.ko's RM spends pinning or unpinning
 * @pages 64 KiB pages, interpolated linearly per page between GDRCopy's pinmaplat measurements on
 * a V100-PCIE-16GB (NVIDIA/gdrcopy pull request #129, rounded to the microsecond; pin: 70 us at
 * 1 page, 94 us at 128, 119 us at 256; unpin: 38 us at 1 page, 63 us at 256) and extrapolated
 * beyond 256 pages (16 MiB) with the slope of the last segment.
 */
u64 standin_cost_ns(enum standin_cost what, u32 pages)
{
	u64 p = pages;

	if (!pages)
		return 0;
	if (what == COST_UNPIN)
		return 38000 + div_u64((p - 1) * 25000, 255);
	if (p <= 128)
		return 70000 + div_u64((p - 1) * 24000, 127);
	return 94000 + div_u64((p - 128) * 25000, 128);
}

/*
 * Spend the modelled time, when the cost model is on. Called where RM does the work, under the
 * RM API lock, so that the calls it serialises queue behind it as they do behind nvidia.ko's.
 * A busy wait on the clock, not a sleep: RM's time is CPU time (it builds the BAR1 mappings and
 * page tables itself) and holds a CPU while other tasks wait on the lock; a sleep would also end
 * late by the timer's slack, which under TCG is tens of microseconds. Like a long kernel loop it
 * offers the CPU (cond_resched; the API lock is a sleeping lock) once a millisecond, not more
 * often: every yield to another task would lengthen the wait, and the lock's hold, past the model.
 */
void standin_cost(enum standin_cost what, u32 pages)
{
	u64 start, end, now, yielded;

	if (!READ_ONCE(cost_model))
		return;
	might_sleep();
	start = ktime_get_ns();
	end = start + standin_cost_ns(what, pages);
	yielded = start;
	while ((now = ktime_get_ns()) < end) {
		cpu_relax();
		if (now - yielded >= NSEC_PER_MSEC) {
			cond_resched();
			yielded = now;
		}
	}
	count_add(cost_model_ns, ktime_get_ns() - start);
}
