// SPDX-License-Identifier: GPL-2.0
/*
 * The race-point engine of both stand-ins, included by each module's race file (standin_race.c,
 * pmh_race.c), which names its points and says how a gate timeout is counted. Its interface, the
 * debugfs file <module>/race, is specified in docs/race-points.md; tests/selftests/common/race.h is
 * its userspace side.
 *
 * A point is a named place in a stand-in's code where another task could run. A task passing it
 * first sleeps the point's delay, if any, then, if a gate is armed there, stops until the gate is
 * opened, the gate's timeout passes, or the task is killed; it waits with whatever locks the code
 * holds there, as the real provider would hold them.
 *
 * Locking: engine->lock (a spinlock, never held while sleeping) covers every field of every slot.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#define RACE_DEFAULT_TIMEOUT_MS	20000
#define RACE_MAX_TIMEOUT_MS	600000		/* 10 min: longer is a mistake in a test */
#define RACE_MAX_DELAY_US	10000000	/* 10 s: likewise */
#define RACE_CMD_MAX		256

enum race_state { RACE_IDLE, RACE_ARMED, RACE_HELD, RACE_OPEN };

static const char *const race_state_names[] = {
	[RACE_IDLE] = "idle", [RACE_ARMED] = "armed", [RACE_HELD] = "held", [RACE_OPEN] = "open",
};

struct race_slot {
	wait_queue_head_t wq;
	enum race_state state;
	pid_t held_pid;
	u64 passes;
	/* Bumped whenever a gate is armed, opened or cleared: a held task knows it may go. */
	u32 gen;
	u32 timeout_ms;
	u32 delay_us;		/* fixed, or the maximum with delay_random */
	bool delay_random;
};

struct race_engine {
	const char *const *names;	/* the points, in the order the race file lists them */
	unsigned int count;
	struct race_slot *slots;	/* count of them */
	spinlock_t lock;
	void (*timed_out)(void);	/* counts a gate nobody opened in time (race_gate_timeouts) */
};

/* A stand-in's engine @var: its @nr points named by @point_names, @on_timeout counting timeouts. */
#define DEFINE_RACE_ENGINE(var, point_names, nr, on_timeout)			\
	static struct race_slot var##_slots[nr];				\
	static struct race_engine var = {					\
		.names = point_names, .count = nr,				\
		.slots = var##_slots, .timed_out = on_timeout,			\
	}

static bool race_released(struct race_engine *e, struct race_slot *p, u32 gen)
{
	bool released;

	spin_lock(&e->lock);
	released = p->gen != gen;
	spin_unlock(&e->lock);
	return released;
}

/* A task passes point @which: its delay, then its gate. Process context. */
static void race_engine_pass(struct race_engine *e, unsigned int which)
{
	struct race_slot *p = &e->slots[which];
	u32 gen = 0, timeout_ms = 0, delay;
	bool gated = false, gave_up = false;
	long left = 1;

	might_sleep();
	spin_lock(&e->lock);
	p->passes++;
	delay = p->delay_us;
	if (delay && p->delay_random)
		delay = get_random_u32_below(delay + 1);
	if (p->state == RACE_ARMED) {
		p->state = RACE_HELD;
		p->held_pid = task_pid_nr(current);
		gen = p->gen;
		timeout_ms = p->timeout_ms;
		gated = true;
	}
	spin_unlock(&e->lock);

	if (delay)
		fsleep(delay);
	if (!gated)
		return;
	left = wait_event_killable_timeout(p->wq, race_released(e, p, gen),
					   msecs_to_jiffies(timeout_ms));
	if (left > 0)
		return;
	spin_lock(&e->lock);
	if (p->gen == gen) {	/* nobody opened it: timed out, or the task was killed */
		p->state = RACE_IDLE;
		p->held_pid = 0;
		p->gen++;
		gave_up = true;
	}
	spin_unlock(&e->lock);
	if (gave_up && left == 0) {
		e->timed_out();
		pr_warn("race gate %s: nobody opened it within %u ms; %s[%d] goes on\n",
			e->names[which], timeout_ms, current->comm, task_pid_nr(current));
	} else if (gave_up) {
		pr_warn("race gate %s: killed while held; %s[%d] goes on\n",
			e->names[which], current->comm, task_pid_nr(current));
	}
}

static struct race_slot *race_find(struct race_engine *e, const char *name)
{
	unsigned int i;

	for (i = 0; name && i < e->count; i++)
		if (!strcmp(e->names[i], name))
			return &e->slots[i];
	return NULL;
}

/* Releases a held task or disarms an armed gate; e->lock held. */
static void race_open_locked(struct race_slot *p)
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

static void race_clear(struct race_engine *e)
{
	unsigned int i;

	spin_lock(&e->lock);
	for (i = 0; i < e->count; i++) {
		race_open_locked(&e->slots[i]);
		e->slots[i].state = RACE_IDLE;
		e->slots[i].delay_us = 0;
		e->slots[i].delay_random = false;
	}
	spin_unlock(&e->lock);
	for (i = 0; i < e->count; i++)
		wake_up_all(&e->slots[i].wq);
}

static int race_parse_u32(const char *s, u32 max, u32 *out)
{
	if (!s || kstrtou32(s, 10, out) || *out > max)
		return -EINVAL;
	return 0;
}

/* One command, split into words (docs/race-points.md). */
static int race_command(struct race_engine *e, char *cmd, char *name, char *arg1, char *arg2,
			char *extra)
{
	struct race_slot *p;
	bool random = false;
	u32 value;
	int ret = 0;

	if (!strcmp(cmd, "clear")) {
		if (name)
			return -EINVAL;
		race_clear(e);
		return 0;
	}
	p = race_find(e, name);
	if (!p || extra)
		return -EINVAL;

	if (!strcmp(cmd, "gate")) {
		value = RACE_DEFAULT_TIMEOUT_MS;
		if (arg2 || (arg1 && race_parse_u32(arg1, RACE_MAX_TIMEOUT_MS, &value)) || !value)
			return -EINVAL;
		spin_lock(&e->lock);
		if (p->state == RACE_HELD) {
			ret = -EBUSY;	/* open the held task first */
		} else {
			p->state = RACE_ARMED;
			p->timeout_ms = value;
			p->gen++;
		}
		spin_unlock(&e->lock);
		return ret;
	}
	if (!strcmp(cmd, "open")) {
		if (arg1)
			return -EINVAL;
		spin_lock(&e->lock);
		race_open_locked(p);
		spin_unlock(&e->lock);
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
		spin_lock(&e->lock);
		p->delay_us = value;
		p->delay_random = random && value;
		spin_unlock(&e->lock);
		return 0;
	}
	return -EINVAL;
}

static ssize_t race_write(struct file *file, const char __user *ubuf, size_t count, loff_t *ppos)
{
	struct race_engine *e = file_inode(file)->i_private;
	char buf[RACE_CMD_MAX], *s, *words[5] = { };
	int n = 0, ret;

	if (!count || count >= sizeof(buf))
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
	ret = race_command(e, words[0], words[1], words[2], words[3], words[4]);
	return ret ? ret : count;
}

static int race_show(struct seq_file *m, void *unused)
{
	struct race_engine *e = m->private;
	enum race_state state;
	unsigned int i;
	u32 delay_us;
	bool random;
	pid_t pid;
	u64 passes;

	for (i = 0; i < e->count; i++) {
		spin_lock(&e->lock);
		state = e->slots[i].state;
		pid = e->slots[i].held_pid;
		passes = e->slots[i].passes;
		delay_us = e->slots[i].delay_us;
		random = e->slots[i].delay_random;
		spin_unlock(&e->lock);
		seq_printf(m, "%s %s %d %llu %s%u\n", e->names[i], race_state_names[state], pid,
			   passes, random ? "random:" : "", delay_us);
	}
	return 0;
}

static int race_open(struct inode *inode, struct file *file)
{
	return single_open(file, race_show, inode->i_private);
}

static const struct file_operations race_fops = {
	.owner = THIS_MODULE,
	.open = race_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = race_write,
};

static void race_engine_init(struct race_engine *e, struct dentry *dir)
{
	unsigned int i;

	spin_lock_init(&e->lock);
	for (i = 0; i < e->count; i++)
		init_waitqueue_head(&e->slots[i].wq);
	debugfs_create_file("race", 0600, dir, e, &race_fops);
}

/* Nobody can be held at unload (a held task keeps the module in use); clear for good measure. */
static void race_engine_exit(struct race_engine *e)
{
	race_clear(e);
}
