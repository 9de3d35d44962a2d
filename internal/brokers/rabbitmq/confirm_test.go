package rabbitmq_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/send/relay"
)

// holdAfterPublishes is a proxy upstream that passes the client's bytes
// frame by frame until it has passed n basic.publish commands (each with
// its content), then holds everything that follows until the connection
// ends: a broker that answered the first n messages and then stopped
// reading.
func holdAfterPublishes(n int) func(client, broker net.Conn) {
	return func(client, broker net.Conn) {
		r := bufio.NewReader(client)
		head := make([]byte, 8) // "AMQP" 0 0 9 1
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		if _, err := broker.Write(head); err != nil {
			return
		}
		published := 0
		for {
			hdr := make([]byte, 7) // type, channel, size
			if _, err := io.ReadFull(r, hdr); err != nil {
				return
			}
			size := binary.BigEndian.Uint32(hdr[3:])
			frame := make([]byte, int(size)+1) // payload and the frame end
			if _, err := io.ReadFull(r, frame); err != nil {
				return
			}
			if hdr[0] == 1 && size >= 4 && binary.BigEndian.Uint16(frame[0:]) == 60 && binary.BigEndian.Uint16(frame[2:]) == 40 {
				published++ // basic.publish
				if published > n {
					_, _ = io.Copy(io.Discard, r) // held: never reaches the broker
					return
				}
			}
			if _, err := broker.Write(append(hdr, frame...)); err != nil {
				return
			}
		}
	}
}

// A chunk whose confirm wait fails part way keeps the answers already in:
// the first message, acked, is reported sent (not unanswered, which would
// make the relay send it again: twice on the queue), a returned one keeps
// its rejection, and only the held rest is unavailable.
func TestAConfirmTimeoutKeepsTheAnswersAlreadyIn(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		passed int
		route  func(post int64) bool // bound to the queue
		first  func(t *testing.T, err error)
	}{
		"acked first": {1, func(int64) bool { return true }, func(t *testing.T, err error) { require.NoError(t, err) }},
		"returned first": {1, func(p int64) bool { return p != 1 }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, rabbitmq.ErrRejected)
			require.False(t, errors.Is(err, relay.ErrUnavailable))
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := rabbitmqtest.URL(t)
			exchange, queue := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("q")
			rabbitmqtest.DeleteAfter(t, url, exchange, queue)
			ch := rabbitmqtest.Channel(t, url)
			require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
			_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
			require.NoError(t, err)
			msgs := onePerPost(t, 3)
			for _, m := range msgs {
				if c.route(m.AggregateID) {
					require.NoError(t, ch.QueueBind(queue, strconv.FormatInt(m.AggregateID, 10), exchange, false, nil))
				}
			}
			proxy := rabbitmqtest.StartProxyWith(t, url, holdAfterPublishes(c.passed))
			s := connectedSender(t, rabbitmq.Config{URL: proxy.URL, Exchange: exchange, Channels: 1, SendTimeout: 3 * time.Second,
				ReconnectBase: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})

			errs := sendWithin(t, s, msgs)
			c.first(t, errs[0])
			for i := 1; i < len(msgs); i++ {
				require.ErrorIs(t, errs[i], relay.ErrUnavailable, "message %d was held", i)
			}
			seen := queued(t, url, queue, 0)
			again := requireHonest(t, msgs, errs, seen)
			require.Len(t, again, 2)
			if c.route(1) {
				require.Equal(t, 1, seen[msgs[0].EventID], "the acked message is on the queue once")
			}
		})
	}
}
