# make test is what CI runs (.ci/run) and what the README tells a newcomer.
GO ?= go

.PHONY: test vet unit fuzz bench bench-micro build run mutants

test: vet unit fuzz

vet:
	$(GO) vet ./...

# The write path's packages (api, reservation) run alone, one after the
# other: their tests keep dozens of test databases alive at once, and beside
# each other they filled the shared PostgreSQL server's 100 connections.
unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/internal/write/')
	$(GO) test -race -count=1 -timeout 20m -p 1 ./internal/write/...

# Go fuzz targets, 3 to 12 seconds each on 2 cores, starting from their seed corpora
# (testdata/fuzz, which unit runs as plain tests). The budget is a count of
# runs, not a duration: Go 1.26's coordinator can report a bare "context
# deadline exceeded" when a -fuzztime duration ends mid-call (golang/go#75804,
# fixed in Go 1.27), and a count has no deadline to race.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzVerifyClaims$$' -fuzztime 20000x ./internal/write/auth/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodePost$$' -fuzztime 20000x ./internal/write/api/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDateTime$$' -fuzztime 20000x ./internal/write/api/
	$(GO) test -run '^$$' -fuzz '^FuzzListQuery$$' -fuzztime 20000x ./internal/write/api/
	$(GO) test -run '^$$' -fuzz '^FuzzStringFieldReadsWhatEncodingJSONReads$$' -fuzztime 5000x ./internal/write/api/
	$(GO) test -run '^$$' -fuzz '^FuzzContractFieldsMatchMaps$$' -fuzztime 20000x ./event/

# Benchmarks print figures; they are not part of make test.
# posting bench on a fresh SQLite file, then on a fresh MariaDB/MySQL database
# created on the server of POSTING_TEST_MYSQL_URL (as the tests do) and
# dropped afterwards.
bench: build
	dir=$$(mktemp -d) && ./bin/posting bench --database-url "sqlite://$$dir/bench.db"; rc=$$?; rm -rf "$$dir"; exit $$rc
	url=$$($(GO) run ./scripts/benchdb create) && { ./bin/posting bench --database-url "$$url"; rc=$$?; $(GO) run ./scripts/benchdb drop "$$url"; exit $$rc; }

# The Go benchmarks of single parts (relay, producer, relay beside raw SQL,
# commit → broker on PostgreSQL).
bench-micro:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/send/relay/ ./internal/brokers/kafka/ ./internal/operate/bench/relaybench/
	$(GO) test -run '^$$' -bench 'CommitToBroker|WritersNotify' -benchtime 1x ./internal/send/wakeup/

build:
	$(GO) build -buildvcs=auto -o bin/posting ./cmd/posting

run:
	$(GO) run ./cmd/posting serve

# Breaks critical lines one at a time in a copy of the tree and runs the
# owning package's tests (scripts/mutants/main.go holds the table); exits
# non-zero if a mutant survives (1) or the table no longer fits the code (2).
# Slow, and not part of make test. Built first so that its exit status shows.
mutants:
	$(GO) build -o bin/mutants ./scripts/mutants
	./bin/mutants
