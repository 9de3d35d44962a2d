# make test is what CI runs (.ci/run) and what the README tells a newcomer.
GO ?= go

.PHONY: test vet unit bench build run mutants

test: vet unit

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# Benchmarks print figures; they are not part of make test.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./relay/ ./kafka/
	$(GO) test -run '^$$' -bench CommitToBroker -benchtime 1x ./wakeup/

build:
	$(GO) build -o bin/posting ./cmd/posting

run:
	$(GO) run ./cmd/posting serve

# Breaks critical lines one at a time in a copy of the tree and runs the
# owning package's tests (scripts/mutants/main.go holds the table); exits
# non-zero if a mutant survives (1) or the table no longer fits the code (2).
# Slow, and not part of make test. Built first so that its exit status shows.
mutants:
	$(GO) build -o bin/mutants ./scripts/mutants
	./bin/mutants
