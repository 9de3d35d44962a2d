package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/send/relay"
)

// ErrProducerTopicMissing is returned by CheckTopic when the topic does not
// exist and the cluster did not create it.
var ErrProducerTopicMissing = errors.New("kafka topic does not exist")

// Ping reports whether a broker answers a metadata request within
// ProbeTimeout (or ctx), for readiness checks. It does not use or disturb the
// sending connections. A failure wraps relay.ErrUnavailable.
func (p *Producer) Ping(ctx context.Context) error {
	_, err := p.probe(ctx, false)
	return err
}

// CheckTopic reports whether the topic exists. It asks with auto-creation
// allowed, so a cluster with auto.create.topics.enable creates it here; we
// never create it ourselves. A missing topic is an error wrapping
// ErrProducerTopicMissing that names it.
func (p *Producer) CheckTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	for {
		md, err := p.probe(ctx, true)
		if err != nil {
			return err
		}
		var tm *sarama.TopicMetadata
		for _, t := range md.Topics {
			if t.Name == p.cfg.Topic {
				tm = t
			}
		}
		switch {
		case tm == nil || errors.Is(tm.Err, sarama.ErrUnknownTopicOrPartition) || errors.Is(tm.Err, sarama.ErrInvalidTopic):
			return fmt.Errorf("%w: %q on %s: create it, or enable auto.create.topics.enable on the cluster", ErrProducerTopicMissing, p.cfg.Topic, strings.Join(p.cfg.Brokers, ","))
		case errors.Is(tm.Err, sarama.ErrLeaderNotAvailable):
			// The cluster is creating it: ask again shortly.
		case tm.Err != sarama.ErrNoError:
			return fmt.Errorf("kafka topic %q: %s (%d): %w", p.cfg.Topic, producerCodeName(int16(tm.Err)), int16(tm.Err), tm.Err)
		case len(tm.Partitions) > 0:
			return nil
		}
		if !backoff.Sleep(ctx, p.cfg.RetryBackoff) {
			return fmt.Errorf("%w: kafka topic %q has no leader yet: %w", relay.ErrUnavailable, p.cfg.Topic, ctx.Err())
		}
	}
}

// probe sends one metadata request for the topic to the first broker that
// answers, on a connection of its own.
func (p *Producer) probe(ctx context.Context, autoCreate bool) (*sarama.MetadataResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	type result struct {
		md  *sarama.MetadataResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		var errs []error
		for _, addr := range p.cfg.Brokers {
			md, err := producerProbeBroker(addr, p.pconf, p.cfg.Topic, autoCreate)
			if err == nil {
				done <- result{md: md}
				return
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		done <- result{err: errors.Join(errs...)}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: no kafka broker answered: %w", relay.ErrUnavailable, r.err)
		}
		return r.md, nil
	case <-ctx.Done():
		// The probe goroutine ends on its own within its network timeouts.
		return nil, fmt.Errorf("%w: no kafka broker answered: %w", relay.ErrUnavailable, ctx.Err())
	}
}

func producerProbeBroker(addr string, conf *sarama.Config, topic string, autoCreate bool) (*sarama.MetadataResponse, error) {
	b := sarama.NewBroker(addr)
	if err := b.Open(conf); err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }() // a probe connection; nothing to flush
	req := sarama.NewMetadataRequest(conf.Version, []string{topic})
	req.AllowAutoTopicCreation = autoCreate
	return b.GetMetadata(req)
}

// ProducerRejectedError is a message the broker refused, or sarama refused
// before sending (too large, not encodable). Sending it again is expected to
