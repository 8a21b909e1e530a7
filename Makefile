# SPDX-License-Identifier: GPL-2.0
#
# peermem-rs: entry points for people and CI. (Kbuild, not this file, describes the module to kbuild.)
#
#   make demo      set up everything, build, and show GPUDirect RDMA working in the test VM
#   make check     run every test: cargo test on the host and the kselftests in the VM (CI runs this)
#   make           build peermem_rs.ko against the test kernel
#   make DROPIN=1  build the drop-in, nvidia-peermem.ko (module nvidia_peermem), instead (the
#                  default for KDIR=... and every install goal; DROPIN=0 there for peermem_rs.ko)
#   make vm-shell  a shell in the test VM with everything loaded into /payload
#   make races     every race window against peermem-rs and NVIDIA's nvidia-peermem, crashes and
#                  deadlocks included (a boot per crash; not part of make check): docs/race-windows.md
#   make stress    the long stress run (a target of 1,000,000 operations, registrations and their
#                  ends, about half a million registrations, racing frees and foreign
#                  deregistrations) against peermem-rs, and against nvidia-peermem in a boot of its
#                  own; keeps its summary in docs/stress-runs/ and shows it in docs/stress.md
#                  (tests/selftests/stress/stress.py; not part of make check)
#   make bench     registration latency, throughput and memory of peermem-rs against NVIDIA's
#                  nvidia-peermem on a non-debug kernel, cost model off and on, in five boots or
#                  more (about 8 minutes each); writes BENCHMARKS.md with every boot's records in
#                  BENCHMARKS.data.xz (tests/bench/bench.py, BENCH_ARGS; not part of make check)
#
# On a GPU node (see "Installing on a GPU node" in README.md):
#   make KDIR=/lib/modules/$(uname -r)/build     build for a real kernel; packaging/configure.sh finds
#                                                and checks rustc, the NVIDIA tree and MLNX_OFED
#   sudo make dkms-install [MODULES_LOAD=1]      install with DKMS (rebuilt on every kernel update)
#   sudo make dkms-uninstall
#   sudo make install [MODULES_LOAD=1]           install without DKMS, for one kernel
#   sudo make uninstall
# install, uninstall and the dkms targets default to the running kernel, and all of them to the
# drop-in nvidia-peermem.ko; DROPIN=0 on any of them builds and installs peermem_rs.ko instead
# (README: "Drop-in").
#
# The toolchain, sources and kernel builds of the test environment live in $(PEERMEM_CACHE), outside
# the repository.

SHELL := /bin/bash
PEERMEM_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/peermem-rs
export PEERMEM_CACHE

REPO := $(CURDIR)
BUILD := $(REPO)/.build
# The one version of peermem-rs: [workspace.package] in Cargo.toml.
VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' $(REPO)/Cargo.toml)

# Installing is for a real kernel: the running one unless KDIR says otherwise.
INSTALL_GOALS := install modules_install uninstall install-support uninstall-support dkms-install dkms-uninstall

# DROPIN=1: the module is named nvidia_peermem (nvidia-peermem.ko), where applications look for
# GPUDirect RDMA on kernels whose peer-memory host has no memory_peers directory (Kbuild says why).
# It is the default for a real kernel (KDIR given), every install goal and the DKMS source tree, so
# that what an operator installs is what NCCL, UCX, NVSHMEM and UCC find; DROPIN=0 builds and
# installs it as peermem_rs instead (side by side with NVIDIA's module, for comparison). The test
# environment's own build (`make` without KDIR) stays peermem_rs, the name the kselftests load.
ifneq ($(KDIR)$(filter $(INSTALL_GOALS) dkms-source,$(MAKECMDGOALS)),)
DROPIN ?= 1
endif
ifeq ($(DROPIN),1)
MODNAME := nvidia_peermem
KO := nvidia-peermem
else
MODNAME := peermem_rs
KO := peermem_rs
endif

ifneq ($(filter $(INSTALL_GOALS),$(MAKECMDGOALS)),)
KDIR ?= /lib/modules/$(shell uname -r)/build
endif

ifeq ($(KDIR),)
# The test environment: the cached test kernel, built and used inside the trixie build root, the
# NVIDIA open-module headers of Debian's package and the peer-memory host stand-in's header.
TEST_ENV := 1
IN_ROOT := $(REPO)/tests/infra/in-root
KDIR_CMD := $(REPO)/tests/infra/build-kernel.sh
LLVM ?= -19
NVIDIA_SRC ?= $(PEERMEM_CACHE)/work/src/nvidia-open-kernel-source/modules/nvidia-open-kernel/nvidia
PEER_MEM_INC ?= $(REPO)/tests/standins/include
KMAKE = $(IN_ROOT) $(MAKE) -C $$($(KDIR_CMD)) LLVM=$(LLVM)
# The test-only stand-ins for nvidia.ko and the ib_core peer-memory host (tests/standins/), in build
# order: later ones link against the symbols of earlier ones.
STANDINS := nvidia_p2p peer_mem_host p2p_probe test_client
STANDIN_SYMVERS = $(foreach s,$(STANDINS),$(wildcard $(REPO)/tests/standins/$(s)/Module.symvers))
KBUILD_EXTRA_SYMBOLS ?= $(STANDIN_SYMVERS)
MODULE_ARGS = M=$(REPO) NVIDIA_SRC=$(NVIDIA_SRC) PEER_MEM_INC=$(PEER_MEM_INC) \
	$(if $(KBUILD_EXTRA_SYMBOLS),KBUILD_EXTRA_SYMBOLS="$(KBUILD_EXTRA_SYMBOLS)") $(if $(CLIPPY),CLIPPY=1) \
	$(if $(filter 1,$(DROPIN)),PEERMEM_DROPIN=1) $(if $(PEERMEM_OFED_RELEASE),PEERMEM_OFED_RELEASE=$(PEERMEM_OFED_RELEASE))
else
# A real kernel. When its headers lack the Rust metadata (Debian's), packaging/rust-metadata.sh
# regenerates it from the distribution's source package, verifies it against the kernel's
# Module.symvers and gives the tree to build against instead of KDIR (cached per release in
# PEERMEM_RUST_METADATA_CACHE, default $(PEERMEM_CACHE)/rust-metadata); otherwise KDIR is used as is.
# packaging/configure.sh finds and checks what the build needs for it (the rustc that
# built it, the NVIDIA open-module tree, MLNX_OFED/DOCA-OFED, their Module.symvers) and writes it to
# $(CONFIG_MK); every kbuild call then runs in a second make that reads it (the kbuild-% rule).
CONFIG_MK := $(BUILD)/config.mk
KREL := $(or $(PEERMEM_KERNELRELEASE),$(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null),$(shell uname -r))
ifdef PEERMEM_CONFIG
include $(PEERMEM_CONFIG)
# LLVM and RUSTC are given explicitly: they override what the caller passed (dkms adds LLVM=1).
KMAKE = $(MAKE) -C $(PEERMEM_KDIR) LLVM=$(PEERMEM_LLVM) RUSTC=$(PEERMEM_RUSTC) BINDGEN=$(PEERMEM_BINDGEN)
MODULE_ARGS = M=$(REPO) NVIDIA_SRC=$(PEERMEM_NVIDIA_SRC) PEER_MEM_INC=$(PEERMEM_PEER_MEM_INC) \
	KBUILD_EXTRA_SYMBOLS="$(PEERMEM_EXTRA_SYMBOLS)" $(if $(PEERMEM_MODPOST_WARN),KBUILD_MODPOST_WARN=1) \
	$(if $(CLIPPY),CLIPPY=1) $(if $(filter 1,$(DROPIN)),PEERMEM_DROPIN=1) \
	$(if $(PEERMEM_OFED_RELEASE),PEERMEM_OFED_RELEASE=$(PEERMEM_OFED_RELEASE))
endif
endif

.PHONY: all module standins setup kernel check demo vm-shell races stress bench cargo-test clean \
	install modules_install uninstall install-support uninstall-support \
	dkms-source dkms-install dkms-uninstall

all: module

setup:
ifdef TEST_ENV
	@$(REPO)/tests/infra/setup-toolchain.sh
endif

kernel: setup
ifdef TEST_ENV
	@$(KDIR_CMD) >/dev/null
endif

module: kernel $(if $(TEST_ENV),standins)
ifdef TEST_ENV
	+$(KMAKE) $(MODULE_ARGS) modules
else
	+@kdir=$$($(REPO)/packaging/rust-metadata.sh --kdir $(KDIR) --kernelrelease $(KREL)) && \
		$(REPO)/packaging/configure.sh --kdir "$$kdir" --kernelrelease $(KREL) --out $(CONFIG_MK)
	+@$(MAKE) --no-print-directory PEERMEM_CONFIG=$(CONFIG_MK) kbuild-modules
endif

# kbuild-TARGET: a kbuild target of the module for the configured real kernel.
kbuild-%:
	$(if $(PEERMEM_CONFIG),,$(error kbuild-$* is internal: use make module / install))
	+$(KMAKE) $(MODULE_ARGS) $*

# Each stand-in is built against the symbols of those before it.
standins: kernel
ifdef TEST_ENV
	+@set -e; syms=""; for s in $(STANDINS); do \
		d=$(REPO)/tests/standins/$$s; [ -f $$d/Kbuild ] || continue; \
		$(KMAKE) -s M=$$d PEER_MEM_INC=$(PEER_MEM_INC) NVIDIA_SRC=$(NVIDIA_SRC) \
			KBUILD_EXTRA_SYMBOLS="$$syms" modules; \
		syms="$$syms $$d/Module.symvers"; \
	done
endif

check: setup
	@$(REPO)/tests/run_tests.py

demo: setup
	@$(REPO)/tests/run_tests.py --demo

vm-shell: setup
	@$(REPO)/tests/run_tests.py --shell

races: setup
	@$(REPO)/tests/run_tests.py --build-only
	@$(REPO)/tests/selftests/races/windows.py --write-doc

stress: setup
	@$(REPO)/tests/run_tests.py --build-only
	@$(REPO)/tests/selftests/stress/stress.py --write-doc $(STRESS_ARGS)

bench: setup
	@$(REPO)/tests/bench/bench.py $(BENCH_ARGS)

cargo-test:
	cargo test --workspace

clean:
ifdef TEST_ENV
	-$(KMAKE) $(MODULE_ARGS) clean
	-for s in $(STANDINS); do [ -f tests/standins/$$s/Kbuild ] && $(KMAKE) M=$(REPO)/tests/standins/$$s clean; done
else
	$(MAKE) -C $(KDIR) M=$(REPO) clean
endif
	rm -rf $(BUILD)

# --- installing on GPU nodes ---------------------------------------------------------------------
# DESTDIR installs into a staging root. The module goes to /lib/modules/<kernel>/updates (DKMS:
# updates/dkms), which depmod prefers to every other directory, so the drop-in (the default) is what
# `modprobe nvidia-peermem` loads even where the NVIDIA driver package installed its own
# nvidia-peermem.ko. The modprobe.d snippet loads the NVIDIA driver and ib_core first and explains a
# failed load (packaging/peermem-rs-explain); MODULES_LOAD=1 also loads the module at boot.
MODPROBE_CONF := /lib/modprobe.d/peermem-rs.conf
MODULES_LOAD_CONF := /etc/modules-load.d/peermem-rs.conf
EXPLAIN := /usr/sbin/peermem-rs-explain
DKMS ?= dkms
DKMS_SRC_TREE ?= /usr/src
# Extra dkms options, e.g. --dkmstree/--installtree (the packaging tests use them).
DKMS_ARGS ?=
DKMS_SRC := $(DESTDIR)$(DKMS_SRC_TREE)/peermem-rs-$(VERSION)
# DKMS installs a module only if it is newer than one of the same name already in the kernel's
# tree, and nvidia-peermem.ko of driver 550.x is "newer" than peermem-rs 0.x. The drop-in is
# meant to replace it: this file, which DKMS reads (its modules_to_force_install), lets DKMS skip
# that comparison for peermem-rs, also when it installs for a new kernel on its own (AUTOINSTALL).
DKMS_FORCE := /usr/share/dkms/modules_to_force_install/peermem-rs
# Without DKMS, nothing moves another nvidia-peermem.ko out of the way, and depmod has no order
# between two of them below updates/ (NVIDIA's DKMS package puts its own in updates/dkms): this
# depmod.d rule makes it take the drop-in's, in updates/. (depmod matches the file's name here.)
DEPMOD_CONF := /etc/depmod.d/peermem-rs.conf
DEPMOD = if [ -f $(DESTDIR)/lib/modules/$(KREL)/modules.dep ] && command -v depmod >/dev/null; then \
	depmod -a $(if $(DESTDIR),-b $(DESTDIR) $$([ -d $(DESTDIR)/etc/depmod.d ] && echo -C $(DESTDIR)/etc/depmod.d)) $(KREL); fi
# A snippet of packaging/ with the module's name filled in.
SNIPPET = sed 's/@MODULE@/$(MODNAME)/g' $(REPO)/packaging/$(1) > $(2).tmp && \
	install -D -m 0644 $(2).tmp $(2) && rm -f $(2).tmp

modules_install: module
	+@$(MAKE) --no-print-directory PEERMEM_CONFIG=$(CONFIG_MK) kbuild-modules_install \
		INSTALL_MOD_PATH=$(DESTDIR) INSTALL_MOD_DIR=updates

install: modules_install install-support
ifeq ($(DROPIN),1)
	mkdir -p $(DESTDIR)$(dir $(DEPMOD_CONF))
	echo 'override $(KO) * updates' > $(DESTDIR)$(DEPMOD_CONF)
	@$(DEPMOD)
endif

install-support:
	mkdir -p $(DESTDIR)$(dir $(MODPROBE_CONF))
	$(call SNIPPET,peermem-rs.modprobe.conf,$(DESTDIR)$(MODPROBE_CONF))
	install -D -m 0755 $(REPO)/packaging/peermem-rs-explain $(DESTDIR)$(EXPLAIN)
ifeq ($(MODULES_LOAD),1)
	mkdir -p $(DESTDIR)$(dir $(MODULES_LOAD_CONF))
	$(call SNIPPET,peermem-rs.modules-load.conf,$(DESTDIR)$(MODULES_LOAD_CONF))
endif

uninstall: uninstall-support
	rm -f $(DESTDIR)/lib/modules/$(KREL)/updates/$(KO).ko* $(DESTDIR)$(DEPMOD_CONF)
	@$(DEPMOD)

uninstall-support:
	rm -f $(DESTDIR)$(MODPROBE_CONF) $(DESTDIR)$(EXPLAIN) $(DESTDIR)$(MODULES_LOAD_CONF)

# The DKMS source tree: what the build needs (no tests, no host crates), with dkms.conf made from
# packaging/dkms.conf.in, Cargo.toml's version and the module name (PEERMEM_DROPIN in dkms.conf).
dkms-source:
	@[ -n "$(VERSION)" ] || { echo "no version in $(REPO)/Cargo.toml" >&2; exit 1; }
	rm -rf $(DKMS_SRC)
	mkdir -p $(DKMS_SRC)
	cd $(REPO) && cp --parents Makefile Kbuild Cargo.toml README.md \
		bindings/bindings.h bindings/bindgen.args bindings/shim.c bindings/shim.h \
		$$(find src -name '*.rs') packaging/configure.sh packaging/rust-metadata.sh packaging/peermem-rs-explain \
		packaging/peermem-rs.modprobe.conf packaging/peermem-rs.modules-load.conf $(DKMS_SRC)/
	sed -e 's/@VERSION@/$(VERSION)/' -e 's/@DROPIN@/$(if $(filter 1,$(DROPIN)),1,0)/' \
		$(REPO)/packaging/dkms.conf.in > $(DKMS_SRC)/dkms.conf

# Installing the other module name over an installed one: DKMS must first remove the old one with
# the dkms.conf that names its module, before dkms-source replaces it.
dkms-install: install-support
	@if [ -f $(DKMS_SRC)/dkms.conf ] && \
	   ! grep -qx 'PEERMEM_DROPIN="$(if $(filter 1,$(DROPIN)),1,0)"' $(DKMS_SRC)/dkms.conf; then \
		echo "peermem-rs $(VERSION) is in DKMS under the other module name: removing it first"; \
		$(DKMS) remove -m peermem-rs -v $(VERSION) --all --sourcetree $(DESTDIR)$(DKMS_SRC_TREE) $(DKMS_ARGS) || true; \
	fi
	+@$(MAKE) --no-print-directory dkms-source
ifeq ($(DROPIN),1)
	mkdir -p $(dir $(DESTDIR)$(DKMS_FORCE))
	echo peermem-rs_version-override > $(DESTDIR)$(DKMS_FORCE)
else
	rm -f $(DESTDIR)$(DKMS_FORCE)
endif
	$(DKMS) status -m peermem-rs -v $(VERSION) $(DKMS_ARGS) | grep -q . || \
		$(DKMS) add -m peermem-rs -v $(VERSION) --sourcetree $(DESTDIR)$(DKMS_SRC_TREE) $(DKMS_ARGS)
	$(DKMS) install -m peermem-rs -v $(VERSION) -k $(KREL) --sourcetree $(DESTDIR)$(DKMS_SRC_TREE) $(DKMS_ARGS)

# dkms remove puts back what DKMS archived at install (NVIDIA's nvidia-peermem.ko for the drop-in).
dkms-uninstall: uninstall-support
	-$(DKMS) remove -m peermem-rs -v $(VERSION) --all --sourcetree $(DESTDIR)$(DKMS_SRC_TREE) $(DKMS_ARGS)
	rm -rf $(DKMS_SRC) $(DESTDIR)$(DKMS_FORCE)
