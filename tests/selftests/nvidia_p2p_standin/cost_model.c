// SPDX-License-Identifier: GPL-2.0
/*
 * The cost model (README.md of the stand-in, "Cost model"): off by default, so that tests run at
 * the stand-in's own speed; on (cost_model=Y), a pin and an unpin take at least the time the model
 * gives nvidia.ko for their size, spent inside the entry point (ns_<fn>, cost_model_ns) and seen by
 * the caller. Checked at the model's measured points (1 and 256 pages of 64 KiB).
 */
#include "kselftest_harness.h"
#include "standin_test.h"

/* The model's figures (GDRCopy on a V100): pin and unpin of 1 and 256 pages, in ns. */
#define PIN_1		70000ull
#define PIN_256		119000ull
#define UNPIN_1		38000ull
#define UNPIN_256	63000ull

FIXTURE(cost) {
	struct standin_env env;
};

FIXTURE_SETUP(cost)
{
	STANDIN_SETUP(&self->env, "");
}

FIXTURE_TEARDOWN(cost)
{
	STANDIN_TEARDOWN(&self->env);
}

struct spent {
	__u64 wall_ns;		/* as the caller saw it */
	long long inside_ns;	/* ns_<fn> */
	long long model_ns;	/* cost_model_ns */
	long long calls;	/* calls_<fn> */
};

static void begin(struct spent *s, const char *fn)
{
	char name[64];

	snprintf(name, sizeof(name), "ns_%s", fn);
	s->inside_ns = gpu_counter(name);
	snprintf(name, sizeof(name), "calls_%s", fn);
	s->calls = gpu_counter(name);
	s->model_ns = gpu_counter("cost_model_ns");
	s->wall_ns = now_ns();
}

static void end(struct spent *s, const char *fn)
{
	__u64 t = now_ns();
	char name[64];

	s->wall_ns = t - s->wall_ns;
	snprintf(name, sizeof(name), "ns_%s", fn);
	s->inside_ns = gpu_counter(name) - s->inside_ns;
	snprintf(name, sizeof(name), "calls_%s", fn);
	s->calls = gpu_counter(name) - s->calls;
	s->model_ns = gpu_counter("cost_model_ns") - s->model_ns;
}

TEST_F(cost, off_by_default)
{
	struct spent pin, put;
	__u64 handle, h;
	char v[16];
	char *va;

	ASSERT_EQ(0, read_text(STANDIN_PARAMS "cost_model", v, sizeof(v)));
	EXPECT_STREQ("N", v);
	va = gpu_alloc(self->env.gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	begin(&pin, "get_pages");
	h = probe_pin_ok(self->env.probe, (uintptr_t)va, GPU_PAGE, 0);
	end(&pin, "get_pages");
	ASSERT_NE(0, h);
	begin(&put, "put_pages");
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	end(&put, "put_pages");
	/* Counted and timed, but nothing modelled. */
	EXPECT_EQ(1, pin.calls);
	EXPECT_EQ(1, put.calls);
	EXPECT_LT(0, pin.inside_ns);
	EXPECT_LE(pin.inside_ns, (long long)pin.wall_ns);
	EXPECT_EQ(0, pin.model_ns);
	EXPECT_EQ(0, put.model_ns);
	EXPECT_EQ(0, gpu_counter("cost_model_ns"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
}

/* Pin and unpin @pages with the model on; each must take at least the model's time. */
static void check_model(struct __test_metadata *_metadata, struct standin_env *env,
			unsigned int pages, bool persistent, __u64 pin_ns, __u64 unpin_ns)
{
	const char *get = persistent ? "get_pages_persistent" : "get_pages";
	const char *put = persistent ? "put_pages_persistent" : "put_pages";
	struct spent pin, unpin;
	__u64 handle, h;
	char *va;

	va = gpu_alloc(env->gpu, (size_t)pages * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	begin(&pin, get);
	h = probe_pin_ok(env->probe, (uintptr_t)va, (__u64)pages * GPU_PAGE,
			 persistent ? P2P_PROBE_PERSISTENT : 0);
	end(&pin, get);
	ASSERT_NE(0, h);
	begin(&unpin, put);
	EXPECT_EQ(0, probe_put(env->probe, h));
	end(&unpin, put);
	TH_LOG("%s of %u pages: %lld ns inside (%lld modelled), %llu ns seen; %s: %lld ns (%lld)",
	       get, pages, pin.inside_ns, pin.model_ns, (unsigned long long)pin.wall_ns, put,
	       unpin.inside_ns, unpin.model_ns);
	EXPECT_EQ(1, pin.calls);
	EXPECT_LE((long long)pin_ns, pin.model_ns);
	EXPECT_LE((long long)pin_ns, pin.inside_ns);
	EXPECT_LE(pin_ns, pin.wall_ns);
	EXPECT_EQ(1, unpin.calls);
	EXPECT_LE((long long)unpin_ns, unpin.model_ns);
	EXPECT_LE((long long)unpin_ns, unpin.inside_ns);
	EXPECT_LE(unpin_ns, unpin.wall_ns);
	EXPECT_EQ(0, gpu_free(env->gpu, handle));
}

TEST_F(cost, pins_and_unpins_cost_the_model)
{
	ASSERT_EQ(0, set_param("cost_model", "Y"));
	check_model(_metadata, &self->env, 1, false, PIN_1, UNPIN_1);
	check_model(_metadata, &self->env, 256, false, PIN_256, UNPIN_256);
	check_model(_metadata, &self->env, 1, true, PIN_1, UNPIN_1);
	check_model(_metadata, &self->env, 256, true, PIN_256, UNPIN_256);
	ASSERT_EQ(0, set_param("cost_model", "N"));
}

TEST_HARNESS_MAIN
