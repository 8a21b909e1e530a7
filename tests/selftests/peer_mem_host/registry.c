// SPDX-License-Identifier: GPL-2.0
/*
 * The host's registry of peer-memory clients: /sys/kernel/mm/memory_peers/<name>/ and its files,
 * duplicate names, the variant without sysfs, and which clients the host treats as "ex".
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

static const char *const stat_files[] = {
	"num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages",
	"num_reg_bytes", "num_dereg_bytes", "num_free_callbacks",
};

static int file_mode(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -errno : (int)(st.st_mode & 07777);
}

/* The host's view of its clients, one line each: "name invalidating=N unmap_on_invalidate=N ...". */
static int host_client_line(const char *name, char *line, size_t size)
{
	char buf[4096], *p, *save = NULL;

	if (read_text(PMH_DEBUGFS "/clients", buf, sizeof(buf)))
		return -1;
	for (p = strtok_r(buf, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(p, name, strlen(name)) && p[strlen(name)] == ' ') {
			snprintf(line, size, "%s", p);
			return 0;
		}
	}
	return -1;
}

TEST_F_TIMEOUT(pmh, memory_peers_directory, 120)
{
	char path[256], text[64];
	size_t i;

	LOAD("", "names=alpha version=7.5.1");
	ASSERT_TRUE(path_exists(MEMORY_PEERS "/alpha"));
	ASSERT_EQ(0, read_text(MEMORY_PEERS "/alpha/version", text, sizeof(text)));
	/* The ex flag in the version's last byte is not part of the string. */
	ASSERT_STREQ("7.5.1", text);
	ASSERT_EQ(0444, file_mode(MEMORY_PEERS "/alpha/version"));
	for (i = 0; i < sizeof(stat_files) / sizeof(stat_files[0]); i++) {
		snprintf(path, sizeof(path), MEMORY_PEERS "/alpha/%s", stat_files[i]);
		ASSERT_EQ(0444, file_mode(path)) TH_LOG("%s", path);
		ASSERT_EQ(0, read_number(path)) TH_LOG("%s", path);
		/* Read-only even for root. */
		ASSERT_NE(0, write_text(path, "5")) TH_LOG("%s", path);
	}
	ASSERT_EQ(1, pmh_counter("registered_clients"));

	/* Unregistering removes the client's directory, and the last one memory_peers itself. */
	close(self->gpu);
	self->gpu = -1;
	ASSERT_EQ(0, mod_unload_wait(CLIENT_MOD));
	ASSERT_FALSE(path_exists(MEMORY_PEERS "/alpha"));
	ASSERT_FALSE(path_exists(MEMORY_PEERS));
	ASSERT_EQ(0, pmh_counter("registered_clients"));
}

TEST_F_TIMEOUT(pmh, duplicate_name_refused, 120)
{
	char text[1024];

	LOAD("", "names=dup,other,dup tolerate_register_failure=1");
	ASSERT_EQ(0, read_text(TC_DEBUGFS "/clients", text, sizeof(text)));
	ASSERT_NE(NULL, strstr(text, "0 dup registered=1")) TH_LOG("%s", text);
	ASSERT_NE(NULL, strstr(text, "1 other registered=1")) TH_LOG("%s", text);
	/* ib_register_peer_memory_client returned NULL for the second "dup". */
	ASSERT_NE(NULL, strstr(text, "2 dup registered=0")) TH_LOG("%s", text);
	ASSERT_EQ(2, pmh_counter("registered_clients"));
	ASSERT_TRUE(path_exists(MEMORY_PEERS "/dup"));
	ASSERT_TRUE(path_exists(MEMORY_PEERS "/other"));
}

TEST_F_TIMEOUT(pmh, duplicate_name_fails_load_cleanly, 120)
{
	const char *why;

	/* Without tolerance the client's init fails and unregisters what it registered. */
	LOAD("", NULL);
	if (!module_available(CLIENT_KO) || !module_available(STANDIN_KO))
		SKIP(return, "no " CLIENT_KO " or " STANDIN_KO);
	if (!mod_loaded(STANDIN_MOD)) {
		ASSERT_EQ(0, mod_load(STANDIN_KO, ""));
	}
	ASSERT_EQ(-EINVAL, mod_load(CLIENT_KO, "names=same,same"));
	ASSERT_FALSE(mod_loaded(CLIENT_MOD));
	ASSERT_EQ(0, pmh_counter("registered_clients"));
	ASSERT_FALSE(path_exists(MEMORY_PEERS "/same"));
	/* And the name is free again (with a fresh host, which our open file would hold). */
	close(self->pmh);
	self->pmh = -1;
	ASSERT_EQ(0, env_load("", "names=same", &why)) TH_LOG("%s", why);
	ASSERT_TRUE(path_exists(MEMORY_PEERS "/same"));
}

TEST_F_TIMEOUT(pmh, sysfs_off_variant, 120)
{
	struct pmh_reg_mr reg;
	char text[1024];
	__u64 handle;
	void *va;

	/* The ib_uverbs variant: no memory_peers, and nothing refuses a duplicate name. */
	LOAD("sysfs=0", "names=dup,dup tolerate_register_failure=1");
	ASSERT_FALSE(path_exists(MEMORY_PEERS));
	ASSERT_EQ(0, read_text(TC_DEBUGFS "/clients", text, sizeof(text)));
	ASSERT_NE(NULL, strstr(text, "0 dup registered=1")) TH_LOG("%s", text);
	ASSERT_NE(NULL, strstr(text, "1 dup registered=1")) TH_LOG("%s", text);
	ASSERT_EQ(2, pmh_counter("registered_clients"));

	/* Registration works without sysfs; the first of the two gets asked and claims. */
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("dup", reg.client);
	ASSERT_EQ(1, tc_counter(0, "acquire_claimed"));
	ASSERT_EQ(0, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, ex_client_recognition, 120)
{
	char line[256];

	/*
	 * a: ex with INVALIDATE_UNMAPS; b: version[15] == 0; c: ex_size 0 (does not cover flags);
	 * d: ex without the flag; only a is one whose invalidation the host leaves to the client.
	 */
	LOAD("", "names=a,b,c,d ex=1,0,1,1 ex_size=-1,-1,0,-1 ex_flags=1,1,1,0");
	ASSERT_EQ(0, host_client_line("a", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=1 unmap_on_invalidate=1")) TH_LOG("%s", line);
	ASSERT_EQ(0, host_client_line("b", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=1 unmap_on_invalidate=0")) TH_LOG("%s", line);
	ASSERT_EQ(0, host_client_line("c", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=1 unmap_on_invalidate=0")) TH_LOG("%s", line);
	ASSERT_EQ(0, host_client_line("d", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=1 unmap_on_invalidate=0")) TH_LOG("%s", line);
}

TEST_F_TIMEOUT(pmh, ex_ignored_by_4_9_host, 120)
{
	char line[256];

	LOAD("ex_support=0", "names=a,p invalidating=1,0");
	ASSERT_EQ(0, host_client_line("a", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=1 unmap_on_invalidate=0")) TH_LOG("%s", line);
	/* Without the invalidate out-parameter a client is not an invalidating one. */
	ASSERT_EQ(0, host_client_line("p", line, sizeof(line)));
	ASSERT_NE(NULL, strstr(line, "invalidating=0 unmap_on_invalidate=0")) TH_LOG("%s", line);
}

TEST_F_TIMEOUT(pmh, clients_in_registration_order, 120)
{
	char text[1024];
	char *z, *y, *x;

	LOAD("", "names=zeta,yota,xi");
	ASSERT_EQ(0, read_text(PMH_DEBUGFS "/clients", text, sizeof(text)));
	z = strstr(text, "zeta ");
	y = strstr(text, "yota ");
	x = strstr(text, "xi ");
	ASSERT_TRUE(z && y && x) TH_LOG("%s", text);
	ASSERT_TRUE(z < y && y < x) TH_LOG("%s", text);
}

TEST_HARNESS_MAIN
