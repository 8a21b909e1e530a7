# SPDX-License-Identifier: GPL-2.0
#
# peermem-rs: entry points for people and CI. (Kbuild, not this file, describes the module to kbuild.)
#
#   make demo      set up everything, build, and show GPUDirect RDMA working in the test VM
#   make check     run every test: cargo test on the host and the kselftests in the VM (CI runs this)
#   make           build peermem_rs.ko against the test kernel
#   make KDIR=/lib/modules/$(uname -r)/build NVIDIA_SRC=... PEER_MEM_INC=...
#                  build it for a real kernel instead
#   make vm-shell  a shell in the test VM with everything loaded into /payload
#
# The toolchain, sources and kernel builds live in $(PEERMEM_CACHE), outside the repository.

SHELL := /bin/bash
PEERMEM_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/peermem-rs
export PEERMEM_CACHE

REPO := $(CURDIR)
BUILD := $(REPO)/.build

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
else
KMAKE = $(MAKE) -C $(KDIR) $(if $(LLVM),LLVM=$(LLVM))
endif

MODULE_ARGS = M=$(REPO) NVIDIA_SRC=$(NVIDIA_SRC) PEER_MEM_INC=$(PEER_MEM_INC) \
	$(if $(KBUILD_EXTRA_SYMBOLS),KBUILD_EXTRA_SYMBOLS="$(KBUILD_EXTRA_SYMBOLS)") $(if $(CLIPPY),CLIPPY=1)

.PHONY: all module standins setup kernel check demo vm-shell cargo-test clean

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
	+$(KMAKE) $(MODULE_ARGS) modules

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

cargo-test:
	cargo test --workspace

clean:
ifdef TEST_ENV
	-$(KMAKE) $(MODULE_ARGS) clean
	-for s in $(STANDINS); do [ -f tests/standins/$$s/Kbuild ] && $(KMAKE) M=$(REPO)/tests/standins/$$s clean; done
else
	$(KMAKE) $(MODULE_ARGS) clean
endif
	rm -rf $(BUILD)
