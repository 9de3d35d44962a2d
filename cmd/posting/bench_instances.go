package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/postingsvc/posting/bench"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/relay"
)

// relayInstanceCounts are the numbers of relays that drain one backlog
// together: more `serve` processes must not make the drain slower.
var relayInstanceCounts = []int{1, 2, 4}

// benchRelayInstances drains a fresh backlog of --relay-events with 1, 2
// and 4 relays at their default settings at once, each with its own
// producer as each `serve` has, and prints their events/s. seed empties the
// outbox and writes the backlog.
func benchRelayInstances(ctx context.Context, s *settings, b *benchSettings, db *database.DB, brokers []string,
	seed func(n int) error, log *slog.Logger, out io.Writer) error {
	var figures []string
	first := 0.0
	for _, n := range relayInstanceCounts {
		if err := seed(b.RelayEvents); err != nil {
			return err
		}
		senders := make([]relay.Sender, n)
		for i := range senders {
			p, err := kafka.NewProducer(s.producerConfig(brokers), log)
			if err != nil {
				return fmt.Errorf("kafka producer: %w", s.settingError(err))
			}
			defer p.Close()
			senders[i] = p
		}
		res, err := bench.RelayInstances(ctx, db, senders)
		if err != nil {
			return err
		}
		if n == relayInstanceCounts[0] {
			first = res.PerSecond()
		}
		figures = append(figures, fmt.Sprintf("%d: %.0f (%.2f x %d)", n, res.PerSecond(), ratio(res.PerSecond(), first), relayInstanceCounts[0]))
	}
	fmt.Fprintf(out, "  relay events/s, default settings, instances draining one backlog at once: %s\n", strings.Join(figures, ", "))
	return nil
}
