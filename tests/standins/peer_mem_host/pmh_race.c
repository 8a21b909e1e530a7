// SPDX-License-Identifier: GPL-2.0
/*
 * Race points of the peer-memory host stand-in: named places in registration, invalidation and
 * deregistration where a test can hold a task (a gate) or slow every task down (a delay), with
 * whatever locks the host holds there still held, to force the interleavings a real node only
 * hits by chance. One file, /sys/kernel/debug/peer_mem_host/race (the NVIDIA stand-in has the same
 * interface in its standin_race.c; tests use tests/selftests/common/race.h):
 *
 *   write  gate <point> [timeout_ms]     the next task reaching <point> blocks there (killable)
 *                                        until "open", or timeout_ms (default 20000) has passed;
 *                                        a timeout is counted (race_gate_timeouts) and logged
 *          open <point>                  release the held task, or disarm a gate not yet reached
 *          delay <point> <us>            every task passing <point> sleeps <us> (0: off)
 *          delay <point> random <max_us> ... a random 0..max_us
 *          clear                         disarm every gate (releasing held tasks), every delay
 *   read   one line per point, in a fixed order: <point> <state> <held_pid> <passes> <delay>
 *          state: idle, armed, held, open; delay: <us> or random:<max_us>
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "pmh.h"

#define RACE_DEFAULT_TIMEOUT_MS	20000
#define RACE_MAX_TIMEOUT_MS	600000
#define RACE_MAX_DELAY_US	10000000
#define RACE_CMD_MAX		128

enum race_state { RACE_IDLE, RACE_ARMED, RACE_HELD, RACE_OPEN };

static const char *const race_state_names[] = {
	[RACE_IDLE] = "idle", [RACE_ARMED] = "armed", [RACE_HELD] = "held", [RACE_OPEN] = "open",
};

struct race_point {
	const char *name;
	enum race_state state;
	pid_t held_pid;
	u64 passes;
	u32 delay_us;
	bool delay_random;
	u32 timeout_ms;
	/* Bumped whenever a gate is armed, opened or cleared: a held task knows it may go. */
	u32 gen;
	wait_queue_head_t wq;
};

/* Every field of every point; never held while sleeping. */
static DEFINE_SPINLOCK(race_lock);

static struct race_point race_points[PMH_RACE_NR] = {
	[PMH_RACE_REG_ACQUIRED] = { .name = "reg.acquired" },
	[PMH_RACE_REG_LOCKED] = { .name = "reg.locked" },
	[PMH_RACE_REG_AFTER_GET_PAGES] = { .name = "reg.after_get_pages" },
	[PMH_RACE_REG_AFTER_DMA_MAP] = { .name = "reg.after_dma_map" },
	[PMH_RACE_REG_BEFORE_ACTIVATE] = { .name = "reg.before_activate" },
	[PMH_RACE_INVALIDATE_ENTERED] = { .name = "invalidate.entered" },
	[PMH_RACE_INVALIDATE_LOCKED] = { .name = "invalidate.locked" },
	[PMH_RACE_DEREG_BEFORE_STOP] = { .name = "dereg.before_stop" },
	[PMH_RACE_DEREG_STOPPED] = { .name = "dereg.stopped" },
	[PMH_RACE_DEREG_BEFORE_RELEASE] = { .name = "dereg.before_release" },
	[PMH_RACE_REGISTER_REFUSED] = { .name = "register.refused" },
};

static bool race_released(struct race_point *p, u32 gen)
{
	bool released;

	spin_lock(&race_lock);
	released = p->gen != gen;
	spin_unlock(&race_lock);
	return released;
}

void pmh_race(enum pmh_race_point point)
{
	struct race_point *p = &race_points[point];
	u32 gen = 0, timeout_ms = 0, delay;
	bool gated = false, random, gave_up = false;
	long left = 1;

	might_sleep();
	spin_lock(&race_lock);
	p->passes++;
	delay = p->delay_us;
	random = p->delay_random;
	if (p->state == RACE_ARMED) {
		p->state = RACE_HELD;
		p->held_pid = task_pid_nr(current);
		gen = p->gen;
		timeout_ms = p->timeout_ms;
		gated = true;
	}
	spin_unlock(&race_lock);

	if (gated) {
		left = wait_event_killable_timeout(p->wq, race_released(p, gen),
						   msecs_to_jiffies(timeout_ms));
		if (left <= 0) {
			spin_lock(&race_lock);
			if (p->gen == gen) {
				p->state = RACE_IDLE;
				p->held_pid = 0;
				p->gen++;
				gave_up = true;
			}
			spin_unlock(&race_lock);
		}
	}
	if (gave_up && left == 0) {
		atomic_inc(&pmh_counters.race_gate_timeouts);
		pr_warn("peer_mem_host: race gate %s timed out after %u ms; task %d goes on\n",
			p->name, timeout_ms, task_pid_nr(current));
	} else if (gave_up) {
		pr_warn("peer_mem_host: task %d killed while held at race gate %s; it goes on\n",
			task_pid_nr(current), p->name);
	}

	if (delay) {
		if (random)
			delay = get_random_u32_below(delay + 1);
		if (delay)
			fsleep(delay);
	}
}

static struct race_point *race_find(const char *name)
{
	int i;

	for (i = 0; i < PMH_RACE_NR; i++)
		if (!strcmp(race_points[i].name, name))
			return &race_points[i];
	return NULL;
}

/* Releases a held task or disarms an armed gate; race_lock held. */
static void race_open_locked(struct race_point *p)
{
	if (p->state == RACE_HELD) {
		p->state = RACE_OPEN;
		p->held_pid = 0;
		p->gen++;
	} else if (p->state == RACE_ARMED) {
		p->state = RACE_IDLE;
		p->gen++;
	}
}

static void race_clear(void)
{
	int i;

	spin_lock(&race_lock);
	for (i = 0; i < PMH_RACE_NR; i++) {
		race_open_locked(&race_points[i]);
		race_points[i].state = RACE_IDLE;
		race_points[i].delay_us = 0;
		race_points[i].delay_random = false;
	}
	spin_unlock(&race_lock);
	for (i = 0; i < PMH_RACE_NR; i++)
		wake_up_all(&race_points[i].wq);
}

static int race_parse_u32(const char *s, u32 max, u32 *out)
{
	if (!s || kstrtou32(s, 10, out) || *out > max)
		return -EINVAL;
	return 0;
}

/* One command, already split into words. */
static int race_command(char *cmd, char *name, char *arg1, char *arg2, char *extra)
{
	struct race_point *p;
	bool random = false;
	u32 value;
	int ret = 0;

	if (!strcmp(cmd, "clear")) {
		if (name)
			return -EINVAL;
		race_clear();
		return 0;
	}
	p = name ? race_find(name) : NULL;
	if (!p || extra)
		return -EINVAL;

	if (!strcmp(cmd, "gate")) {
		value = RACE_DEFAULT_TIMEOUT_MS;
		if (arg2 || (arg1 && race_parse_u32(arg1, RACE_MAX_TIMEOUT_MS, &value)) || !value)
			return -EINVAL;
		spin_lock(&race_lock);
		if (p->state == RACE_HELD) {
			ret = -EBUSY;	/* open the held task first */
		} else {
			p->state = RACE_ARMED;
			p->timeout_ms = value;
			p->gen++;
		}
		spin_unlock(&race_lock);
		return ret;
	}
	if (!strcmp(cmd, "open")) {
		if (arg1)
			return -EINVAL;
		spin_lock(&race_lock);
		race_open_locked(p);
		spin_unlock(&race_lock);
		wake_up_all(&p->wq);
		return 0;
	}
	if (!strcmp(cmd, "delay")) {
		if (arg1 && !strcmp(arg1, "random")) {
			random = true;
			arg1 = arg2;
		} else if (arg2) {
			return -EINVAL;
		}
		if (race_parse_u32(arg1, RACE_MAX_DELAY_US, &value))
			return -EINVAL;
		spin_lock(&race_lock);
		p->delay_us = value;
		p->delay_random = random && value;
		spin_unlock(&race_lock);
		return 0;
	}
	return -EINVAL;
}

static ssize_t race_write(struct file *file, const char __user *ubuf, size_t count, loff_t *ppos)
{
	char buf[RACE_CMD_MAX], *s, *words[5] = { };
	int n = 0, ret;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	s = strim(buf);
	while (s && *s && n < ARRAY_SIZE(words)) {
		words[n++] = strsep(&s, " \t");
		s = s ? skip_spaces(s) : NULL;
	}
	if (!n || (s && *s))
		return -EINVAL;
	ret = race_command(words[0], words[1], words[2], words[3], words[4]);
	return ret ? ret : count;
}

static int race_show(struct seq_file *m, void *unused)
{
	enum race_state state;
	u32 delay_us;
	bool random;
	pid_t pid;
	u64 passes;
	int i;

	for (i = 0; i < PMH_RACE_NR; i++) {
		spin_lock(&race_lock);
		state = race_points[i].state;
		pid = race_points[i].held_pid;
		passes = race_points[i].passes;
		delay_us = race_points[i].delay_us;
		random = race_points[i].delay_random;
		spin_unlock(&race_lock);
		seq_printf(m, "%s %s %d %llu %s%u\n", race_points[i].name, race_state_names[state],
			   pid, passes, random ? "random:" : "", delay_us);
	}
	return 0;
}

static int race_open(struct inode *inode, struct file *file)
{
	return single_open(file, race_show, NULL);
}

static const struct file_operations race_fops = {
	.owner = THIS_MODULE,
	.open = race_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = race_write,
};

void pmh_race_init(struct dentry *dir)
{
	int i;

	for (i = 0; i < PMH_RACE_NR; i++)
		init_waitqueue_head(&race_points[i].wq);
	debugfs_create_file("race", 0600, dir, NULL, &race_fops);
}

/* Nobody can be held at unload (a held task keeps the module in use); clear for good measure. */
void pmh_race_exit(void)
{
	race_clear();
}
