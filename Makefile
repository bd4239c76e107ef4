# fabric — see README.md. Everything builds with CGO_ENABLED=0; only `bpf`
# needs clang (Debian: clang llvm libbpf-dev), and its output is committed.
GO      ?= go
BIN     := bin/fabric
export CGO_ENABLED := 0

.PHONY: all build test test-short bench lint bpf image run deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/fabric

# Test tools the privileged tests call (tshark reads our pcaps back).
deps:
	@command -v tshark >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null)

# The full suite. Packages run one at a time (-p 1): the privileged tests
# push real traffic through shaped ports and must not share the 2 cores.
test: deps
	$(GO) vet ./...
	$(GO) test -p 1 -count=1 -timeout 25m ./...

# Unprivileged unit tests only.
test-short:
	$(GO) test -short ./...

# Speed and memory targets (issues: lab lifecycle, ports, measurement).
bench: build
	@echo "== lab lifecycle: fabric up/down of fat trees (median, peak RSS)"
	$(GO) run ./bench/lifecycle -fabric $(BIN) -k 4,8,16 -n 5
	@for s in bench/*.sh; do [ -x "$$s" ] && { echo "== $$s"; "$$s" || exit 1; }; done; true
	@echo "== Go benchmarks"
	$(GO) test -p 1 -run '^$$' -bench . -benchtime 1x ./... 2>&1 | grep -E '^(Benchmark|ok|FAIL|---)' 

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet ./...

# Regenerate the eBPF objects (bpf2go) after editing a *.bpf.c file.
bpf:
	$(GO) generate ./...

# The endpoint image (FROM scratch + this binary), built through the Docker API.
image: build
	$(BIN) image build

# The main job on the embedded default (netns hosts, no Docker).
run: build
	$(BIN) run

clean:
	rm -rf bin
