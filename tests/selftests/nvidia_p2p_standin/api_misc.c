// SPDX-License-Identifier: GPL-2.0
/*
 * The rest of nv-p2p.h in the NVIDIA P2P stand-in: every function is exported by the module, the
 * legacy and rsync ones behave as nvidia.ko's do on a machine without IBM NPUs, the no-op frees
 * return 0; and the module's parameters and debugfs files are where tests expect them.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(misc) {
	struct standin_env env;
};

FIXTURE_SETUP(misc)
{
	STANDIN_SETUP(&self->env, "");
}

FIXTURE_TEARDOWN(misc)
{
	STANDIN_TEARDOWN(&self->env);
}

static const char *const nv_p2p_functions[] = {
	"nvidia_p2p_init_mapping", "nvidia_p2p_destroy_mapping", "nvidia_p2p_get_pages",
	"nvidia_p2p_get_pages_persistent", "nvidia_p2p_dma_map_pages", "nvidia_p2p_dma_unmap_pages",
	"nvidia_p2p_put_pages", "nvidia_p2p_put_pages_persistent", "nvidia_p2p_free_page_table",
	"nvidia_p2p_free_dma_mapping", "nvidia_p2p_register_rsync_driver",
	"nvidia_p2p_unregister_rsync_driver", "nvidia_p2p_get_rsync_registers",
	"nvidia_p2p_put_rsync_registers",
};
#define N_FUNCS (sizeof(nv_p2p_functions) / sizeof(nv_p2p_functions[0]))

/* Every nv-p2p.h function is a global text symbol of the module (p2p_probe links to all). */
TEST_F(misc, every_function_exported)
{
	bool seen[N_FUNCS] = { false };
	char line[512], sym[256], mod[128], type;
	unsigned long long addr;
	FILE *f = fopen("/proc/kallsyms", "r");
	size_t i;

	ASSERT_NE(NULL, f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx %c %255s [%127[^]]]", &addr, &type, sym, mod) != 4)
			continue;
		if (strcmp(mod, STANDIN))
			continue;
		for (i = 0; i < N_FUNCS; i++)
			if (!strcmp(sym, nv_p2p_functions[i]) && (type == 'T' || type == 't'))
				seen[i] = true;
	}
	fclose(f);
	for (i = 0; i < N_FUNCS; i++) {
		if (!seen[i])
			TH_LOG("%s not in %s", nv_p2p_functions[i] ? nv_p2p_functions[i] : "", STANDIN);
		EXPECT_TRUE(seen[i]);
	}
	/* The probe resolved them from this module: it holds a reference on it. */
	EXPECT_LE(1, read_number("/sys/module/" STANDIN "/refcnt"));
}

TEST_F(misc, legacy_and_rsync_functions)
{
	struct p2p_probe_misc r;

	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_MISC, &r));
	EXPECT_EQ(-KERN_ENOTSUPP, r.init_mapping);
	EXPECT_EQ(-KERN_ENOTSUPP, r.destroy_mapping);
	EXPECT_EQ(0, r.free_page_table);
	EXPECT_EQ(0, r.free_dma_mapping);
	EXPECT_EQ(-EINVAL, r.register_rsync_null);
	EXPECT_EQ(0, r.register_rsync);
	EXPECT_EQ(-EBUSY, r.register_rsync_again);
	EXPECT_EQ(-ENODEV, r.get_rsync_registers);
	/* Unregistered again: a second round behaves the same. */
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_MISC, &r));
	EXPECT_EQ(0, r.register_rsync);
}

TEST_F(misc, parameters_and_debugfs)
{
	static const char *const files[] = {
		"counters", "inject", "race", "free_callback_delay_ms", "live_pins",
		"live_page_tables", "live_dma_mappings", "live_allocations", "live_bar1_extents",
		"bar1_pinned_bytes", "free_callbacks", "peer_mismatch_warnings", "topology_refusals",
		"stale_put_pages", "foreign_put_pages", "stale_dma_unmaps", "leaked_by_driver",
		"callback_reentries", "race_gate_timeouts", "unregisters",
	};
	static const struct { const char *name, *value; } defaults[] = {
		{ "generation", "550" }, { "page_table_version", "0x00010002" },
		{ "bar1_reserve_mib", "36" }, { "bar1_size_mib", "0" },
		{ "grdma_pci_topo_check_override", "0" }, { "passthrough_vm", "N" },
		{ "p2p_unsupported_chipset", "N" },
	};
	static const char *const bad_loads[] = {
		"page_table_version=3", "generation=560", "grdma_pci_topo_check_override=3",
	};
	char v[64], counters[4096];
	size_t i;

	for (i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		char p[128];

		snprintf(p, sizeof(p), STANDIN_PARAMS "%s", defaults[i].name);
		ASSERT_EQ(0, read_text(p, v, sizeof(v))) TH_LOG("%s", p);
		EXPECT_STREQ(defaults[i].value, v) TH_LOG("%s", defaults[i].name);
	}
	/* The page table layout follows the generation unless page_table_version says otherwise. */
	ASSERT_EQ(0, set_param("generation", "580"));
	ASSERT_EQ(0, read_text(STANDIN_PARAMS "page_table_version", v, sizeof(v)));
	EXPECT_STREQ("0x00020000", v);
	EXPECT_NE(0, set_param("generation", "575"));
	ASSERT_EQ(0, set_param("generation", "550"));
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char p[128];

		snprintf(p, sizeof(p), GPU_DEBUGFS "/%s", files[i]);
		EXPECT_EQ(0, access(p, R_OK)) TH_LOG("%s", p);
	}
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/counters", counters, sizeof(counters)));
	EXPECT_NE(NULL, strstr(counters, "live_pins 0\n"));
	EXPECT_NE(NULL, strstr(counters, "callback_reentries 0\n"));
	/* Values the module does not know are refused at load. */
	close(self->env.probe);
	close(self->env.gpu);
	self->env.probe = self->env.gpu = -1;
	ASSERT_EQ(0, mod_unload("p2p_probe"));
	ASSERT_EQ(0, mod_unload(STANDIN));
	for (i = 0; i < sizeof(bad_loads) / sizeof(bad_loads[0]); i++) {
		EXPECT_NE(0, sh("insmod %s/%s.ko %s", modules_dir(), STANDIN, bad_loads[i]))
			TH_LOG("%s", bad_loads[i]);
		EXPECT_FALSE(module_loaded(STANDIN));
		mod_unload(STANDIN);
	}
	/* Loaded again for the teardown's checks. */
	EXPECT_EQ(0, mod_load(STANDIN, ""));
}

TEST_HARNESS_MAIN
