package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// fakeServe is a stand-in for `posting serve` that answers the creates and
// /metrics the whole-serve rounds send; fail, if set, answers the creates
// with a 500 once /metrics was read (the timed creates, after the warm-up).
func fakeServe(t *testing.T, fail bool) *Serve {
	t.Helper()
	mux := http.NewServeMux()
	var (
		id      atomic.Int64
		scraped atomic.Bool
	)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		scraped.Store(true)
		// Like a serve's pool: 5 connections when it is ready, a 6th
		// opened by its first creates, and kept.
		opened := 5
		if id.Load() > 0 {
			opened = 6
		}
		fmt.Fprintf(w, "posting_database_connections_opened_total{instance_id=\"x\"} %d\nposting_database_connections_max{instance_id=\"x\"} 40\n", opened)
	})
	mux.HandleFunc("POST /api/v1/posts", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if fail && scraped.Load() {
			http.Error(w, "the database is gone", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/api/v1/posts/%d", id.Add(1)))
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Serve{BaseURL: srv.URL, Stop: func() error { return nil }}
}

// A CPU profile of the whole serve's creates that could not be written out
// is reported even when a round fails afterwards (a later serve that does
// not start, or the creates of the profiled round): the operator is told
// why the file is cut, not only why the run stopped.
func TestWholeServeReportsAProfileItCouldNotWriteWhenARoundFails(t *testing.T) {
	for name, tc := range map[string]struct {
		start func(t *testing.T, call int) (*Serve, error)
		want  string
	}{
		"a later serve does not start": {
			start: func(t *testing.T, call int) (*Serve, error) {
				if call > 1 {
					return nil, errors.New("serve did not start")
				}
				return fakeServe(t, false), nil
			},
			want: "serve did not start",
		},
		"the profiled round's creates fail": {
			start: func(t *testing.T, _ int) (*Serve, error) { return fakeServe(t, true), nil },
			want:  "the database is gone",
		},
	} {
		t.Run(name, func(t *testing.T) {
			db := databasetest.NewSQLite(t)
			calls := 0
			cfg := Config{APIClients: 2, APIDuration: 150 * time.Millisecond,
				ServeCPUProfile: "/dev/full", // every write fails: no space left on device
				StartServe: func(context.Context) (*Serve, error) {
					calls++
					return tc.start(t, calls)
				}}
			clean := func(context.Context) error { return nil }
			err := runWholeServe(context.Background(), cfg, db, clean, io.Discard)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "cpu profile: write /dev/full", "the cut profile is reported too")
		})
	}
}

// A fresh serve's pool opens connections during its first creates and
// keeps them: that is its start, not churn, and the whole-serve figure of
// connections opened during the creates stays 0, as the benchmarks page
// reads it ("0 when the pool kept its connections open").
func TestWholeServeCountsNoConnectionsAFreshServesPoolOpensAsItFills(t *testing.T) {
	db := databasetest.NewSQLite(t)
	cfg := Config{APIClients: 2, APIDuration: 150 * time.Millisecond,
		StartServe: func(context.Context) (*Serve, error) { return fakeServe(t, false), nil }}
	var out bytes.Buffer
	require.NoError(t, runWholeServe(context.Background(), cfg, db, func(context.Context) error { return nil }, &out))
	require.Contains(t, out.String(), "  database connections opened during the creates: 0 (pool size 40; 18 opened since each serve started, summed)\n")
}

// A comparison that stops early (here its second clean-up fails) stops
// the CPU profile it started: the file is complete, and the next profile
// in the process can start.
func TestAPIComparisonThatStopsEarlyStopsItsProfile(t *testing.T) {
	db := databasetest.NewSQLite(t)
	path := filepath.Join(t.TempDir(), "create.prof")
	calls := 0
	clean := func(context.Context) error {
		calls++
		if calls > 2 {
			return errors.New("the clean-up failed")
		}
		return nil
	}
	cfg := Config{APIClients: 2, APIDuration: 150 * time.Millisecond, BatchSize: 10, BatchTotal: 10, CPUProfile: path}
	err := runAPI(context.Background(), cfg, db, clean, io.Discard)
	require.ErrorContains(t, err, "the clean-up failed")
	require.NoError(t, pprof.StartCPUProfile(io.Discard), "the comparison's profile was stopped")
	pprof.StopCPUProfile()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = gzip.NewReader(f)
	require.NoError(t, err, "the profile was written out, gzipped as pprof writes it")
}
