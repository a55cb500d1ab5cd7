# The two commands: `make run` and `make test`. Both install what they need on a
# fresh Debian machine (as root) and are quick when it is already there.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := runc crun conmon catatonit busybox-static skopeo umoci docker-registry \
	containernetworking-plugins libcap-dev iproute2 python3-venv python3-dev gcc apache2-utils zstd \
	openssl etcd-server dbus-daemon
# Trusted delivery's tests sign with the real tools.
APT_PACKAGES += minisign signify-openbsd openssh-client
# The WireGuard tunnel: wireguard-go runs it in user space where the kernel has no module (this machine).
APT_PACKAGES += wireguard-go wireguard-tools
RUN_DIR ?= $(CURDIR)/.run
SAMPLE_IMAGE := build/images/busybox-1.36.oci.tar
# Its own cgroup parent, so the demo never mixes with a kubelet's /kubepods.
DEMO_CGROUP := /edgelet-demo

.PHONY: all deps venv run test test-fast lint fuzz chaos chaos-quick chaos-quick-crun images bench clean-run kube-apiserver bench-peers

all: test

# apt-get update runs once, and only when a package is missing (re-checked when
# the Makefile, and so the package list, changes).
.make/apt.stamp: Makefile
	@mkdir -p .make
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@touch $@

deps: .make/apt.stamp

$(VENV)/.installed: pyproject.toml .make/apt.stamp
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q -U pip
	@$(PY) -m pip install -q -e '.[test]'
	@touch $@

venv: $(VENV)/.installed

$(SAMPLE_IMAGE): $(VENV)/.installed edgelet/testing/images.py
	@mkdir -p $(dir $@)
	$(PY) -m edgelet.testing.images --format oci-archive --name edgelet.local/busybox:1.36 --output $@

images: $(SAMPLE_IMAGE)

# Runs edgelet in the foreground on the samples, with every directory under
# .run/ (not the system defaults). Ctrl-C stops edgelet and leaves the pods
# running, as the kubelet does; `make run` again adopts them.
run: $(VENV)/.installed $(SAMPLE_IMAGE)
	@mkdir -p $(RUN_DIR)/root/images/import
	@cp -u $(SAMPLE_IMAGE) $(RUN_DIR)/root/images/import/
	$(VENV)/bin/edgelet --pod-manifest-path manifests.d \
		--root-dir $(RUN_DIR)/root --run-dir $(RUN_DIR)/run --log-dir $(RUN_DIR)/log \
		--cgroup-root $(DEMO_CGROUP) --hostname-override $$(hostname) -v 1

# Stops the demo pods `make run` left running and removes .run/ entirely.
clean-run: $(VENV)/.installed
	$(PY) -c 'from pathlib import Path; from edgelet.testing.cleanup import cleanup_all; \
		cleanup_all(Path("$(RUN_DIR)"), Path("$(RUN_DIR)/run/runc"), "$(DEMO_CGROUP)")'

# kube-apiserver and kubectl v1.20.2 for the apiserver tests, built once from
# Debian's source package and cached under /var/cache/edgelet-kube (about 3-6
# minutes the first time on a machine, nothing after).
kube-apiserver: .make/apt.stamp
	@tools/kube-apiserver.sh >/dev/null

# The whole suite, then the frozen one-dir build (what the .deb ships) with the
# smoke tests run against it instead of the venv. `make test-binary` (the build,
# skipped when its inputs are unchanged, then its tests) runs beside the suite,
# into build/test-binary.log, shown at the end: both mostly wait (agents on their
# pods, the build on the disk) rather than compute.
# The suite itself runs on TEST_WORKERS pytest-xdist workers (3 by default), a
# whole file to a worker (`--dist loadfile`: a module's shared agent and the
# worker's one apiserver are set up once), the longest files first (in the order
# tests/conftest.py gives them, not xdist's own: most tests per file first, which
# sent the chaos campaign out last, to run alone at the end). Every test
# keeps to its own dirs, cgroup parent, bridge, subnet and ports, so they never
# meet. Two fixed halves took 15-16 min here (over the 15 the project allows)
# with the CPU a third idle; three workers 11-12 (figures in the commit that
# made it the default). TEST_WORKERS=1, or PYTEST_ARGS (paths, -k, -x), runs
# one process.
# The suite starts the agent and the CLI as fresh interpreters thousands of times:
# edgelet's bytecode is compiled once first, as under PYTHONDONTWRITEBYTECODE
# (set in some environments) each would compile what it imports again.
TEST_WORKERS ?= 3
# Not $(MAKE) in the recipe: make would run that line under `make -n test` too.
TEST_MAKE = $(MAKE)
test: $(VENV)/.installed $(VENV)/.build-installed kube-apiserver lint
	@mkdir -p build; export EDGELET_KUBE_BIN=$$(tools/kube-apiserver.sh); \
	$(PY) -m compileall -q edgelet >/dev/null; \
	echo "make test-binary in the background: build/test-binary.log"; \
	$(TEST_MAKE) --no-print-directory test-binary >build/test-binary.log 2>&1 & binary=$$!; \
	if [ "$(TEST_WORKERS)" -gt 1 ] && [ -z "$(PYTEST_ARGS)" ]; then \
		$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests; rc=$$?; \
	else \
		$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	fi; \
	wait $$binary; brc=$$?; echo "--- make test-binary (exit $$brc):"; cat build/test-binary.log; \
	[ $$rc -eq 0 ] && [ $$brc -eq 0 ]

# The gates: the layers of docs/architecture.md (import-linter), the types (mypy), one layout and the lint
# rules of pyproject.toml's [tool.ruff] (`ruff format .` and `ruff check --fix .` apply them).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

# The manifest fuzzer at length: EDGELET_FUZZ_EXAMPLES generated and mutated manifests of each kind
# through decode, admission and build_oci_spec (`make test` runs 150 of each). No per-test timeout:
# 10,000 examples take far longer than the suite's 300 s, and hypothesis would report the timeout as a failure.
FUZZ_EXAMPLES ?= 10000
fuzz: $(VENV)/.installed
	EDGELET_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -p no:cacheprovider --timeout=0 tests/fuzz $(PYTEST_ARGS)

# The chaos campaign (tests/chaos): seeded manifest churn under an agent SIGKILLed at random points and at
# its crash points, invariants checked after every round; then the fault tests (conmon killed, a failing
# runc, a full disk, clock jumps). `make test` runs the quick one (CHAOS_QUICK_KILLS, seed 16) with the
# rest of the suite; `make chaos` runs CHAOS_KILLS. Each prints rounds, kills and invariant violations.
CHAOS_KILLS ?= 200
CHAOS_QUICK_KILLS ?= 20
CHAOS_SEED ?= 16
chaos: $(VENV)/.installed
	EDGELET_CHAOS_KILLS=$(CHAOS_KILLS) EDGELET_CHAOS_SEED=$(CHAOS_SEED) $(PY) -m pytest -q -s -p no:cacheprovider \
		tests/chaos $(PYTEST_ARGS)

chaos-quick: $(VENV)/.installed
	EDGELET_CHAOS_KILLS=$(CHAOS_QUICK_KILLS) EDGELET_CHAOS_SEED=$(CHAOS_SEED) $(PY) -m pytest -q -s \
		-p no:cacheprovider tests/chaos $(PYTEST_ARGS)

# The quick campaign with crun as the agent's default runtime handler.
chaos-quick-crun: $(VENV)/.installed
	EDGELET_CHAOS_RUNTIME_HANDLER=crun $(MAKE) chaos-quick

# Pure and loopback tests only, no root needed.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -x -m 'not privileged and not apiserver' $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(PY) bench/start_latency.py
	$(PY) bench/start_path.py
	$(PY) bench/footprint.py
	$(PY) bench/runonce.py
	$(PY) bench/url_latency.py
	$(PY) bench/server.py
	$(PY) bench/probes.py
	$(PY) bench/scale.py

# bench/peers.py only (not `make test`), every system on runc, then every one on crun: podman and
# containerd from Debian, kubelet built from the apiserver's source package. podman's package would drop
# a bridge conflist into /etc/cni/net.d, the agent's default CNI conf dir, so it is kept out.
BENCH_PEERS_APT := podman containerd
bench-peers: $(VENV)/.installed
	@dpkg -s $(BENCH_PEERS_APT) >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		-o DPkg::Options::=--path-exclude=/etc/cni/net.d/* $(BENCH_PEERS_APT)
	@tools/kubelet.sh >/dev/null
	$(PY) bench/peers.py
	$(PY) bench/peers.py --runtime crun

# --- packaging: frozen binary and .deb (see packaging/README.md) -------------
# `make binary`: dist/edgelet, one file to copy to a device by hand.
# `make binary-onedir`: dist/onedir/edgelet/ (executable + _internal/): nothing
#   to unpack at start, one process; what the .deb installs.
# `make deb`: dist/edgelet_<version>_<arch>.deb around the one-dir build
#   (`make deb-onefile`: around dist/edgelet instead).
# `make test-binary`: the e2e suite against dist/edgelet instead of the venv.
# `make binary-arm64`: dist/arm64/edgelet in an arm64 Debian root under qemu (slow).
.PHONY: binary binary-onedir binary-arm64 deb deb-onefile test-binary binary-onedir-cached

$(VENV)/.build-installed: $(VENV)/.installed
	@$(PY) -m pip install -q -e '.[build]'
	@touch $@

# --clean: every build starts from scratch, as in a fresh clone.
binary: $(VENV)/.build-installed
	$(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN \
		--distpath dist --workpath build/pyinstaller build.spec

ONEDIR_BUILD = EDGELET_ONEDIR=1 $(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN \
	--distpath dist/onedir --workpath build/pyinstaller-onedir build.spec
binary-onedir: $(VENV)/.build-installed
	$(ONEDIR_BUILD)

binary-arm64:
	packaging/build-arm64.sh

# binary-onedir again only when tools/build-key.sh's digest of its inputs (commit, sources, venv) changed:
# `make test` and `make test-binary` run twice in a row build once.
ONEDIR_KEY := dist/onedir/.build-key
binary-onedir-cached: $(VENV)/.build-installed
	@key=$$(tools/build-key.sh $(PY)); \
	if [ -x dist/onedir/edgelet/edgelet ] && [ "$$(cat $(ONEDIR_KEY) 2>/dev/null)" = "$$key" ]; then \
		echo "dist/onedir/edgelet is up to date (inputs $${key:0:12})"; \
	else \
		rm -f $(ONEDIR_KEY) && echo "$(ONEDIR_BUILD)" && $(ONEDIR_BUILD) && echo "$$key" >$(ONEDIR_KEY); \
	fi

# `make release` (`make release-arm64`): dist/edgelet-<version>-<arch>.tar.xz, the one-dir with its release.json
# for self-update (docs/self-update.md); sign it with minisign -t 'edgelet-version: N' (N: its release.json's
# version) or ssh-keygen -Y sign -n edgelet-release.
.PHONY: release release-arm64
release: binary-onedir-cached
	$(PY) tools/release.py pack dist/onedir/edgelet dist
release-arm64:
	packaging/build-arm64.sh
	$(PY) tools/release.py pack dist/arm64/edgelet dist --arch arm64

deb: binary-onedir
	PYTHON=$(PY) packaging/build-deb.sh dist/onedir/edgelet

deb-onefile: binary
	packaging/build-deb.sh dist/edgelet

# EDGELET_BIN makes the e2e fixtures run the frozen binary; it also enables
# the slow packaging test that installs the real binary's .deb. The one-dir
# build unpacks nothing, so tests never write under /var/lib/edgelet.
# `make test-binary E2E=tests/e2e` runs every e2e test against it.
E2E ?= tests/e2e/test_smoke.py tests/e2e/test_trusted_delivery.py
test-binary: binary-onedir-cached
	EDGELET_BIN=$(CURDIR)/dist/onedir/edgelet/edgelet $(PY) -m pytest -q -p no:cacheprovider \
		$(E2E) tests/unit/test_packaging.py $(PYTEST_ARGS)

# The Raspberry Pi 3/4 SD-card image (issue 24): dist/edgelet-rpi-arm64.img.xz and its .sha256, as root.
# Its build tools are apart from APT_PACKAGES so `make test` stays quick; the venv, because the .deb's
# release number and digests come from edgelet's own code. IMAGE_DEB: an arm64 .deb
# already built (default: this tree's, from packaging/build-arm64.sh --deb, whose one-dir build is cached).
IMAGE_APT_PACKAGES := mmdebstrap qemu-user-static binfmt-support dosfstools mtools e2fsprogs fdisk xz-utils
IMAGE_DEB ?=
.PHONY: image image-deps
image-deps:
	@missing=$$(for p in $(IMAGE_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
image: image-deps $(VENV)/.installed
	packaging/build-image.sh $(if $(IMAGE_DEB),--deb $(IMAGE_DEB))
# Boots the built image twice under qemu-system-aarch64 -M raspi3b (TCG) and checks the card folder's
# contract (packaging/test-image.sh). Slow: emulation is 10-30x slower than a Pi.
.PHONY: test-image
test-image: $(VENV)/.installed
	@dpkg -s qemu-system-arm >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-arm; }
	packaging/test-image.sh
