package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A serve whose embedded broker's lease another serve took (this one's
// database stalled past the lease's expiry, and the other started its own
// broker meanwhile) stops with a failure naming the new holder, instead of
// running a second embedded broker on the database: the two relays would
// split the database's events, a post's in order no more, between two
// logs, each read by other workers.
func TestServeStopsWhenAnotherServeTookItsEmbeddedBrokerLease(t *testing.T) {
	t.Parallel()
	dbURL := databasetest.MySQLURL(t, "leaselost")
	env, _, _ := embeddedServeEnv(t, dbURL, "stalled-serve")
	p := startServe(t, env...)
	require.Contains(t, p.Out.String(), "embedded broker lease taken")

	// The lease expired under the stalled serve and another took it.
	db := databasetest.Open(t, dbURL)
	require.NoError(t, db.Exec("UPDATE leases SET holder = ?, info = ? WHERE name = ?",
		"other-serve#00000000", "127.0.0.1:1 on elsewhere", embeddedBrokerLease).Error)

	select {
	case <-p.Done:
	case <-time.After(brokerLeaseRenewEvery + 30*time.Second):
		t.Fatal("serve runs on without the embedded broker's lease")
	}
	require.NotEqual(t, 0, p.Cmd.ProcessState.ExitCode())
	require.Contains(t, p.Out.String(), "lease embedded-broker lost to other-serve#00000000")
	lease, held, err := database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
	require.NoError(t, err)
	require.True(t, held)
	require.Equal(t, "other-serve#00000000", lease.Holder, "the new holder's lease is left alone")
}
