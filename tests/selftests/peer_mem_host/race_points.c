// SPDX-License-Identifier: GPL-2.0
/*
 * The host's race points (/sys/kernel/debug/peer_mem_host/race, tests/selftests/common/race.h):
 * every point is on the path it names, a gate holds the task that reaches it until opened (or
 * until its timeout, which is counted and logged), a killed task leaves its gate, delays slow
 * every pass, and malformed commands are refused.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define WAIT_MS 10000

static const char *const points[] = {
	"reg.acquired", "reg.locked", "reg.after_get_pages", "reg.after_dma_map",
	"reg.before_activate", "invalidate.entered", "invalidate.locked", "dereg.before_stop",
	"dereg.stopped", "dereg.before_release", "register.refused",
};

#define N_POINTS (sizeof(points) / sizeof(points[0]))
/* The points a memory registration passes: all but the last, register.refused (client registration). */
#define N_MR_POINTS (N_POINTS - 1)

static int race_cmd(const char *cmd)
{
	return race_write(HOST_MOD, cmd);
}

TEST_F_TIMEOUT(pmh, every_point_listed_in_order, 60)
{
	char buf[4096], *line, *save = NULL;
	struct race_info info;
	size_t i = 0;

	LOAD("", NULL);
	ASSERT_EQ(0, read_text(PMH_DEBUGFS "/race", buf, sizeof(buf)));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++) {
		ASSERT_GT(N_POINTS, i) TH_LOG("extra line %s", line);
		ASSERT_EQ(0, strncmp(line, points[i], strlen(points[i]))) TH_LOG("%s", line);
		ASSERT_EQ(' ', line[strlen(points[i])]);
	}
	ASSERT_EQ(N_POINTS, i);
	for (i = 0; i < N_POINTS; i++) {
		ASSERT_EQ(0, race_read(HOST_MOD, points[i], &info));
		ASSERT_STREQ("idle", info.state);
		ASSERT_EQ(0, info.held_pid);
		ASSERT_EQ(0, info.passes);
		ASSERT_STREQ("0", info.delay);
	}
}

TEST_F_TIMEOUT(pmh, registration_invalidation_deregistration_pass_their_points, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	size_t i;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &reg));
	for (i = 0; i < N_MR_POINTS; i++)
		ASSERT_EQ(i < 5, race_passes(HOST_MOD, points[i])) TH_LOG("point %zu", i);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.entered"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_EQ(0, race_passes(HOST_MOD, "dereg.before_stop"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	for (i = 0; i < N_MR_POINTS; i++)
		ASSERT_EQ(1, race_passes(HOST_MOD, points[i])) TH_LOG("point %zu", i);
	/* No client registration was refused. */
	ASSERT_EQ(0, race_passes(HOST_MOD, "register.refused"));
	/* An unknown id never gets as far as the MR. */
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "7"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.entered"));
	/* Ordinary memory never meets a peer-memory point. */
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, gate_holds_a_registration_until_opened, 120)
{
	struct op_thread reg = { };
	struct race_info info;
	__u64 handle;
	int held;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.locked", 0));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("armed", info.state);
	reg.pmh = self->pmh;
	reg.addr = va;
	reg.len = GPU_PAGE;
	reg.flags = PMH_REG_WRITE;
	ASSERT_EQ(0, op_start(&reg, op_reg_fn));
	held = race_wait_held(HOST_MOD, "reg.locked", WAIT_MS);
	ASSERT_EQ(reg.tid, held);
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("held", info.state);
	ASSERT_EQ(1, info.passes);
	/* Held before get_pages: the client has not been asked for pages yet. */
	ASSERT_TRUE(op_still_blocked(&reg, 300));
	ASSERT_EQ(0, tc_counter(0, "get_pages_calls"));
	/* A second gate on a held point is refused until it is opened. */
	ASSERT_EQ(-EBUSY, race_gate(HOST_MOD, "reg.locked", 0));
	ASSERT_EQ(0, race_open(HOST_MOD, "reg.locked"));
	ASSERT_EQ(0, op_join(&reg));
	ASSERT_EQ(0, reg.ret);
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("open", info.state);
	ASSERT_EQ(0, info.held_pid);
	ASSERT_EQ(0, race_gate_timeouts(HOST_MOD));
	/* One-shot: the next registration passes. */
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.reg.handle));
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg.reg));
	ASSERT_EQ(2, race_passes(HOST_MOD, "reg.locked"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, gate_timeout_is_counted_and_logged, 120)
{
	int logged = kmsg_count("race gate reg.acquired: nobody opened it within 500 ms");
	unsigned long long t0;
	struct pmh_reg_mr reg;
	struct race_info info;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.acquired", 500));
	t0 = now_ns();
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_LE(t0 + 500000000ULL, now_ns());
	ASSERT_EQ(1, race_gate_timeouts(HOST_MOD));
	ASSERT_EQ(logged + 1, kmsg_count("race gate reg.acquired: nobody opened it within 500 ms"));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.acquired", &info));
	ASSERT_STREQ("idle", info.state);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, gate_opened_before_it_is_reached_holds_nobody, 120)
{
	struct pmh_reg_mr reg;
	struct race_info info;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.after_dma_map", 0));
	ASSERT_EQ(0, race_open(HOST_MOD, "reg.after_dma_map"));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.after_dma_map", &info));
	ASSERT_STREQ("idle", info.state);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, race_gate_timeouts(HOST_MOD));
	/* Opening an idle point is harmless. */
	ASSERT_EQ(0, race_open(HOST_MOD, "reg.after_dma_map"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, killed_task_leaves_its_gate, 120)
{
	int logged = kmsg_count("race gate reg.after_get_pages: killed while held");
	int status, pipefd[2];
	struct race_info info;
	char ok;
	pid_t pid;

	LOAD("", "names=gpu");
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.after_get_pages", 0));
	ASSERT_EQ(0, pipe(pipefd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		/* GPU memory of its own (the driver finds pins by process), registered. */
		int gpu = gpu_open(), pmh = pmh_open();
		void *va = gpu >= 0 ? gpu_alloc(gpu, GPU_PAGE, NULL) : NULL;

		if (pmh < 0 || !va)
			_exit(1);
		if (write(pipefd[1], "r", 1) != 1)
			_exit(1);
		pmh_reg(pmh, va, GPU_PAGE, PMH_REG_WRITE, NULL);
		_exit(0);
	}
	close(pipefd[1]);
	ASSERT_EQ(1, read(pipefd[0], &ok, 1));
	close(pipefd[0]);
	ASSERT_EQ(pid, race_wait_held(HOST_MOD, "reg.after_get_pages", WAIT_MS));
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.after_get_pages", &info));
	ASSERT_STREQ("idle", info.state);
	ASSERT_EQ(0, race_gate_timeouts(HOST_MOD));
	ASSERT_EQ(logged + 1, kmsg_count("race gate reg.after_get_pages: killed while held"));
	/* Its exit closed its files: its MR and its GPU memory are gone. */
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, delays_slow_every_pass, 120)
{
	struct pmh_reg_mr r1, r2;
	struct race_info info;
	unsigned long long t0;
	__u64 handle;
	char *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &r1));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &r2));
	ASSERT_EQ(0, race_delay(HOST_MOD, "dereg.before_stop", 300000));
	ASSERT_EQ(0, race_read(HOST_MOD, "dereg.before_stop", &info));
	ASSERT_STREQ("300000", info.delay);
	t0 = now_ns();
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	ASSERT_LE(t0 + 300000000ULL, now_ns());
	t0 = now_ns();
	ASSERT_EQ(0, pmh_dereg(self->pmh, r2.handle));
	ASSERT_LE(t0 + 300000000ULL, now_ns());
	ASSERT_EQ(0, race_delay_random(HOST_MOD, "reg.locked", 1000));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("random:1000", info.delay);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &r1));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	/* clear turns every delay (and gate) off. */
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.acquired", 0));
	ASSERT_EQ(0, race_clear(HOST_MOD));
	ASSERT_EQ(0, race_read(HOST_MOD, "dereg.before_stop", &info));
	ASSERT_STREQ("0", info.delay);
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("0", info.delay);
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.acquired", &info));
	ASSERT_STREQ("idle", info.state);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, malformed_commands_are_refused, 60)
{
	static const char *const bad[] = {
		"gate", "gate nosuch.point", "bogus reg.locked", "gate reg.locked abc",
		"gate reg.locked 0", "gate reg.locked 10 20", "open", "open reg.locked now",
		"delay reg.locked", "delay reg.locked random", "delay reg.locked fast",
		"delay reg.locked random 5 6", "clear reg.locked", "gate reg.locked 999999999",
	};
	struct race_info info;
	size_t i;

	LOAD("", NULL);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ASSERT_EQ(-EINVAL, race_cmd(bad[i])) TH_LOG("bad command %zu accepted", i);
	for (i = 0; i < N_POINTS; i++) {
		ASSERT_EQ(0, race_read(HOST_MOD, points[i], &info));
		ASSERT_STREQ("idle", info.state);
		ASSERT_STREQ("0", info.delay);
	}
	/* Well-formed ones, with surrounding blanks and a newline. */
	ASSERT_EQ(0, race_cmd("  gate   reg.locked 1000 \n"));
	ASSERT_EQ(0, race_read(HOST_MOD, "reg.locked", &info));
	ASSERT_STREQ("armed", info.state);
	ASSERT_EQ(0, race_cmd("clear\n"));
	ASSERT_EQ(-ENOENT, race_read(HOST_MOD, "no.such", &info));
}

TEST_HARNESS_MAIN
