/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace side of the stand-ins' race points (/sys/kernel/debug/<module>/race; the interface is
 * specified in /work/notes/race-points.md and implemented by nvidia_p2p/standin_race.c and
 * peer_mem_host/pmh_race.c). Header-only, libc only; every function takes the module's name
 * ("nvidia_p2p_standin", "peer_mem_host").
 *
 *   race_gate(mod, "teardown.before_callback", 5000);   // the next task to get there waits
 *   ... start the operation that reaches it, in another thread or process ...
 *   pid_t pid = race_wait_held(mod, "teardown.before_callback", 5000);   // -1: never got there
 *   ... start the racing operation, observe ...
 *   race_open(mod, "teardown.before_callback");          // let it go on
 *   race_clear(mod);                                     // every gate and delay off
 *
 * Functions return 0 or -errno unless said otherwise.
 */
#ifndef PEERMEM_SELFTESTS_RACE_H
#define PEERMEM_SELFTESTS_RACE_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define RACE_STATE_LEN 16

/* One line of the race file. */
struct race_point_state {
	char state[RACE_STATE_LEN];	/* "idle", "armed", "held", "open" */
	pid_t held_pid;			/* the task held there, 0 if none */
	unsigned long long passes;	/* tasks that passed the point since the module was loaded */
	char delay[32];			/* "0", "<us>" or "random:<max_us>" */
};

static inline void race_path(char *buf, size_t len, const char *module)
{
	snprintf(buf, len, "/sys/kernel/debug/%s/race", module);
}

/* One command, in one write(), as the race file wants it. */
static inline int race_command(const char *module, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static inline int race_command(const char *module, const char *fmt, ...)
{
	char path[128], cmd[256];
	va_list ap;
	ssize_t n;
	int fd, len;

	va_start(ap, fmt);
	len = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(cmd))
		return -EINVAL;
	race_path(path, sizeof(path), module);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, cmd, len);
	if (n < 0)
		n = -errno;
	close(fd);
	return n < 0 ? (int)n : 0;
}

/* Arm a one-shot gate at @point; @timeout_ms 0 means the module's default (20 s). */
static inline int race_gate(const char *module, const char *point, unsigned int timeout_ms)
{
	if (timeout_ms)
		return race_command(module, "gate %s %u", point, timeout_ms);
	return race_command(module, "gate %s", point);
}

/* Release the task held at @point, or disarm a gate nobody reached. */
static inline int race_open(const char *module, const char *point)
{
	return race_command(module, "open %s", point);
}

/* Every task passing @point sleeps @us microseconds (0: off). */
static inline int race_delay(const char *module, const char *point, unsigned int us)
{
	return race_command(module, "delay %s %u", point, us);
}

/* Every task passing @point sleeps a random 0..@max_us microseconds. */
static inline int race_delay_random(const char *module, const char *point, unsigned int max_us)
{
	return race_command(module, "delay %s random %u", point, max_us);
}

/* Every gate opened and disarmed, every delay off. */
static inline int race_clear(const char *module)
{
	return race_command(module, "clear");
}

/* The current line of @point. */
static inline int race_read(const char *module, const char *point, struct race_point_state *st)
{
	char path[128], line[256], name[96];
	int ret = -ENOENT;
	FILE *f;

	race_path(path, sizeof(path), module);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		memset(st, 0, sizeof(*st));
		if (sscanf(line, "%95s %15s %d %llu %31s", name, st->state, &st->held_pid,
			   &st->passes, st->delay) == 5 && !strcmp(name, point)) {
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/* How many tasks passed @point since load; -1 if it cannot be read. */
static inline long long race_passes(const char *module, const char *point)
{
	struct race_point_state st;

	return race_read(module, point, &st) ? -1 : (long long)st.passes;
}

/*
 * Wait until a task is held at @point: its pid, or -1 after @timeout_ms (or if the file cannot be
 * read). Polls every millisecond.
 */
static inline pid_t race_wait_held(const char *module, const char *point, unsigned int timeout_ms)
{
	struct race_point_state st;
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (race_read(module, point, &st))
			return -1;
		if (!strcmp(st.state, "held"))
			return st.held_pid;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >=
		    (long)timeout_ms)
			return -1;
		usleep(1000);
	}
}

#endif /* PEERMEM_SELFTESTS_RACE_H */
