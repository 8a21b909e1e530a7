// SPDX-License-Identifier: GPL-2.0
/*
 * Race points of the peer-memory host stand-in, /sys/kernel/debug/peer_mem_host/race: named places
 * in registration, invalidation and deregistration where a test can hold a task (a gate) or slow
 * every task down (a delay), with whatever locks the host holds there still held, to force the
 * interleavings a real node only hits by chance. The engine and its interface are the ones both
 * stand-ins share (../common/race_engine.c, docs/race-points.md); this names the points (README.md
 * says where each sits in MLNX_OFED's flow).
 */
#define pr_fmt(fmt) "peer_mem_host: " fmt

#include "../common/race_engine.c"
#include "pmh.h"

static const char *const names[PMH_RACE_NR] = {
	[PMH_RACE_REG_ACQUIRED] = "reg.acquired",
	[PMH_RACE_REG_LOCKED] = "reg.locked",
	[PMH_RACE_REG_AFTER_GET_PAGES] = "reg.after_get_pages",
	[PMH_RACE_REG_AFTER_DMA_MAP] = "reg.after_dma_map",
	[PMH_RACE_REG_BEFORE_ACTIVATE] = "reg.before_activate",
	[PMH_RACE_INVALIDATE_ENTERED] = "invalidate.entered",
	[PMH_RACE_INVALIDATE_LOCKED] = "invalidate.locked",
	[PMH_RACE_DEREG_BEFORE_STOP] = "dereg.before_stop",
	[PMH_RACE_DEREG_STOPPED] = "dereg.stopped",
	[PMH_RACE_DEREG_BEFORE_RELEASE] = "dereg.before_release",
	[PMH_RACE_REGISTER_REFUSED] = "register.refused",
};

static void gate_timed_out(void)
{
	atomic_inc(&pmh_counters.race_gate_timeouts);
}

DEFINE_RACE_ENGINE(engine, names, PMH_RACE_NR, gate_timed_out);

void pmh_race(enum pmh_race_point point)
{
	race_engine_pass(&engine, point);
}

void pmh_race_init(struct dentry *dir)
{
	race_engine_init(&engine, dir);
}

void pmh_race_exit(void)
{
	race_engine_exit(&engine);
}
