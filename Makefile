# fabric — see README.md. Everything builds with CGO_ENABLED=0; only `bpf`
# needs clang (Debian: clang llvm libbpf-dev), and its output is committed.
GO      ?= go
BIN     := bin/fabric
export CGO_ENABLED := 0

.PHONY: all build test test-short bench flake lint bpf image run deps clean

all: build

# -buildvcs=auto stamps the binary with the commit it was built from (and
# whether the tree was modified), even where GOFLAGS turns stamping off, so
# a run records the code it ran rather than the checkout it started in.
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/fabric

# Unprivileged unit tests only.
test-short:
	$(GO) test -short ./...

# golangci-lint (funlen, gocognit; .golangci.yml) comes from the Go module
# proxy at a fixed version: nothing to install by hand.
GOLANGCI := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

# Besides gofmt, vet and golangci-lint: no date in a comment of a
# non-test .go file (scripts/lint-dates), and every relative link in
# README.md and docs/ names a file and heading that exist
# (scripts/lint-links).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(GOLANGCI) run ./...
	$(GO) run ./scripts/lint-dates
	$(GO) run ./scripts/lint-links README.md docs

# Regenerate the eBPF objects (bpf2go) after editing a *.bpf.c file.
bpf:
	$(GO) generate ./...

clean:
	rm -rf bin

# The variables CI sets for the tests (internal/testenv): sudo clears the
# environment, so the re-run below passes them on by name.
STRICT_VARS := FABRIC_REQUIRE_PRIVILEGED FABRIC_TEST_DOWN_ALL FABRIC_CI_PROOF

# make flake's runs of the suite.
N ?= 3

# Labs need root (network namespaces, tc, eBPF). From a root shell the
# targets below run as they are. From a user shell they say so on one line
# and run make again under sudo, before anything is downloaded or built;
# without sudo they stop there.
ifneq ($(shell id -u),0)
run test bench flake image deps:
	@command -v sudo >/dev/null 2>&1 || { echo "fabric: make $@ needs root (network namespaces, tc, eBPF): run it from a root shell"; exit 1; }
	@echo "fabric: make $@ needs root (network namespaces, tc, eBPF): running sudo make $@"
	@sudo env "PATH=$$PATH" $(foreach v,$(STRICT_VARS),"$(v)=$$$(v)") $(MAKE) --no-print-directory $@ N=$(N)
else
# Test tools the privileged tests call, installed from Debian in one go
# when missing: tshark reads our pcaps back, python3 runs
# examples/transport-python, Slurm and munge run the one-node cluster of
# the cluster test (only the daemons and client, not slurm-wlm's plugins),
# and slurmdbd on a private MariaDB give it the accounting sacct reads.
DEPS := tshark:tshark python3:python3 slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge \
	slurmdbd:slurmdbd mariadbd:mariadb-server
deps:
	@missing=$$(for d in $(DEPS); do command -v $${d%%:*} >/dev/null || echo $${d#*:}; done); \
	[ -z "$$missing" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }

# The full suite. Packages run one at a time (-p 1): the privileged tests
# push real traffic through shaped ports and must not share the 2 cores.
# The tests that say t.Parallel() mostly wait (ready allowances, SIGTERM's
# grace, idle transports' wake-ups), so four of them run at once.
test: deps
	$(GO) vet ./...
	$(GO) test -p 1 -parallel 4 -count=1 -timeout 25m ./...

# The suite N times in a row (default 3): per-test pass counts, each run's
# duration, CPU idle and steal, and the retries that fired.
flake: deps
	$(GO) run ./bench/flake -n $(N)

# Speed and memory targets, printed by their benchmarks.
bench: build
	@echo "== lab lifecycle: fabric up/down of fat trees (median, peak RSS)"
	$(GO) run ./bench/lifecycle -fabric $(BIN) -k 4,8,16 -n 5
	@echo "== delay line from outside: agent CPU per packet, one-way lateness (any build: -fabric)"
	$(GO) run ./bench/delayline -fabric $(BIN) -kpps 10,20,50
	@for s in bench/*.sh; do [ -x "$$s" ] && { echo "== $$s"; "$$s" || exit 1; }; done; true
	@echo "== Go benchmarks"
	$(GO) test -p 1 -run '^$$' -bench . -benchtime 1x ./... 2>&1 | grep -E '^(Benchmark|ok|FAIL|---)'

# The endpoint image (FROM scratch + this binary), built through the Docker API.
image: build
	$(BIN) image build

# The main job on the embedded default (netns hosts, no Docker).
run: build
	$(BIN) run
endif
