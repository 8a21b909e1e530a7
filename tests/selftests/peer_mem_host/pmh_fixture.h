/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fixture every peer_mem_host selftest uses: a fresh host (and test client) per test, with the
 * parameters the test names, torn down again afterwards. Include after kselftest_harness.h.
 */
#ifndef PMH_FIXTURE_H
#define PMH_FIXTURE_H

#include "pmh_test.h"

FIXTURE(pmh) {
	int pmh;	/* /dev/peer_mem_host */
	int gpu;	/* /dev/nvidia_p2p_standin */
};

FIXTURE_SETUP(pmh)
{
	self->pmh = -1;
	self->gpu = -1;
}

FIXTURE_TEARDOWN(pmh)
{
	char why[256];
	int i;

	/* A test that failed half-way may still hold a task at a gate: let it go first. */
	if (mod_loaded(CLIENT_MOD))
		for (i = 0; i < 4; i++)
			tc_gate_open(i);
	if (mod_loaded(HOST_MOD))
		race_clear(HOST_MOD);
	/* Closing deregisters what is left, which the client unload below depends on. */
	if (self->pmh >= 0)
		close(self->pmh);
	if (self->gpu >= 0)
		close(self->gpu);
	/* Teardown's findings are reported, but a failed test already failed. */
	if (env_unload())
		TH_LOG("teardown: could not unload the modules");
	if (mod_loaded(STANDIN_MOD) && gpu_leaks(why, sizeof(why)))
		TH_LOG("teardown: the NVIDIA stand-in still has live objects: %s", why);
}

/*
 * Load the host with @host_params and, unless @client_params is NULL, the NVIDIA stand-in and the
 * test client with @client_params; open the host (and the stand-in). Skips when a module is missing.
 */
#define LOAD(host_params, client_params) do {						\
	const char *_why = "";								\
	const char *_cp = (client_params);						\
	int _r;										\
	if (!module_available(HOST_KO))							\
		SKIP(return, "no " HOST_KO " in %s", modules_dir());			\
	if (_cp && (!module_available(CLIENT_KO) || !module_available(STANDIN_KO)))	\
		SKIP(return, "no " CLIENT_KO " or " STANDIN_KO " in %s", modules_dir());	\
	_r = env_load((host_params), _cp, &_why);					\
	ASSERT_EQ(0, _r) TH_LOG("%s: %s", _why, strerror(-_r));			\
	self->pmh = pmh_open();								\
	ASSERT_LE(0, self->pmh) TH_LOG("open " PMH_DEVICE ": %s", strerror(-self->pmh)); \
	if (_cp) {									\
		self->gpu = gpu_open();							\
		ASSERT_LE(0, self->gpu) TH_LOG("open " NVP2P_STANDIN_DEVICE ": %s",	\
					      strerror(-self->gpu));			\
	}										\
} while (0)

/* GPU memory of @size bytes; its VA. */
#define GPU_ALLOC(size, handlep) ({							\
	void *_va = gpu_alloc(self->gpu, (size), (handlep));				\
	ASSERT_NE(NULL, _va) TH_LOG("gpu_alloc(%zu): %s", (size_t)(size), strerror(errno)); \
	_va;										\
})

/* Every live object of the host, the client and the stand-in is gone. */
#define ASSERT_NO_LEAKS() do {								\
	char _why[256];									\
	ASSERT_EQ(0, pmh_counter("live_mrs"));						\
	if (mod_loaded(CLIENT_MOD))							\
		ASSERT_EQ(0, tc_counter(0, "live_contexts"));				\
	if (mod_loaded(STANDIN_MOD))							\
		ASSERT_EQ(0, gpu_leaks(_why, sizeof(_why))) TH_LOG("stand-in: %s", _why); \
} while (0)

#endif /* PMH_FIXTURE_H */
