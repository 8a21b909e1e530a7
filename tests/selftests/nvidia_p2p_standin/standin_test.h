/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers of the NVIDIA P2P stand-in selftests: loading the modules from $PEERMEM_MODULES, the
 * p2p_probe calls, the stand-in's debugfs, and the PCI facts (topology, IOMMU, BARs) that tests
 * derive their expectations from, independently of the module under test. Include after
 * kselftest_harness.h.
 */
#ifndef STANDIN_TEST_H
#define STANDIN_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "race.h"
#include "uapi/p2p_probe.h"

#define GPU_PAGE NVP2P_GPU_PAGE_SIZE
#define KERN_ENOTSUPP 524		/* the kernel-internal errno nvidia.ko returns */
#define PROBE_IOCTL_FAILED (-100000)	/* a wrapper's ioctl itself failed (never an API errno) */
#define STANDIN "nvidia_p2p_standin"
#define STANDIN_PARAMS "/sys/module/" STANDIN "/parameters/"

/* ---- modules ---- */

static inline const char *modules_dir(void)
{
	const char *d = getenv("PEERMEM_MODULES");

	return d && *d ? d : "/payload/modules";
}

static inline bool module_loaded(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/module/%s/initstate", name);
	return access(path, F_OK) == 0;
}

static inline int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	fflush(stdout);
	rc = system(cmd);
	return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static inline int mod_unload(const char *name)
{
	return module_loaded(name) ? sh("rmmod %s", name) : 0;
}

/* insmod $PEERMEM_MODULES/NAME.ko PARAMS (unloading a leftover first). 0 or insmod's status. */
static inline int mod_load(const char *name, const char *params)
{
	if (mod_unload(name))
		return -1;
	return sh("insmod %s/%s.ko %s", modules_dir(), name, params ? params : "");
}

static inline bool module_file_exists(const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s.ko", modules_dir(), name);
	return access(path, R_OK) == 0;
}

/* ---- small file helpers ---- */

static inline int set_param(const char *name, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), STANDIN_PARAMS "%s", name);
	return write_text(path, value);
}

static inline int debugfs_write(const char *name, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), GPU_DEBUGFS "/%s", name);
	return write_text(path, value);
}

/* Does the kernel log, after the last line containing @mark, hold a line containing @needle? */
static inline bool kmsg_has_since(const char *mark, const char *needle)
{
	char line[1024];
	bool seen_mark = false, found = false;
	FILE *f = popen("dmesg", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, mark)) {
			seen_mark = true;
			found = false;
		} else if (seen_mark && strstr(line, needle)) {
			found = true;
		}
	}
	pclose(f);
	return found;
}

static inline void kmsg_mark(const char *mark)
{
	write_text("/dev/kmsg", mark);
}

static inline __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* ---- p2p_probe ---- */

static inline int probe_pin(int probe, __u64 va, __u64 len, uint32_t flags,
			    struct p2p_probe_pin *out, __u64 *phys, uint32_t max)
{
	struct p2p_probe_pin local;
	struct p2p_probe_pin *p = out ? out : &local;

	memset(p, 0, sizeof(*p));
	p->va = va;
	p->length = len;
	p->flags = flags;
	p->phys = (uintptr_t)phys;
	p->max_entries = phys ? max : 0;
	if (ioctl(probe, P2P_PROBE_IOC_PIN, p))
		return PROBE_IOCTL_FAILED;
	return p->ret;
}

/* Pin and return the handle; 0 if the pin failed. */
static inline __u64 probe_pin_ok(int probe, __u64 va, __u64 len, uint32_t flags)
{
	struct p2p_probe_pin p;

	return probe_pin(probe, va, len, flags, &p, NULL, 0) == 0 ? p.handle : 0;
}

static inline int probe_put_ex(int probe, __u64 handle, uint32_t flags, __u64 va,
			       uint32_t persistent_flags)
{
	struct p2p_probe_put p = { .handle = handle, .flags = flags, .va = va,
				   .persistent_flags = persistent_flags };

	if (ioctl(probe, P2P_PROBE_IOC_PUT, &p))
		return PROBE_IOCTL_FAILED;
	return p.ret;
}

static inline int probe_put(int probe, __u64 handle)
{
	return probe_put_ex(probe, handle, 0, 0, 0);
}

static inline int probe_state(int probe, __u64 handle, struct p2p_probe_pin_state *st)
{
	memset(st, 0, sizeof(*st));
	st->handle = handle;
	return ioctl(probe, P2P_PROBE_IOC_PIN_STATE, st) ? -errno : 0;
}

static inline int probe_map(int probe, __u64 pin, uint32_t peer, uint32_t pci_addr,
			    struct p2p_probe_map *out, __u64 *dma, uint32_t max)
{
	struct p2p_probe_map local;
	struct p2p_probe_map *m = out ? out : &local;

	memset(m, 0, sizeof(*m));
	m->pin = pin;
	m->peer = peer;
	m->pci_addr = pci_addr;
	m->dma = (uintptr_t)dma;
	m->max_entries = dma ? max : 0;
	if (ioctl(probe, P2P_PROBE_IOC_MAP, m))
		return PROBE_IOCTL_FAILED;
	return m->ret;
}

static inline int probe_unmap_ex(int probe, __u64 handle, uint32_t peer, uint32_t pci_addr,
				 uint32_t flags)
{
	struct p2p_probe_unmap u = { .handle = handle, .peer = peer, .pci_addr = pci_addr,
				     .flags = flags };

	if (ioctl(probe, P2P_PROBE_IOC_UNMAP, &u))
		return PROBE_IOCTL_FAILED;
	return u.ret;
}

static inline int probe_unmap(int probe, __u64 handle, uint32_t peer, uint32_t pci_addr)
{
	return probe_unmap_ex(probe, handle, peer, pci_addr, 0);
}

/* The probe's own errno when it refuses a call (e.g. ESTALE for a torn-down mapping); 0 if it made it. */
static inline int probe_unmap_refused(int probe, __u64 handle, uint32_t peer)
{
	struct p2p_probe_unmap u = { .handle = handle, .peer = peer };

	return ioctl(probe, P2P_PROBE_IOC_UNMAP, &u) ? errno : 0;
}

/* A put that reports whether the probe kept the pin (a non-persistent put from elsewhere). */
static inline int probe_put_kept(int probe, __u64 handle, uint32_t flags, int *kept)
{
	struct p2p_probe_put p = { .handle = handle, .flags = flags };

	*kept = -1;
	if (ioctl(probe, P2P_PROBE_IOC_PUT, &p))
		return PROBE_IOCTL_FAILED;
	*kept = p.kept;
	return p.ret;
}

/* ---- GPU memory ioctls beyond gpumem.h ---- */

static inline int gpu_unregister(int fd, __u64 handle)
{
	return ioctl(fd, NVP2P_IOC_UNREGISTER, &handle) ? -errno : 0;
}

static inline int gpu_register(int fd, __u64 handle)
{
	return ioctl(fd, NVP2P_IOC_REGISTER, &handle) ? -errno : 0;
}

/* ---- threads ---- */

/* The state letter of a task of this process (R, S, D, ...), or '?'. */
static inline char task_state(pid_t tid)
{
	char path[64], buf[512], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "re");
	if (!f)
		return '?';
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p)
		return '?';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/* ---- PCI facts from sysfs ---- */

struct pci_loc {
	char name[32];		/* "0000:03:00.0" */
	char path[PATH_MAX];	/* /sys/devices/pci0000:00/... */
};

static inline int pci_find(const char *vendor, const char *device, struct pci_loc *loc)
{
	char p[PATH_MAX], v[32], d[32];
	struct dirent *e;
	DIR *dir = opendir("/sys/bus/pci/devices");
	int ret = -ENODEV;

	if (!dir)
		return -errno;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/vendor", e->d_name);
		if (read_text(p, v, sizeof(v)))
			continue;
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/device", e->d_name);
		if (read_text(p, d, sizeof(d)))
			continue;
		if (strcmp(v, vendor) || strcmp(d, device))
			continue;
		snprintf(loc->name, sizeof(loc->name), "%.31s", e->d_name);
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s", e->d_name);
		if (!realpath(p, loc->path))
			break;
		ret = 0;
		break;
	}
	closedir(dir);
	return ret;
}

static inline int gpu_loc(struct pci_loc *loc)
{
	return pci_find("0x1af4", "0x1110", loc);
}

static inline int nic_loc(struct pci_loc *loc)
{
	return pci_find("0x1234", "0x11e8", loc);
}

static inline uint32_t pci_addr_of(const struct pci_loc *loc)
{
	unsigned int dom, bus, dev, fn;

	sscanf(loc->name, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
	return P2P_PROBE_PCI_ADDR(dom, bus, (dev << 3) | fn);
}

/* BAR @bar of a device: start and length from its sysfs `resource` file. */
static inline int pci_bar(const struct pci_loc *loc, int bar, __u64 *start, __u64 *len)
{
	char p[PATH_MAX + 16], line[128];
	unsigned long long s, e, f;
	FILE *fp;
	int i, ret = -ENOENT;

	snprintf(p, sizeof(p), "%s/resource", loc->path);
	fp = fopen(p, "r");
	if (!fp)
		return -errno;
	for (i = 0; fgets(line, sizeof(line), fp); i++) {
		if (i != bar)
			continue;
		if (sscanf(line, "%llx %llx %llx", &s, &e, &f) == 3 && e > s) {
			*start = s;
			*len = e - s + 1;
			ret = 0;
		}
		break;
	}
	fclose(fp);
	return ret;
}

static inline bool pci_iommu_translates(const struct pci_loc *loc)
{
	char p[PATH_MAX + 32], type[64];

	snprintf(p, sizeof(p), "%s/iommu_group/type", loc->path);
	if (read_text(p, type, sizeof(type)))
		return false;		/* no IOMMU group: no IOMMU */
	return strncmp(type, "DMA", 3) == 0;	/* "DMA" or "DMA-FQ"; "identity" is pass-through */
}

/* The PCIe port type (PCI_EXP_FLAGS_TYPE) of a device, read from its config space; -1 if none. */
static inline int pcie_type(const char *name)
{
	unsigned char cfg[256];
	char p[128];
	int fd, pos, guard;
	ssize_t n;

	snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/config", name);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		return -1;
	n = pread(fd, cfg, sizeof(cfg), 0);
	close(fd);
	if (n < 256 || !(cfg[6] & 0x10))	/* capability list present */
		return -1;
	for (pos = cfg[0x34] & ~3, guard = 0; pos && guard < 48; pos = cfg[pos + 1] & ~3, guard++)
		if (cfg[pos] == 0x10)
			return (cfg[pos + 2] >> 4) & 0xf;
	return -1;
}

/*
 * Do two devices sit below one PCIe switch? Their lowest common ancestor in the sysfs device
 * tree must be a switch port (upstream 5 or downstream 6); a root port (4) or only the host
 * bridge means they meet at the root complex.
 */
static inline bool pci_share_switch(const struct pci_loc *a, const struct pci_loc *b)
{
	char pa[PATH_MAX], pb[PATH_MAX], lca[32] = "";
	char *sa, *sb, *ca, *cb;
	unsigned int d, bus, dev, fn;

	snprintf(pa, sizeof(pa), "%s", a->path);
	snprintf(pb, sizeof(pb), "%s", b->path);
	ca = strtok_r(pa, "/", &sa);
	cb = strtok_r(pb, "/", &sb);
	for (; ca && cb && !strcmp(ca, cb); ca = strtok_r(NULL, "/", &sa), cb = strtok_r(NULL, "/", &sb))
		if (sscanf(ca, "%x:%x:%x.%x", &d, &bus, &dev, &fn) == 4)
			snprintf(lca, sizeof(lca), "%s", ca);	/* a PCI device both sit below */
	if (!lca[0])
		return false;
	return pcie_type(lca) == 5 || pcie_type(lca) == 6;
}

/*
 * Do two devices share an upstream bridge (nv_pci_has_common_pci_switch: any bridge above both,
 * a root port included)? In the sysfs tree that is a PCI device both sit below; meeting only at
 * the host bridge (pci0000:00) does not count.
 */
static inline bool pci_share_bridge(const struct pci_loc *a, const struct pci_loc *b)
{
	char pa[PATH_MAX], pb[PATH_MAX];
	char *sa, *sb, *ca, *cb;
	unsigned int d, bus, dev, fn;
	bool shared = false;

	snprintf(pa, sizeof(pa), "%s", a->path);
	snprintf(pb, sizeof(pb), "%s", b->path);
	ca = strtok_r(pa, "/", &sa);
	cb = strtok_r(pb, "/", &sb);
	for (; ca && cb && !strcmp(ca, cb); ca = strtok_r(NULL, "/", &sa), cb = strtok_r(NULL, "/", &sb))
		/* A common PCI device that is not a or b itself: a bridge above both. */
		if (sscanf(ca, "%x:%x:%x.%x", &d, &bus, &dev, &fn) == 4 &&
		    strcmp(ca, a->name) && strcmp(ca, b->name))
			shared = true;
	return shared;
}

/* ---- the fixture every test program uses ---- */

struct standin_env {
	int gpu;
	int probe;
};

/*
 * Fresh modules for each test (counters start at zero): the stand-in with @params, then the probe.
 * Skips loudly when the modules were not built.
 */
#define STANDIN_SETUP(env, params) do { \
	(env)->gpu = -1; \
	(env)->probe = -1; \
	if (!module_file_exists(STANDIN) || !module_file_exists("p2p_probe")) \
		SKIP(return, "%s/{" STANDIN ",p2p_probe}.ko missing: run make standins", \
		     modules_dir()); \
	mod_unload("p2p_probe"); \
	ASSERT_EQ(0, mod_load(STANDIN, params)); \
	ASSERT_EQ(0, mod_load("p2p_probe", "")); \
	(env)->gpu = gpu_open(); \
	ASSERT_LE(0, (env)->gpu) TH_LOG("open %s: %s", NVP2P_STANDIN_DEVICE, strerror(-(env)->gpu)); \
	(env)->probe = open(P2P_PROBE_DEVICE, O_RDWR | O_CLOEXEC); \
	ASSERT_LE(0, (env)->probe) TH_LOG("open %s: %s", P2P_PROBE_DEVICE, strerror(errno)); \
	ASSERT_EQ(0, gpu_counter("live_allocations")) TH_LOG("no debugfs counters?"); \
} while (0)

/*
 * Close everything (process exit frees what is left, as for CUDA), then every live counter must be
 * zero: whatever the test pinned or mapped it must have given back. Then unload.
 */
#define STANDIN_TEARDOWN(env) do { \
	char why[256]; \
	if ((env)->probe >= 0) \
		close((env)->probe); \
	if ((env)->gpu >= 0) \
		close((env)->gpu); \
	if (module_loaded(STANDIN)) \
		EXPECT_EQ(0, gpu_leaks(why, sizeof(why))) TH_LOG("live objects left: %s", why); \
	EXPECT_EQ(0, mod_unload("p2p_probe")); \
	EXPECT_EQ(0, mod_unload(STANDIN)); \
} while (0)

#endif /* STANDIN_TEST_H */
