# fabric — see README.md. Everything builds with CGO_ENABLED=0; only `bpf`
# needs clang (Debian: clang llvm libbpf-dev), and its output is committed.
GO      ?= go
BIN     := bin/fabric
export CGO_ENABLED := 0

.PHONY: all build test test-short bench lint bpf image run deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/fabric

# Unprivileged unit tests only.
test-short:
	$(GO) test -short ./...

# golangci-lint (funlen, gocognit; .golangci.yml) comes from the Go module
# proxy at a fixed version: nothing to install by hand.
GOLANGCI := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(GOLANGCI) run ./...

# Regenerate the eBPF objects (bpf2go) after editing a *.bpf.c file.
bpf:
	$(GO) generate ./...

clean:
	rm -rf bin

# Labs need root (network namespaces, tc, eBPF). From a root shell the
# targets below run as they are. From a user shell they say so on one line
# and run make again under sudo, before anything is downloaded or built;
# without sudo they stop there.
ifneq ($(shell id -u),0)
run test bench image deps:
	@command -v sudo >/dev/null 2>&1 || { echo "fabric: make $@ needs root (network namespaces, tc, eBPF): run it from a root shell"; exit 1; }
	@echo "fabric: make $@ needs root (network namespaces, tc, eBPF): running sudo make $@"
	@sudo env "PATH=$$PATH" $(MAKE) --no-print-directory $@
else
# Test tools the privileged tests call (tshark reads our pcaps back).
deps:
	@command -v tshark >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null)

# The full suite. Packages run one at a time (-p 1): the privileged tests
# push real traffic through shaped ports and must not share the 2 cores.
test: deps
	$(GO) vet ./...
	$(GO) test -p 1 -count=1 -timeout 25m ./...

# Speed and memory targets, printed by their benchmarks.
bench: build
	@echo "== lab lifecycle: fabric up/down of fat trees (median, peak RSS)"
	$(GO) run ./bench/lifecycle -fabric $(BIN) -k 4,8,16 -n 5
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
