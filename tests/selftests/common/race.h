/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace helpers for the race points of the stand-ins: /sys/kernel/debug/<module>/race of
 * nvidia_p2p_standin and peer_mem_host (one interface for both; the points are listed in each
 * module's README). Header-only, libc only. @module is the module's debugfs directory name.
 *
 *   race_gate("peer_mem_host", "reg.locked", 0);            // arm (0: the default 20 s timeout)
 *   ... start the registration in a thread ...
 *   pid = race_wait_held("peer_mem_host", "reg.locked", 10000);   // its pid, or -1
 *   ... race something against the held task ...
 *   race_open("peer_mem_host", "reg.locked");
 *   race_clear("peer_mem_host");                            // every gate and delay off
 *
 * Every function returns 0 or -errno unless it says otherwise.
 */
#ifndef PEERMEM_SELFTESTS_RACE_H
#define PEERMEM_SELFTESTS_RACE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RACE_DEBUGFS "/sys/kernel/debug"

/* One point's line of the race file. */
struct race_info {
	char state[16];			/* idle, armed, held, open */
	int held_pid;			/* the held task's pid, 0 if none */
	unsigned long long passes;	/* tasks that reached the point since the module loaded */
	char delay[32];			/* "<us>" or "random:<max_us>" */
};

static inline int race_write(const char *module, const char *cmd)
{
	char path[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), RACE_DEBUGFS "/%s/race", module);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, cmd, strlen(cmd));
	n = n < 0 ? -errno : 0;
	close(fd);
	return n;
}

/* Arm a one-shot gate at @point; @timeout_ms <= 0 means the module's default (20 s). */
static inline int race_gate(const char *module, const char *point, int timeout_ms)
{
	char cmd[128];

	if (timeout_ms > 0)
		snprintf(cmd, sizeof(cmd), "gate %s %d", point, timeout_ms);
	else
		snprintf(cmd, sizeof(cmd), "gate %s", point);
	return race_write(module, cmd);
}

/* Release the task held at @point, or disarm a gate nobody reached. */
static inline int race_open(const char *module, const char *point)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "open %s", point);
	return race_write(module, cmd);
}

/* Every task passing @point sleeps @us microseconds (0: off). */
static inline int race_delay(const char *module, const char *point, unsigned int us)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "delay %s %u", point, us);
	return race_write(module, cmd);
}

/* Every task passing @point sleeps a random 0..@max_us microseconds (stress runs). */
static inline int race_delay_random(const char *module, const char *point, unsigned int max_us)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "delay %s random %u", point, max_us);
	return race_write(module, cmd);
}

static inline int race_clear(const char *module)
{
	return race_write(module, "clear");
}

/* @point's line. Returns 0, -ENOENT if the module has no such point, or -errno. */
static inline int race_read(const char *module, const char *point, struct race_info *info)
{
	char path[256], buf[8192], *line, *save = NULL;
	size_t off = 0, plen = strlen(point);
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), RACE_DEBUGFS "/%s/race", module);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (off < sizeof(buf) - 1 && (n = read(fd, buf + off, sizeof(buf) - 1 - off)) > 0)
		off += n;
	close(fd);
	buf[off] = '\0';
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, point, plen) || line[plen] != ' ')
			continue;
		memset(info, 0, sizeof(*info));
		if (sscanf(line + plen, " %15s %d %llu %31s", info->state, &info->held_pid,
			   &info->passes, info->delay) != 4)
			return -EPROTO;
		return 0;
	}
	return -ENOENT;
}

/* How many tasks reached @point since the module loaded; -1 if it cannot be read. */
static inline long long race_passes(const char *module, const char *point)
{
	struct race_info info;

	return race_read(module, point, &info) ? -1 : (long long)info.passes;
}

static inline long long race_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Wait until a task is held at @point. Returns its pid, or -1 after @timeout_ms. */
static inline int race_wait_held(const char *module, const char *point, int timeout_ms)
{
	long long end = race_now_ms() + timeout_ms;
	struct race_info info;

	do {
		if (!race_read(module, point, &info) && !strcmp(info.state, "held") &&
		    info.held_pid > 0)
			return info.held_pid;
		usleep(10 * 1000);
	} while (race_now_ms() < end);
	return -1;
}

/* Wait until @point has been passed at least @passes times. Returns 0, or -1 after @timeout_ms. */
static inline int race_wait_passes(const char *module, const char *point,
				   unsigned long long passes, int timeout_ms)
{
	long long end = race_now_ms() + timeout_ms;
	long long n;

	do {
		n = race_passes(module, point);
		if (n >= 0 && (unsigned long long)n >= passes)
			return 0;
		usleep(10 * 1000);
	} while (race_now_ms() < end);
	return -1;
}

/* Gates of @module that timed out since it loaded (its race_gate_timeouts); -1 if unreadable. */
static inline long long race_gate_timeouts(const char *module)
{
	char path[256], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), RACE_DEBUGFS "/%s/race_gate_timeouts", module);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtoll(buf, NULL, 0);
}

#endif /* PEERMEM_SELFTESTS_RACE_H */
