# xdpdrop: build, generate, test.
#
#   make test          set up this machine (root) and run every test
#   make demo          set up this machine (root) and run the default sandbox
#   make generate      rebuild the BPF objects and Go bindings in gen/ (clang-19)
#   make check-generate  regenerate and fail if gen/ differs from what is committed
#   make generate-docker same as generate, with the pinned clang of Dockerfile.clang

export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin/xdpdrop

.PHONY: all build setup test test-short diff-sweep generate check-generate generate-docker vet staticcheck tidy-check fmt-check ci demo clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/xdpdrop

setup:
	./scripts/setup.sh

test: setup
	CI=$${CI:-} ./scripts/gotest.sh

test-short: setup
	./scripts/gotest.sh -short

# Fast drop's differential tests over many seeds (CI runs one):
# make diff-sweep [FIRST=1 LAST=50]
diff-sweep: setup
	./scripts/diff-sweep.sh $(or $(FIRST),1) $(or $(LAST),50)

generate:
	$(GO) generate ./gen/

check-generate: generate
	@if [ -n "$$(git status --porcelain -- gen/)" ]; then \
		echo "check-generate: gen/ differs from the committed files after 'make generate':"; \
		git status --porcelain -- gen/; git --no-pager diff --stat -- gen/; exit 1; \
	fi
	@echo "check-generate: gen/ matches its sources"

generate-docker:
	docker build -t xdpdrop-clang -f Dockerfile.clang .
	docker run --rm -v "$(CURDIR):/src" -w /src xdpdrop-clang make generate

vet:
	$(GO) vet ./...

# staticcheck is pinned in go.mod's tool block, like bpf2go.
staticcheck:
	$(GO) tool staticcheck ./...

# go.mod and go.sum must be what `go mod tidy` makes of them (Go 1.23+
# says so without writing: go mod tidy -diff). bench/asavie is a module of
# its own, for the comparison with asavie/xdp.
tidy-check:
	@rc=0; for m in . bench/asavie; do \
		if ! out=$$(cd $$m && $(GO) mod tidy -diff 2>&1); then \
			echo "tidy-check: go mod tidy changes $$m/go.mod or go.sum; run it there and commit the result:"; \
			echo "$$out"; rc=1; \
		fi; \
	done; exit $$rc

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi

ci: setup check-generate tidy-check vet staticcheck fmt-check test

demo: setup build
	$(BIN) demo

clean:
	rm -rf bin
