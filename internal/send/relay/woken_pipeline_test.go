package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A batch that is not full is sent alone, unless rows were committed after
// its claim (a wake waits) and a claim is one statement (PostgreSQL): then
// the claim of those rows runs beside its send, as after a full batch,
// instead of after it. Without a wake, or on MySQL and SQLite, nothing is
// claimed during the send.
func TestPumpClaimsRowsCommittedSinceItsClaimBesideTheSend(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		for _, woken := range []bool{false, true} {
			ctx := context.Background()
			b := setup(t, db)
			first := b.append(t, 1, 2)
			r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
			var later []outbox.Message
			r.testHooks().afterClaim = func() {
				r.testHooks().afterClaim = nil
				later = b.append(t, 3, 4)
				if woken {
					r.Wake()
				}
			}
			release := b.send.Hold()
			type out struct {
				res Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := r.Pump(ctx)
				done <- out{res, err}
			}()
			<-b.send.Entered()
			want := []int64{first[0].ID, first[1].ID}
			beside := woken && b.store.ClaimsInOneStatement()
			if beside {
				want = append(want, later[0].ID, later[1].ID)
				require.Eventually(t, func() bool { return len(b.processing(t)) == 4 }, 10*time.Second, 5*time.Millisecond,
					"the rows committed since the claim are claimed while the batch is in the air")
			}
			require.Equal(t, want, b.processing(t))
			release()
			o := <-done
			require.NoError(t, o.err)
			require.Equal(t, len(want), o.res.Claimed)
			require.Equal(t, beside, r.hasNext(), "a batch claimed for the next poll")
			require.Equal(t, woken && !beside, len(r.wake) == 1, "a wake is taken by the claim beside the send, or left for the loop")

			pumpUntilIdle(t, ctx, r, 10)
			requireOrderedOnce(t, append(first, later...), b.send.SentIDs())
			b.requireStatus(t, append(first, later...), outbox.StatusSent, "all sent")
			require.NoError(t, db.Exec("DELETE FROM outbox").Error)
		}
	})
}
