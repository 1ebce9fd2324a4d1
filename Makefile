# Yonder's build, test and release targets. Every target installs or builds what it needs.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
TOOLS := $(GO) tool -modfile=hack/tools/go.mod
LINT  := $(GO) tool -modfile=hack/tools/lint/go.mod golangci-lint
# Providers that clusterctl installs; each has api/, config/ and a main.go (STYLE.md).
PROVIDERS := bootstrap controlplane infrastructure-ssh infrastructure-baremetal
# Everything with CRDs (the network add-on has CRDs but is not a clusterctl provider).
API_DIRS  := $(PROVIDERS) network
TEST_TIMEOUT ?= 45m
OUT := out

##@ Main jobs

# Flags of `kubectl yonder lab up` (docs/lab.md), e.g. LAB_ARGS="--hosts 1 --foreground".
LAB_ARGS ?=

.PHONY: lab
lab: ## Bring up the local lab: management plane, workload cluster, hosts at two sites, Ready workers; `out/kubectl-yonder lab down` removes it
	@hack/test-bins.sh --preflight
	@echo "make lab: building out/kubectl-yonder; the first run also builds Kubernetes, etcd, CAPI, containerd and the node rootfs (many minutes; progress below)"
	@mkdir -p $(OUT) && $(GO) build -o $(OUT)/kubectl-yonder ./cmd/kubectl-yonder
	$(OUT)/kubectl-yonder lab up $(LAB_ARGS)

FUZZTIME ?= 10s

.PHONY: test
# hack/test.sh runs the suite: the heavy suites below one after another, and beside them a second lane with
# every other package, then every benchmark once at its tiny size (test/benchsize; no timing asserted) in only
# the packages that have benchmarks, then fuzzing; it ends by naming what failed. Why not one `go test ./...`: with -bench set, cmd/go runs the
# packages one at a time (go/src/cmd/go/internal/test/test.go), which made the suite take the sum of all its
# packages' times (over an hour); without -bench, -p 2 let two heavy suites run together, and on 2 cores
# their stacks starved each other into timeouts.
# The site labs (network/internal/dataplane/sitetest: namespaces and the real dataplane binary, ~2 min, no
# cluster or VM) run in the second lane, as their benchmarks always did: the heavy lane is the critical path.
# The heavy suites run in this order (go test -p 1 runs them as listed). The QEMU suites come last: TCG
# emulation is CPU-bound and the most sensitive to load (test/e2e/metal took 992 s alone and 1397 s beside
# the second lane), and by then the second lane is in its benchmarks and fuzzing (one worker each, the
# fuzzing at the lowest priority: hack/test.sh), which leave them most of the machine.
SLOW_TEST_PKGS := ./test/e2e/ ./cmd/kubectl-yonder/internal/lab/ ./infrastructure-baremetal/e2e/ ./test/e2e/metal/
# Suites that start no VM and fit beside test/e2e (test/claims: an envtest, sshd hosts, two controller
# replicas, 5.5 min; the agent's e2e: one cluster and two nspawn nodes, 5 min) lead the second lane instead:
# in the heavy lane they lengthened the critical path, which the heavy lane still is (fresh-clone runs of
# 6 Dec: heavy 3386 s, second lane 2938 s with them in the heavy lane and claims early).
EARLY_TEST_PKGS := ./test/claims/ ./hostruntime/internal/e2e/
test: test-bins ## Run the whole test suite: unit, envtest (real apiserver + CAPI), host tests (netns + sshd), every benchmark at a tiny size, fuzzing
	HEAVY_PKGS="$(SLOW_TEST_PKGS)" EARLY_PKGS="$(EARLY_TEST_PKGS)" BENCH_PKGS="$(BENCH_PKGS)" TEST_TIMEOUT=$(TEST_TIMEOUT) FUZZTIME=$(FUZZTIME) hack/test.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 10s) each
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

# Benchmarks to run (a -bench pattern), e.g. BENCH=TFTPVersus; only packages that have benchmarks are run
# (every other package's TestMain would start its environment for nothing).
BENCH ?= .
BENCH_PKGS = $(sort $(patsubst %/,%,$(dir $(shell grep -rl --include='*_test.go' --exclude-dir=out --exclude-dir=_lab --exclude-dir=.git '^func Benchmark' .))))

.PHONY: bench
bench: test-bins ## Run the benchmarks (BENCH=<pattern>); each prints its ratio against a baseline measured in the same run; writes out/bench/report.md
	@mkdir -p $(OUT)/bench
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 -timeout 60m $(BENCH_PKGS) 2>&1 | tee $(OUT)/bench/bench.txt; \
	  status=$${PIPESTATUS[0]}; \
	  $(GO) run ./hack/benchreport -o $(OUT)/bench/report.md $(OUT)/bench/bench.txt && \
	  echo "make bench: wrote $(OUT)/bench/report.md (raw output: $(OUT)/bench/bench.txt)"; \
	  exit $$status

##@ Build

.PHONY: test-bins
test-bins: ## Build (once, cached outside the tree) the real binaries the tests run; installs Debian packages
	@hack/test-bins.sh >/dev/null

.PHONY: build
build: ## Build every Go package and binary
	$(GO) build ./...

.PHONY: lint
lint: ## Run golangci-lint (gofmt, goimports, vet, errcheck, gosec, importas, staticcheck…)
	$(LINT) run ./...

##@ Generation

.PHONY: generate
generate: generate-go $(addprefix generate-manifests-,$(API_DIRS)) generate-plugin generate-bpf generate-templates ## Regenerate deepcopy code, manifests, eBPF objects and clusterctl templates

.PHONY: generate-bpf
generate-bpf: ## Recompile the committed eBPF objects (bpf2go, Debian's clang-14 and libbpf-dev; output is byte-identical across runs and checkouts)
	@echo "bpf2go network/internal/dataplane/bpf"
	@cd network/internal/dataplane/bpf && $(GO) generate ./...

.PHONY: generate-go
generate-go: ## Generate deepcopy code for every api/ package
	@for d in $(API_DIRS); do \
	  if [ -d $$d/api ]; then echo "controller-gen object $$d"; \
	    $(TOOLS) controller-gen object:headerFile=hack/boilerplate.go.txt paths=./$$d/api/... || exit 1; fi; \
	done

# kubectl-yonder embeds the network add-on for `site init`; the copy follows network/config.
PLUGIN_MANIFESTS := cmd/kubectl-yonder/internal/site/manifests

.PHONY: generate-plugin
generate-plugin: ## Render the network add-on into kubectl-yonder (site init embeds it)
	@echo "kustomize build network/config/default > $(PLUGIN_MANIFESTS)/yonder-network.yaml"
	@$(TOOLS) kustomize build network/config/default > $(PLUGIN_MANIFESTS)/yonder-network.yaml

generate-manifests-%: ## Generate CRDs, RBAC and webhook manifests of one provider into <provider>/config
	@if [ -d $*/api ]; then echo "controller-gen manifests $*"; \
	  $(TOOLS) controller-gen crd:generateEmbeddedObjectMeta=true rbac:roleName=manager-role webhook \
	    paths=./$*/... \
	    output:crd:artifacts:config=$*/config/crd/bases \
	    output:rbac:artifacts:config=$*/config/rbac \
	    output:webhook:artifacts:config=$*/config/webhook; \
	fi

.PHONY: generate-templates
generate-templates: ## Render the kustomize flavors in templates/flavors into templates/cluster-template-*.yaml
	@templates/generate.sh >/dev/null

.PHONY: verify-gen
verify-gen: generate ## Fail when generated files are not committed
	@git diff --exit-code -- $(API_DIRS) templates $(PLUGIN_MANIFESTS) || { echo "generated files are stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(API_DIRS) templates $(PLUGIN_MANIFESTS))" || { git status --porcelain -- $(API_DIRS) templates $(PLUGIN_MANIFESTS); echo "untracked generated files: run make generate and commit"; exit 1; }

##@ Release

# Version of the local clusterctl repository (out/repository) that release-manifests lays out.
RELEASE_VERSION ?= v0.1.0

.PHONY: release-manifests
release-manifests: ## Build each provider's components YAML, metadata.yaml and templates into out/, OCI image archives (out/images, referenced by digest), a local clusterctl repository and out/clusterctl.yaml
	@mkdir -p $(OUT)
	@for p in $(PROVIDERS); do \
	  f=$$(sed -n 's/.*"componentsFile": "\(.*\)".*/\1/p' $$p/clusterctl-settings.json); \
	  if [ -f $$p/config/default/kustomization.yaml ]; then \
	    mkdir -p $(OUT)/$$p && $(TOOLS) kustomize build $$p/config/default > $(OUT)/$$p/$$f || exit 1; \
	    cp metadata.yaml $(OUT)/$$p/; echo "$(OUT)/$$p/$$f"; \
	  else echo "skipping $$p: no config/default yet"; fi; \
	done
	@mkdir -p $(OUT)/network && $(TOOLS) kustomize build network/config/default > $(OUT)/network/yonder-network.yaml && echo "$(OUT)/network/yonder-network.yaml"
	@$(TOOLS) kustomize build infrastructure-baremetal/config/crd/metal3 > $(OUT)/infrastructure-baremetal/metal3-crds.yaml && echo "$(OUT)/infrastructure-baremetal/metal3-crds.yaml"
	@cp templates/cluster-template*.yaml templates/clusterclass-*.yaml $(OUT)/ 2>/dev/null || true
	@$(MAKE) --no-print-directory images IMAGE_TAG=$(RELEASE_VERSION) >/dev/null
	@hack/release-repo.sh $(OUT) $(RELEASE_VERSION)

# Images: the managers, the network add-on, the agent artifact and one node image per Kubernetes version
# (NODE_VERSIONS: hack/test-bins.sh builds their kubelets), named $(IMAGE_PREFIX)/<name>:<tag>.
IMAGE_PREFIX ?= ghcr.io/yonder-dev
IMAGE_TAG ?= $(RELEASE_VERSION)
NODE_VERSIONS ?= v1.36.3,v1.36.2
# Where `make push` uploads them (same names under this prefix), and the CA file of that registry if private.
REGISTRY ?=
REGISTRY_CA ?=

.PHONY: images
images: test-bins ## Build every image as an OCI archive into out/images (digests in digests.txt and images.txt; the binaries they carry in out/images/bin); no Docker needed
	$(GO) run ./hack/images build -out $(OUT)/images -registry $(IMAGE_PREFIX) -tag $(IMAGE_TAG) -node-versions $(NODE_VERSIONS) -binaries $(OUT)/images/bin

.PHONY: push
push: images ## Push out/images to REGISTRY (e.g. REGISTRY=registry.example:5000/yonder; REGISTRY_CA=ca.crt for a private CA; credentials from ~/.docker/config.json)
	@test -n "$(REGISTRY)" || { echo "make push needs REGISTRY=<host[:port]/prefix>"; exit 1; }
	$(GO) run ./hack/images push -out $(OUT)/images -registry $(IMAGE_PREFIX) -to $(REGISTRY) $(if $(REGISTRY_CA),-ca $(REGISTRY_CA))

# `make boot-image`: the bare-metal provisioning boot for yonder-metal-manager's --boot-artifacts-dir (Debian's
# kernel, Yonder's initramfs with the static agent and, with BOOT_SERVER_KEY, the provider's public key built
# in; see hack/bootimage). `make release` ships the generic one.
BOOT_SERVER_KEY ?=

.PHONY: boot-image
boot-image: ## Build the bare-metal provisioning boot (vmlinuz, yonder-initrd.img) into out/boot for --boot-artifacts-dir: generic (the manager serves its key beside it), or BOOT_SERVER_KEY=<public PEM of the manager's --boot-signing-key> built in
	hack/test-bins.sh --packages
	hack/test-bins.sh --metal-kernel >/dev/null
	$(GO) run ./hack/bootimage -out $(OUT)/boot $(if $(BOOT_SERVER_KEY),-server-key $(BOOT_SERVER_KEY))

# `make release`: a directory shaped like a GitHub release that clusterctl reads (out/release/<version>/):
# each provider's components file (distinct names), metadata.yaml, the templates and ClusterClasses,
# metal3-crds.yaml, the network add-on, yonder-agent and kubectl-yonder (static, -trimpath; the plugin
# without the lab, -tags release) for the build's architecture, the generic bare-metal provisioning boot
# (yonder-boot-linux-amd64.tar.gz: Debian's amd64 kernel and Yonder's initramfs), the plugin's krew archives and manifest
# (release-plugin), the Grafana dashboard (config/grafana) and checksums.txt (sha256 of every file).
# With REGISTRY set, the images are pushed there too.
RELEASE_DIR = $(OUT)/release/$(RELEASE_VERSION)

# The plugin's release: for each of PLUGIN_PLATFORMS a krew archive kubectl-yonder_<os>_<arch>.tar.gz (the
# binary and LICENSE) and the krew manifest yonder.yaml, whose platforms carry those archives' sha256 and
# RELEASE_URL; hack/krew checks it with krew's rules. The binaries report RELEASE_VERSION and the commit
# (`kubectl yonder version`).
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
RELEASE_URL ?= https://github.com/yonder-dev/yonder/releases/download/$(RELEASE_VERSION)
PLUGIN_VERSION_PKG = github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/version
PLUGIN_LDFLAGS = -X $(PLUGIN_VERSION_PKG).Version=$(RELEASE_VERSION) -X $(PLUGIN_VERSION_PKG).Commit=$(shell git rev-parse HEAD 2>/dev/null)

.PHONY: release-plugin
release-plugin: ## Write kubectl-yonder's krew archives (PLUGIN_PLATFORMS) and krew manifest yonder.yaml into out/release/<version>/
	@mkdir -p $(RELEASE_DIR)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; for p in $(PLUGIN_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; bin=$$tmp/$$os-$$arch/kubectl-yonder; if [ "$$os" = windows ]; then bin=$$bin.exe; fi; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -tags release -ldflags "$(PLUGIN_LDFLAGS)" -o $$bin ./cmd/kubectl-yonder; \
	  $(GO) run ./hack/krew archive -bin $$bin -license LICENSE -out $(RELEASE_DIR)/kubectl-yonder_$${os}_$${arch}.tar.gz; \
	done
	@$(GO) run ./hack/krew manifest -version $(RELEASE_VERSION) -uri-prefix $(RELEASE_URL) -out $(RELEASE_DIR)/yonder.yaml $(RELEASE_DIR)/kubectl-yonder_*.tar.gz
	@echo $(RELEASE_DIR)/yonder.yaml

.PHONY: release
release: release-manifests ## Write out/release/<version>/ (components, metadata, templates, binaries, krew plugin, Grafana dashboard, sha256s); pushes the images when REGISTRY is set
	@rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@$(MAKE) --no-print-directory release-plugin
	@for p in $(PROVIDERS); do cp $(OUT)/$$p/*-components*.yaml $(RELEASE_DIR)/; done
	@cp metadata.yaml templates/cluster-template*.yaml templates/clusterclass-*.yaml $(OUT)/infrastructure-baremetal/metal3-crds.yaml $(OUT)/network/yonder-network.yaml $(RELEASE_DIR)/
	@cp config/grafana/yonder-grafana-dashboard.json $(RELEASE_DIR)/
	@# The generic provisioning boot (no key built in: yonder-metal-manager serves its own beside it).
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; hack/test-bins.sh --packages >/dev/null; hack/test-bins.sh --metal-kernel >/dev/null; \
	  $(GO) run ./hack/bootimage -out $$tmp >/dev/null; \
	  tar -C $$tmp --owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name -czf $(RELEASE_DIR)/yonder-boot-linux-amd64.tar.gz vmlinuz yonder-initrd.img
	@arch=$$($(GO) env GOARCH); \
	  CGO_ENABLED=0 $(GO) build -trimpath -o $(RELEASE_DIR)/yonder-agent-linux-$$arch ./hostruntime/cmd/yonder-agent && \
	  CGO_ENABLED=0 $(GO) build -trimpath -tags release -ldflags "$(PLUGIN_LDFLAGS)" -o $(RELEASE_DIR)/kubectl-yonder-linux-$$arch ./cmd/kubectl-yonder
	@# The agent file must be the agent the components pin (the agent artifact's blob): reproducible builds.
	@test "$$(sha256sum $(RELEASE_DIR)/yonder-agent-linux-* | cut -d' ' -f1)" = "$$(tr -d '[:space:]' < $(OUT)/images/agent.sha256)" || \
	  { echo "make release: yonder-agent differs from the one in out/images (agent.sha256)"; exit 1; }
	@cd $(RELEASE_DIR) && sha256sum $$(ls | grep -v checksums.txt) > checksums.txt
	@if [ -n "$(REGISTRY)" ]; then $(MAKE) --no-print-directory push; fi
	@echo $(RELEASE_DIR)

.PHONY: clean
clean: ## Remove build outputs (the binary cache outside the tree stays); tears a running lab down first
	@if [ -x $(OUT)/kubectl-yonder ]; then $(OUT)/kubectl-yonder lab down; fi
	rm -rf $(OUT) _lab

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9%-]+:.*?##/ { printf "  %-24s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
