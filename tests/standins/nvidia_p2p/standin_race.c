// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: race points (/sys/kernel/debug/nvidia_p2p_standin/race), the interface
 * both stand-ins share (/work/notes/race-points.md; tests/selftests/common/race.h is its
 * userspace side). A point is a named place in the driver's code where another task could run;
 * a test arms a point to hold the next task there, or to slow every task passing it:
 *
 *   gate <point> [timeout_ms]      the next task reaching <point> waits there (killable) until
 *                                  "open <point>" or the timeout (default 20000 ms; counted in
 *                                  race_gate_timeouts and logged)
 *   open <point>                   release the held task (or disarm a gate nobody reached)
 *   delay <point> <us>             every task passing <point> sleeps <us> (0: off)
 *   delay <point> random <max_us>  ... a random 0..max_us
 *   clear                          every gate opened and disarmed, every delay off
 *
 * Reading gives "<point> <state> <held_pid> <passes> <delay>" per point, in a fixed order; state
 * is idle, armed, held or open (released by "open", until the next gate). A task waits at a point
 * with whatever locks the driver holds there, as the real driver would hold them.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "standin.h"

#define RACE_DEFAULT_TIMEOUT_MS	20000
#define RACE_MAX_DELAY_US	10000000	/* 10 s: longer is a mistake in a test */

enum rp_state { RP_IDLE, RP_ARMED, RP_HELD, RP_OPEN };

static const char *const rp_state_names[] = {
	[RP_IDLE] = "idle", [RP_ARMED] = "armed", [RP_HELD] = "held", [RP_OPEN] = "open",
};

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

struct rp {
	wait_queue_head_t wq;
	enum rp_state state;
	pid_t held_pid;
	u64 passes;
	u64 epoch;		/* bumped when a held task is let go */
	unsigned int timeout_ms;
	unsigned int delay_us;	/* fixed, or the maximum with delay_random */
	bool delay_random;
};

static DEFINE_SPINLOCK(race_lock);	/* every field of every point */
static struct rp points[RP_COUNT];

/* Let the task held at @p go (race_lock held). */
static void rp_release_locked(struct rp *p, enum rp_state next)
{
	p->state = next;
	p->held_pid = 0;
	p->epoch++;
	wake_up_all(&p->wq);
}

void race_point(enum race_point which)
{
	struct rp *p = &points[which];
	unsigned int delay_us, timeout_ms = 0;
	bool gate = false, timed_out = false;
	u64 epoch = 0;
	long left = 1;

	spin_lock(&race_lock);
	p->passes++;
	delay_us = p->delay_us;
	if (delay_us && p->delay_random)
		delay_us = get_random_u32_inclusive(0, delay_us);
	if (p->state == RP_ARMED) {
		p->state = RP_HELD;
		p->held_pid = current->pid;
		timeout_ms = p->timeout_ms;
		epoch = p->epoch;
		gate = true;
	}
	spin_unlock(&race_lock);

	if (delay_us)
		fsleep(delay_us);
	if (!gate)
		return;
	left = wait_event_killable_timeout(p->wq, READ_ONCE(p->epoch) != epoch,
					   msecs_to_jiffies(timeout_ms));
	spin_lock(&race_lock);
	if (p->epoch == epoch) {	/* nobody opened it: timed out, or the task was killed */
		rp_release_locked(p, RP_IDLE);
		timed_out = true;
	}
	spin_unlock(&race_lock);
	if (timed_out && !left) {
		count_inc(race_gate_timeouts);
		pr_warn("race point %s: nobody opened the gate within %u ms; %s[%d] goes on\n",
			rp_names[which], timeout_ms, current->comm, current->pid);
	} else if (timed_out) {
		pr_warn("race point %s: %s[%d] was killed while held; it goes on\n",
			rp_names[which], current->comm, current->pid);
	}
}

static int race_show(struct seq_file *s, void *unused)
{
	unsigned int delay_us;
	enum rp_state state;
	bool random;
	pid_t pid;
	u64 passes;
	int i;

	for (i = 0; i < RP_COUNT; i++) {
		spin_lock(&race_lock);
		state = points[i].state;
		pid = points[i].held_pid;
		passes = points[i].passes;
		delay_us = points[i].delay_us;
		random = points[i].delay_random;
		spin_unlock(&race_lock);
		seq_printf(s, "%s %s %d %llu ", rp_names[i], rp_state_names[state], pid, passes);
		if (delay_us && random)
			seq_printf(s, "random:%u\n", delay_us);
		else
			seq_printf(s, "%u\n", delay_us);
	}
	return 0;
}

static int race_open(struct inode *inode, struct file *file)
{
	return single_open(file, race_show, NULL);
}

static int rp_lookup(const char *name)
{
	int i;

	for (i = 0; i < RP_COUNT; i++)
		if (name && !strcmp(name, rp_names[i]))
			return i;
	return -EINVAL;
}

static void race_clear(void)
{
	int i;

	spin_lock(&race_lock);
	for (i = 0; i < RP_COUNT; i++) {
		if (points[i].state == RP_HELD)
			rp_release_locked(&points[i], RP_IDLE);
		points[i].state = RP_IDLE;
		points[i].delay_us = 0;
		points[i].delay_random = false;
	}
	spin_unlock(&race_lock);
}

/* One command per write; see the top of the file. */
static int race_command(char *buf)
{
	char *cmd, *name, *arg1, *arg2, *extra;
	unsigned int v = 0;
	struct rp *p;
	int i, ret = 0;

	buf = strim(buf);
	cmd = strsep(&buf, " \t");
	name = strsep(&buf, " \t");
	arg1 = strsep(&buf, " \t");
	arg2 = strsep(&buf, " \t");
	extra = strsep(&buf, " \t");
	if (!cmd || extra)
		return -EINVAL;
	if (!strcmp(cmd, "clear")) {
		if (name)
			return -EINVAL;
		race_clear();
		return 0;
	}
	i = rp_lookup(name);
	if (i < 0)
		return i;
	p = &points[i];

	if (!strcmp(cmd, "gate")) {
		if (arg2)
			return -EINVAL;
		v = RACE_DEFAULT_TIMEOUT_MS;
		if (arg1 && (kstrtouint(arg1, 0, &v) || !v))
			return -EINVAL;
		spin_lock(&race_lock);
		if (p->state == RP_HELD) {
			ret = -EBUSY;	/* open the held task first */
		} else {
			p->state = RP_ARMED;
			p->timeout_ms = v;
		}
		spin_unlock(&race_lock);
		return ret;
	}
	if (!strcmp(cmd, "open")) {
		if (arg1)
			return -EINVAL;
		spin_lock(&race_lock);
		if (p->state == RP_HELD)
			rp_release_locked(p, RP_OPEN);
		else if (p->state == RP_ARMED)
			p->state = RP_IDLE;
		spin_unlock(&race_lock);
		return 0;
	}
	if (!strcmp(cmd, "delay")) {
		bool random = arg1 && !strcmp(arg1, "random");
		const char *num = random ? arg2 : arg1;

		if (!num || (!random && arg2) || kstrtouint(num, 0, &v) || v > RACE_MAX_DELAY_US)
			return -EINVAL;
		spin_lock(&race_lock);
		p->delay_us = v;
		p->delay_random = random;
		spin_unlock(&race_lock);
		return 0;
	}
	return -EINVAL;
}

static ssize_t race_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char *buf;
	int ret;

	if (!len || len > 256)
		return -EINVAL;
	buf = memdup_user_nul(ubuf, len);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	ret = race_command(buf);
	kfree(buf);
	return ret ? ret : len;
}

static const struct file_operations race_fops = {
	.owner = THIS_MODULE,
	.open = race_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = race_write,
};

void standin_race_init(struct dentry *dir)
{
	int i;

	for (i = 0; i < RP_COUNT; i++)
		init_waitqueue_head(&points[i].wq);
	debugfs_create_file("race", 0644, dir, NULL, &race_fops);
}

/* Nobody can be held at unload (callers hold module references); clear for the record. */
void standin_race_exit(void)
{
	race_clear();
}
