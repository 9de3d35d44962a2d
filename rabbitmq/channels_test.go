package rabbitmq_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay/relaytest/sendertest"
)

// senderWith returns a sender that spreads batches over channels.
func senderWith(t testing.TB, url, exchange string, channels int) *rabbitmq.Sender {
	t.Helper()
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: url, Exchange: exchange, Channels: channels}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// interleaved returns posts x perPost messages, every post's first event,
// then every post's second, ..., with ids in that order.
func interleaved(t testing.TB, posts, perPost int) []outbox.Message {
	t.Helper()
	var msgs []outbox.Message
	for round := range perPost {
		for p := 1; p <= posts; p++ {
			m, err := outbox.NewMessage(eventtest.Outbox(t, event.PostingEvent, int64(p), time.Now(), map[string]any{"action": "UPDATED"}))
			require.NoError(t, err)
			m.ID = int64(round*posts + p)
			msgs = append(msgs, *m)
		}
	}
	return msgs
}

// TestSendOverSeveralChannelsKeepsPostOrder sends one batch holding twenty
// events of each of fifty posts over four channels: every message is
// confirmed, and on the queue each post's events keep the batch's order.
func TestSendOverSeveralChannelsKeepsPostOrder(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.BoundQueue(t, url, exchange)
	s := senderWith(t, url, exchange, 4)
	msgs := interleaved(t, 50, 20)
	for i, err := range s.Send(context.Background(), msgs) {
		require.NoError(t, err, "message %d", i)
	}
	ds := rabbitmqtest.Read(t, url, queue, len(msgs), 30*time.Second)
	require.Len(t, ds, len(msgs))
	seen := sendertest.RequirePostOrder(t, arrivedAll(ds), msgs, false)
	require.Len(t, seen, len(msgs), "every event once")
}

// TestReturnsAreReportedOnEveryChannel binds the queue to the even posts
// only and sends one event of each of forty posts over four channels: the
// odd posts' messages come back returned, whichever channel carried them,
// and only those are rejections.
func TestReturnsAreReportedOnEveryChannel(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.Name("q")
	rabbitmqtest.DeleteAfter(t, url, exchange, queue)
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
	_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	const posts = 40
	for p := 2; p <= posts; p += 2 {
		require.NoError(t, ch.QueueBind(queue, strconv.Itoa(p), exchange, false, nil))
	}
	s := senderWith(t, url, exchange, 4)
	msgs := interleaved(t, posts, 1)
	errs := s.Send(context.Background(), msgs)
	for i, m := range msgs {
		if m.AggregateID%2 == 0 {
			require.NoError(t, errs[i], "post %d is bound", m.AggregateID)
		} else {
			require.ErrorIs(t, errs[i], rabbitmq.ErrRejected, "post %d is not bound", m.AggregateID)
			require.ErrorContains(t, errs[i], "NO_ROUTE")
		}
	}
	ds := rabbitmqtest.Read(t, url, queue, posts/2, 10*time.Second)
	require.Len(t, ds, posts/2)
	for _, d := range ds {
		p, err := strconv.Atoi(d.RoutingKey)
		require.NoError(t, err)
		require.Zero(t, p%2, "post %d delivered", p)
	}
	// Nothing else arrives.
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages)
}

func TestChannelsSetting(t *testing.T) {
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, s.Config().Channels, "default")
	for _, n := range []int{-1, 17} {
		_, err := rabbitmq.NewSender(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Channels: n}, nil)
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "channels %d", n)
		require.Equal(t, "rabbitmq.Config.Channels", ce.Field)
	}
}
