# SPDX-License-Identifier: GPL-2.0
#
# vamr: out-of-tree build of vamr.ko against a Rust-enabled kernel tree.
#
#   make help            this list
#   make [KDIR=...]      build vamr.ko (KDIR defaults to the running kernel's build tree;
#                        the test kernel's tree is what `make kernel` prints)
#   make clean           remove build outputs
#   make clippy          build with CLIPPY=1 (Rust lints as the kernel runs them)
#   make rustfmtcheck    check Rust formatting with the kernel's rustfmt settings
#   make rustfmt         reformat the Rust sources
#   make lint            the longest function in src/ (fails over 80 lines), rustfmtcheck, clippy
#   make selftests       build the C selftests in tests/selftests (needs KDIR for the harness)
#   make kernel          build (or reuse from cache) the test kernel; prints its path
#   make run             the main job: build everything, boot the test kernel, run the demo
#   make test            build everything and run every test in the guest
#   make install         install vamr.ko (modules_install: updates/, INSTALL_MOD_PATH and
#                        INSTALL_MOD_DIR honoured), <misc/vamr.h> in $(DESTDIR)$(PREFIX)/include,
#                        udev/60-vamr.rules in $(DESTDIR)$(UDEVRULESDIR), vamrctl in
#                        $(DESTDIR)$(PREFIX)/bin and libvamr-preload.so in $(DESTDIR)$(PREFIX)/lib
#                        (PREFIX=/usr/local, UDEVRULESDIR=/etc/udev/rules.d)
#   make install-rxe     build (scripts/build-rxe.sh) and install the patched rdma_rxe
#   make install-siw     build (scripts/build-swdrv.sh KDIR siw) and install the patched siw
#                        (updates/, which modprobe prefers to the stock one)
#   make vamrctl         build tools/vamrctl/vamrctl
#   make preload         build tools/preload/libvamr-preload.so (LD_PRELOAD: VA MRs for
#                        unmodified programs, Documentation/va-mr-for-jobs.rst)
#   make dkms-modules    what dkms.conf runs: vamr.ko and the patched rdma_rxe (in build/rxe)
#
# The module must be built by exactly the rustc that built KDIR (else E0514).
# A KDIR built with LLVM (the sanitizer kernel, `scripts/build-kernel.sh --sanitize`)
# records its LLVM= setting in KDIR/.vamr-llvm; it is passed on unless LLVM is given.

KDIR ?= /lib/modules/$(shell uname -r)/build
export KDIR

ifeq ($(origin LLVM),undefined)
KDIR_LLVM := $(shell cat $(KDIR)/.vamr-llvm 2>/dev/null)
ifneq ($(KDIR_LLVM),)
export LLVM := $(KDIR_LLVM)
endif
endif

RUSTC_HOST := $(shell rustc --version 2>/dev/null)
RUSTC_KDIR := $(shell sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"/\1/p' $(KDIR)/.config 2>/dev/null)

PREFIX ?= /usr/local
UDEVRULESDIR ?= /etc/udev/rules.d
VAMR_BUILD ?= $(CURDIR)/build

.PHONY: all help modules check-kdir clean clippy lint rustfmt rustfmtcheck selftests kernel run test \
	install install-modules install-headers install-udev install-tools install-rxe install-siw vamrctl preload dkms-modules

all: modules

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' $(firstword $(MAKEFILE_LIST))

check-kdir:
	@test -f $(KDIR)/Makefile || { echo "error: KDIR=$(KDIR) is not a kernel build tree"; \
		echo "       set KDIR=...; the test kernel's tree is printed by 'make kernel'"; exit 1; }
	@grep -qx 'CONFIG_RUST=y' $(KDIR)/.config 2>/dev/null || { \
		echo "error: $(KDIR) is not built with CONFIG_RUST=y; vamr needs a Rust-enabled kernel tree"; exit 1; }
	@test -f $(KDIR)/rust/libkernel.rmeta || { \
		echo "error: $(KDIR) has no rust/ build artifacts (libkernel.rmeta): a headers-only package"; \
		echo "       cannot build Rust modules; use a fully built tree (make kernel)"; exit 1; }
	@test "$(RUSTC_HOST)" = "$(RUSTC_KDIR)" || { \
		echo "error: rustc mismatch: KDIR was built by '$(RUSTC_KDIR)'"; \
		echo "       but 'rustc' here is '$(RUSTC_HOST)'; the module must be built by the same"; \
		echo "       rustc (another one fails with E0514). Rebuild the kernel: make kernel"; exit 1; }

modules: check-kdir
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

clippy: check-kdir
	$(MAKE) -C $(KDIR) M=$(CURDIR) clean
	$(MAKE) -C $(KDIR) M=$(CURDIR) CLIPPY=1 modules

RUSTFMT_CFG = --edition 2021 --config-path $(KDIR)/.rustfmt.toml

# The crate root pulls in every module, so formatting it covers all of src/.
rustfmtcheck: check-kdir
	rustfmt --check $(RUSTFMT_CFG) src/vamr_main.rs

rustfmt: check-kdir
	rustfmt $(RUSTFMT_CFG) src/vamr_main.rs

# The code-shape checks: no function in src/ over 80 lines (scripts/fn-length.py prints the
# longest), formatting, clippy.
lint: check-kdir
	scripts/fn-length.py --max 80 src/*.rs src/*/*.rs src/*.c
	$(MAKE) rustfmtcheck
	$(MAKE) clippy

selftests:
	$(MAKE) -C tests/selftests KDIR=$(KDIR)

# Removes the module build outputs (with or without a usable KDIR); build/ (tests, guest
# logs, patched rxe) is left to `rm -rf build`.
clean:
	for d in . src tests/kapi tests/mirror; do \
		rm -f $$d/*.o $$d/.*.cmd $$d/*.ko $$d/*.mod $$d/*.mod.c $$d/*.mod.o \
			$$d/Module.symvers $$d/modules.order; \
	done
	$(MAKE) -C tests/selftests clean 2>/dev/null || true
	$(MAKE) -C tests/mirror clean 2>/dev/null || true
	$(MAKE) -C tools/vamrctl clean 2>/dev/null || true
	$(MAKE) -C tools/preload clean 2>/dev/null || true

vamrctl:
	$(MAKE) -C tools/vamrctl

preload:
	$(MAKE) -C tools/preload

# INSTALL_MOD_PATH (a staging root) is honoured by the kernel's modules_install;
# depmod runs there when KDIR has a System.map.
install: install-modules install-headers install-udev install-tools

install-modules: modules
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules_install

install-headers:
	install -D -m 0644 include/uapi/misc/vamr.h $(DESTDIR)$(PREFIX)/include/misc/vamr.h

install-udev:
	install -D -m 0644 udev/60-vamr.rules $(DESTDIR)$(UDEVRULESDIR)/60-vamr.rules

install-tools: vamrctl preload
	install -D -m 0755 tools/vamrctl/vamrctl $(DESTDIR)$(PREFIX)/bin/vamrctl
	install -D -m 0755 tools/preload/libvamr-preload.so $(DESTDIR)$(PREFIX)/lib/libvamr-preload.so

install-rxe: modules
	VAMR_BUILD=$(VAMR_BUILD) scripts/build-rxe.sh $(KDIR)
	$(MAKE) -C $(KDIR) M=$(VAMR_BUILD)/rxe/drivers/infiniband/sw/rxe INSTALL_MOD_DIR=updates \
		modules_install

install-siw: modules
	VAMR_BUILD=$(VAMR_BUILD) scripts/build-swdrv.sh $(KDIR) siw
	$(MAKE) -C $(KDIR) M=$(VAMR_BUILD)/siw/drivers/infiniband/sw/siw INSTALL_MOD_DIR=updates \
		modules_install

# dkms.conf's build: both modules, rdma_rxe under this tree's build/ whatever VAMR_BUILD says.
dkms-modules: modules
	VAMR_BUILD=$(CURDIR)/build scripts/build-rxe.sh $(KDIR)

kernel:
	@scripts/build-kernel.sh

run:
	scripts/run.sh

test:
	scripts/test.sh
