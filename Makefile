# make test is what CI runs (.ci/run) and what the README tells a newcomer.
GO ?= go

.PHONY: test vet unit bench build run

test: vet unit

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# Benchmarks print figures; they are not part of make test.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./relay/ ./kafka/

build:
	$(GO) build -o bin/posting ./cmd/posting

run:
	$(GO) run ./cmd/posting serve
