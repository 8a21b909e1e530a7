// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: its race points, /sys/kernel/debug/nvidia_p2p_standin/race. The engine and
 * its interface are the ones both stand-ins share (../common/race_engine.c, docs/race-points.md);
 * this names the points (README.md, "Race points", says where each sits in nvidia.ko's code).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include "../common/race_engine.c"
#include "standin.h"

static const char *const rp_names[RP_COUNT] = {
	[RP_GET_PAGES_PINNED] = "get_pages.pinned",
	[RP_GET_PAGES_RETURN] = "get_pages.return",
	[RP_GET_PAGES_PERSISTENT_RETURN] = "get_pages_persistent.return",
	[RP_PUT_PAGES_BEFORE_LOCK] = "put_pages.before_lock",
	[RP_PUT_PAGES_UNLINKED] = "put_pages.unlinked",
	[RP_PUT_PAGES_PERSISTENT_BEFORE_LOCK] = "put_pages_persistent.before_lock",
	[RP_DMA_MAP_READ] = "dma_map.read",
	[RP_DMA_MAP_LOCKED] = "dma_map.locked",
	[RP_DMA_MAP_BEFORE_INSERT] = "dma_map.before_insert",
	[RP_DMA_MAP_RETURN] = "dma_map.return",
	[RP_DMA_UNMAP_BEFORE_SEM] = "dma_unmap.before_sem",
	[RP_DMA_UNMAP_REMOVED] = "dma_unmap.removed",
	[RP_TEARDOWN_BEFORE_CALLBACK] = "teardown.before_callback",
	[RP_TEARDOWN_AFTER_CALLBACK] = "teardown.after_callback",
};

static void gate_timed_out(void)
{
	count_inc(race_gate_timeouts);
}

DEFINE_RACE_ENGINE(engine, rp_names, RP_COUNT, gate_timed_out);

void race_point(enum race_point which)
{
	race_engine_pass(&engine, which);
}

void standin_race_init(struct dentry *dir)
{
	race_engine_init(&engine, dir);
}

void standin_race_exit(void)
{
	race_engine_exit(&engine);
}
