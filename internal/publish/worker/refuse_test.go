package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// relayed is the record the relay sends for the outbox row m: its id as the
// sequence, in the value and the ce_sequence header.
func relayed(m outbox.Message) kafkatest.Record {
	return withSequence(kafkatest.Record{Key: m.Key(), Value: []byte(m.Payload),
		Headers: map[string]string{event.HeaderEventID: m.EventID, event.HeaderEventType: m.EventType}}, m.ID)
}

// outboxRows are the outbox rows of the post, in id order.
func outboxRows(t *testing.T, db *gorm.DB, postID int64) []outbox.Message {
	t.Helper()
	var rows []outbox.Message
	require.NoError(t, db.Where("aggregate_id = ?", postID).Order("id").Find(&rows).Error)
	return rows
}

// countRows is how many rows of table match where.
func countRows(t *testing.T, db *gorm.DB, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Table(table).Where(where, args...).Count(&n).Error)
	return n
}

// As a batch: every event the worker's database
// contradicts is refused (its post unknown; a sequence above anything
// written for the post, the row of another event, or another sequence for
// the event's own row; a reservation of a RESERVED post; a CANCELLED event
// of a post that is not), counted by reason, logged once per post, and
// leaves nothing behind: no inbox row, no sequence, no publication. The real
// events of the same batch are applied, a reservation at the post's
// scheduledAt as the table holds it, whatever its message says. The same
// batch again changes nothing and logs nothing more.
func TestWorkerRefusesWhatItsDatabaseContradicts(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		var logs logtest.Buffer
		var consumed tally
		var refused tally
		w, err := worker.New(db.DB, worker.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			ObserveConsumed: consumed.consumed, ObserveRefused: refused.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)

		now := databasetest.Now(t, db.DB)
		working := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		// A row of the post deleted before its reservation was written:
		// its id is below the post's highest and names no row.
		gap := written(t, db.DB, cancelRecord(t, working))
		require.NoError(t, db.Where("event_id = ?", gap.Headers[event.HeaderEventID]).Delete(&outbox.Message{}).Error)
		real := written(t, db.DB, reservationRecord(t, working))
		realSeq := decode(t, real, 0).Sequence
		shifted := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		lying := *shifted
		lying.ScheduledAt = now.Add(-time.Hour) // the message says: due an hour ago
		reserved, err := svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		createdOfReserved := outboxRows(t, db.DB, reserved.ID)[0]

		// The real reservation's event id under the gap's sequence: below
		// the post's highest id, yet not the row's.
		stolen := reservationRecord(t, working)
		stolen.Value = mustSetEventID(t, stolen.Value, real.Headers[event.HeaderEventID])
		stolen.Headers[event.HeaderEventID] = real.Headers[event.HeaderEventID]
		stolen = withSequence(stolen, decode(t, gap, 0).Sequence)
		evs := []inbox.Event{
			decode(t, reservationRecord(t, &reservation.Post{ID: 1 << 40, ScheduledAt: now}), 0), // unknown_post
			decode(t, withSequence(cancelRecord(t, working), 1<<50), 0),                          // unknown_sequence: beyond
			decode(t, withSequence(cancelRecord(t, working), createdOfReserved.ID), 0),           // unknown_sequence: another's row
			decode(t, stolen, 0), // unknown_sequence: the real event's id, another sequence
			decode(t, real, 0),
			decode(t, reservationRecord(t, &lying), 0),
			decode(t, reservationRecord(t, reserved), 0), // contradicted: RESERVED
			decode(t, cancelRecord(t, working), 0),       // contradicted: WORKING, not CANCELLED
		}
		check := func(round int) {
			t.Helper()
			require.Equal(t, map[string]int{worker.RefusedUnknownPost: round, worker.RefusedUnknownSequence: 3 * round,
				worker.RefusedContradicted: 2 * round}, refused.counts())
			require.Equal(t, 6*round, consumed.counts()[worker.OutcomeRefused])
			require.EqualValues(t, 2, databasetest.Count[inbox.Record](t, db.DB), "only the real events are in the inbox")
			require.EqualValues(t, 1, countRows(t, db.DB, "inbox_sequences", "1 = 1"))
			require.EqualValues(t, 1, countRows(t, db.DB, "inbox_sequences", "post_id = ? AND sequence = ?", working.ID, realSeq))
			require.EqualValues(t, 2, databasetest.Count[worker.Publication](t, db.DB))
			p := loadPublication(t, db.DB, working.ID)
			require.Equal(t, real.Headers[event.HeaderEventID], p.EventID)
			require.True(t, p.ScheduledAt.Equal(working.ScheduledAt))
			p = loadPublication(t, db.DB, shifted.ID)
			require.Equal(t, worker.PublicationPending, p.Status)
			require.True(t, p.ScheduledAt.Equal(shifted.ScheduledAt), "scheduled at %s, the message's time, not the table's %s",
				p.ScheduledAt, shifted.ScheduledAt)
			require.Equal(t, 2, w.Pending())
			require.Equal(t, 3, strings.Count(logs.String(), `"msg":"event refused`), "one line per post:\n%s", logs.String())
		}
		malformed, err := w.HandleBatch(ctx, evs)
		require.NoError(t, err)
		for i, m := range malformed {
			require.NoError(t, m, "event %d", i)
		}
		check(1)
		_, err = w.HandleBatch(ctx, evs)
		require.NoError(t, err)
		check(2)
		// One at a time (the consumer's path after a failed batch), the
		// same.
		for _, ev := range evs {
			require.NoError(t, w.Handle(ctx, ev))
		}
		check(3)
		require.Equal(t, reservation.StatusReserved, loadPost(t, db.DB, reserved.ID).Status)
	})
}

// mustSetEventID returns the JSON value with its eventId replaced.
func mustSetEventID(t *testing.T, value []byte, id string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(value, &m))
	m["eventId"] = id
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// An event without a sequence (as a producer older than sequences sent)
// is still proven by its outbox row: one whose event id names no row of a
// post whose rows remain was not written by the service. A forged one for
// a WORKING post, arriving before the real reservation, is refused, counted
// and logged once; the publication carries the real event's id, which the
// webhook sends as its Idempotency-Key. Once every row of a post was
// purged, an unsequenced event of it is taken, as a redelivery.
func TestWorkerRefusesAnUnsequencedEventWhoseIdNamesNoRow(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		var logs logtest.Buffer
		var refused tally
		w, err := worker.New(db.DB, worker.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), ObserveRefused: refused.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		now := databasetest.Now(t, db.DB)
		post := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		real := written(t, db.DB, reservationRecord(t, post))
		forged := reservationRecord(t, post) // a fresh event id, no row, no sequence
		require.Zero(t, decode(t, forged, 0).Sequence)

		for range 2 {
			require.NoError(t, w.Handle(ctx, decode(t, forged, 0)))
		}
		require.Equal(t, map[string]int{worker.RefusedUnknownSequence: 2}, refused.counts())
		require.Equal(t, 1, strings.Count(logs.String(), `"msg":"event refused`), "once per post:\n%s", logs.String())
		require.Contains(t, logs.String(), forged.Headers[event.HeaderEventID])
		require.Zero(t, w.Pending())
		require.Zero(t, databasetest.Count[worker.Publication](t, db.DB), "no publication under the forged id")

		require.NoError(t, w.Handle(ctx, decode(t, real, 0)))
		require.Equal(t, 1, w.Pending())
		require.Equal(t, real.Headers[event.HeaderEventID], loadPublication(t, db.DB, post.ID).EventID)

		// Every row of the post purged: an old unsequenced event is taken.
		old := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		oldRecord := reservationRecord(t, old)
		copied := oldRecord
		copied.Headers = maps.Clone(oldRecord.Headers) // written adds the sequence to the headers
		written(t, db.DB, copied)
		require.Zero(t, decode(t, oldRecord, 0).Sequence)
		require.NoError(t, db.Where("aggregate_id = ?", old.ID).Delete(&outbox.Message{}).Error)
		require.NoError(t, w.Handle(ctx, decode(t, oldRecord, 0)))
		require.Equal(t, map[string]int{worker.RefusedUnknownSequence: 2}, refused.counts())
		require.Equal(t, 2, w.Pending())
		require.Equal(t, oldRecord.Headers[event.HeaderEventID], loadPublication(t, db.DB, old.ID).EventID)
	})
}

// A post's events whose outbox rows the cleaner deleted (SENT, past the
// retention) are taken when delivered again: a sequence below the highest
// outbox id the database holds for the post, or, when none of its rows
// remains, for the whole table. Above that, with no row, it is refused.
func TestWorkerTakesAnOldEventWhoseRowWasPurged(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		var consumed tally
		var refused tally
		w, err := worker.New(db.DB, worker.Config{Logger: quiet(), ObserveConsumed: consumed.consumed, ObserveRefused: refused.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		now := databasetest.Now(t, db.DB)

		// kept: its reservation's row is gone, a later row of the post is
		// still there.
		kept := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		purgedOfKept := written(t, db.DB, reservationRecord(t, kept))
		written(t, db.DB, message(t, event.PostingEvent, kept, event.PostingEventFields{Action: event.ActionUpdated,
			Status: string(reservation.StatusWorking), ScheduledAt: kept.ScheduledAt}))
		// gone: none of its rows remains; another post's row does.
		gone := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		purgedOfGone := written(t, db.DB, reservationRecord(t, gone))
		reservationtest.Append(t, db.DB, kept.ID, now)
		last := outboxRows(t, db.DB, kept.ID)
		top := last[len(last)-1].ID
		for _, r := range []kafkatest.Record{purgedOfKept, purgedOfGone} {
			require.NoError(t, db.Where("event_id = ?", r.Headers[event.HeaderEventID]).Delete(&outbox.Message{}).Error)
		}
		_, err = w.HandleBatch(ctx, []inbox.Event{decode(t, purgedOfKept, 0), decode(t, purgedOfGone, 0)})
		require.NoError(t, err)
		require.Empty(t, refused.counts())
		require.Equal(t, map[string]int{worker.OutcomeProcessed: 2}, consumed.counts())
		require.Equal(t, 2, w.Pending())

		// Above the table's highest id, with no row of its post left:
		// refused.
		orphan := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		require.NoError(t, w.Handle(ctx, decode(t, withSequence(reservationRecord(t, orphan), top+1), 0)))
		require.Equal(t, map[string]int{worker.RefusedUnknownSequence: 1}, refused.counts())
		require.Equal(t, 2, w.Pending())
	})
}

// A POSTING_EVENT EXPIRED settles a pending publication EXPIRED and disarms
// its timer, as CANCELLED does, but only for a post the table says is
// EXPIRED: one for a post still WORKING is refused, and its publication
// stays armed.
func TestWorkerExpiredEventSettlesAsTheTableSays(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		var settled tally
		var refused tally
		w, err := worker.New(db.DB, worker.Config{Logger: quiet(), ObserveSettled: settled.add, ObserveRefused: refused.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		now := databasetest.Now(t, db.DB)
		post := reservationtest.InsertWorking(t, db.DB, now.Add(time.Hour))
		require.NoError(t, db.Model(&reservation.Post{}).Where("id = ?", post.ID).Update("publish_by", now.Add(time.Hour)).Error)
		require.NoError(t, w.Handle(ctx, decode(t, written(t, db.DB, reservationRecord(t, post)), 0)))
		require.Equal(t, 1, w.Pending())

		early := message(t, event.PostingEvent, post, event.PostingEventFields{Action: event.ActionExpired,
			Status: string(reservation.StatusExpired), ScheduledAt: post.ScheduledAt})
		require.NoError(t, w.Handle(ctx, decode(t, early, 0)))
		require.Equal(t, map[string]int{worker.RefusedContradicted: 1}, refused.counts())
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, post.ID).Status)
		require.Equal(t, 1, w.Pending())

		expired, err := reservation.Expire(db.DB, []int64{post.ID}, now.Add(2*time.Hour), false)
		require.NoError(t, err)
		require.Len(t, expired, 1)
		rows := outboxRows(t, db.DB, post.ID)
		_, err = w.HandleBatch(ctx, []inbox.Event{decode(t, relayed(rows[len(rows)-1]), 0)})
		require.NoError(t, err)
		require.Equal(t, worker.PublicationExpired, loadPublication(t, db.DB, post.ID).Status)
		require.Zero(t, w.Pending(), "the expired post's timer is still armed")
		require.Equal(t, map[string]int{worker.OutcomeExpired: 1}, settled.counts())
	})
}

// forge produces, with a plain Kafka client, one message of a post to the
// broker at addr: a valid-looking value of typ with fields, the post's key,
// and sequence (0: none) in the value and the ce_sequence header. It
// returns the message's event id.
func forge(t *testing.T, addr, topic string, typ event.Type, postID, sequence int64, fields any) string {
	t.Helper()
	ev := reservationtest.Outbox(t, typ, postID, time.Now(), fields)
	value := event.WithSequence(ev.Payload, sequence)
	headers := []kgo.RecordHeader{{Key: event.HeaderEventID, Value: []byte(ev.ID)}, {Key: event.HeaderEventType, Value: []byte(typ)}}
	if sequence > 0 {
		headers = append(headers, kgo.RecordHeader{Key: event.CloudEventsKafkaPrefix + event.CloudEventsSequence,
			Value: []byte(event.FormatSequence(sequence))})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(event.Key(postID)), Value: value, Headers: headers}).FirstErr())
	return ev.ID
}

// chain is the service's chain on one database, as serve runs it in embedded
// mode: the embedded broker, the reservation service and scheduler, the
// relay (started by startRelay), and a worker consuming the broker.
type chain struct {
	db       *gorm.DB
	store    *outbox.Store
	broker   *kafka.Embedded
	svc      *reservation.Service
	sched    *reservation.Scheduler
	pub      *recorder
	refused  tally
	consumed tally
}

func startChain(t *testing.T, ddb *database.DB) *chain {
	t.Helper()
	db := ddb.DB
	b, err := kafka.StartEmbedded(kafka.EmbeddedConfig{Addr: "127.0.0.1:0"}, quiet())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	c := &chain{db: db, store: outbox.NewStore(ddb), broker: b, pub: &recorder{}}
	c.svc, err = reservation.NewService(db, reservation.ServiceConfig{})
	require.NoError(t, err)
	c.sched, err = reservation.NewScheduler(db, reservation.SchedulerConfig{Logger: quiet()})
	require.NoError(t, err)
	w, err := worker.New(db, worker.Config{Publisher: c.pub, Logger: quiet(), ObserveConsumed: c.consumed.consumed,
		ObserveRefused: c.refused.add})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	cons, err := kafka.NewConsumer(kafka.ConsumerConfig{Brokers: []string{b.Addr()}, Topic: b.Topic(), GroupID: "refuse-test",
		CommitInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}, w, quiet())
	require.NoError(t, err)
	require.NoError(t, cons.Start(context.Background()))
	t.Cleanup(cons.Stop)
	return c
}

// awaitConsumed waits until the worker handled n events, whatever their
// outcome.
func (c *chain) awaitConsumed(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		total := 0
		for _, k := range c.consumed.counts() {
			total += k
		}
		return total >= n
	}, 30*time.Second, 10*time.Millisecond, "the worker never handled %d events", n)
}

// startRelay starts the relay from the outbox to the broker.
func (c *chain) startRelay(t *testing.T) {
	t.Helper()
	producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{c.broker.Addr()}, Topic: c.broker.Topic()}, quiet())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	rel, err := relay.New(c.store, producer, relay.Config{InstanceID: "refuse-test", Interval: 50 * time.Millisecond, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, rel.Start(context.Background()))
	t.Cleanup(rel.Stop)
}

// createPost creates a RESERVED post due in an hour through the service.
func (c *chain) createPost(t *testing.T) *reservation.Post {
	t.Helper()
	post, err := c.svc.Create(context.Background(), reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	return post
}

// forgePosting produces, with a plain Kafka client, a POSTING_EVENT of post
// the service never wrote: action, status and sequence as given. It returns
// the forged event's id.
func (c *chain) forgePosting(t *testing.T, post *reservation.Post, action event.Action, status reservation.Status, sequence int64) string {
	t.Helper()
	return forge(t, c.broker.Addr(), c.broker.Topic(), event.PostingEvent, post.ID, sequence, event.PostingEventFields{
		Action: action, Status: string(status), ScheduledAt: post.ScheduledAt})
}

// reserveSoon moves the RESERVED post to a time just ahead through the
// service (an UPDATED event), then runs the scheduler, which makes it
// WORKING with its reservation event.
func (c *chain) reserveSoon(t *testing.T, id int64) time.Time {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(2 * time.Second)
	_, err := c.svc.Update(ctx, id, reservation.UpdateInput{ScheduledAt: &at})
	require.NoError(t, err)
	res, err := c.sched.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Marked)
	return database.Normalize(at)
}

// requireOnTime checks that the post was published once, at its time and
// not long after.
func (c *chain) requireOnTime(t *testing.T, id int64, at time.Time) {
	t.Helper()
	awaitPublished(t, c.db, &reservation.Post{ID: id})
	got := loadPost(t, c.db, id)
	require.False(t, got.PublishedAt.Before(at), "published at %s, before %s", got.PublishedAt, at)
	require.Less(t, got.PublishedAt.Sub(at), 3*time.Second, "published late")
	require.Equal(t, 1, c.pub.count(id))
	require.Zero(t, c.consumed.counts()[worker.OutcomeOutOfOrder], "a real event was dropped as out of order")
}

// Through the embedded broker: one message produced by
// a plain Kafka client with a real post's key, a valid-looking CANCELLED
// event and a huge sequence would make every real event of the post drop as
// out_of_order, and the post stay WORKING past its time. It is refused and
// counted; the post's reservation is applied, and it is published on time.
func TestWorkerRefusesAForgedSequenceAndPublishesOnTime(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		c := startChain(t, db)
		post := c.createPost(t)
		forged := c.forgePosting(t, post, event.ActionCancelled, reservation.StatusCancelled, 1<<60)
		c.awaitConsumed(t, 1)

		at := c.reserveSoon(t, post.ID)
		c.startRelay(t)
		c.requireOnTime(t, post.ID, at)
		rows := outboxRows(t, db.DB, post.ID)
		require.Len(t, rows, 3, "CREATED, UPDATED, the reservation")
		require.EqualValues(t, 1, countRows(t, db.DB, "inbox_sequences", "post_id = ? AND sequence = ?", post.ID, rows[2].ID))
		require.Equal(t, map[string]int{worker.RefusedUnknownSequence: 1}, c.refused.counts())
		seen, err := inbox.Processed(context.Background(), db.DB, worker.DefaultConsumer, forged)
		require.NoError(t, err)
		require.False(t, seen, "the forged event is in the inbox")
	})
}

// A forged reservation: a POSTING_RESERVATION_EVENT
// for a post still RESERVED, due an hour ago by its value, made a FAILED
// publication, and the real reservation was then ignored. Now it is refused
// as contradicted and writes no publication; the real reservation, once the
// scheduler makes the post WORKING, is applied and the post published on
// time.
func TestWorkerRefusesAForgedReservationAndTakesTheRealOne(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		c := startChain(t, db)
		post := c.createPost(t)
		forge(t, c.broker.Addr(), c.broker.Topic(), event.ReservationEvent, post.ID, 0,
			event.ReservationEventFields{ScheduledAt: time.Now().Add(-time.Hour)})
		c.awaitConsumed(t, 1)
		require.Zero(t, databasetest.Count[worker.Publication](t, db.DB), "the forged reservation wrote a publication")
		require.Equal(t, reservation.StatusReserved, loadPost(t, db.DB, post.ID).Status)

		at := c.reserveSoon(t, post.ID)
		c.startRelay(t)
		c.requireOnTime(t, post.ID, at)
		rows := outboxRows(t, db.DB, post.ID)
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, rows[len(rows)-1].EventID, p.EventID, "published under the real reservation")
		require.Equal(t, map[string]int{worker.RefusedContradicted: 1}, c.refused.counts())
	})
}
