package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/pflag"

	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/send/relay"
)

// brokerSender is what serve needs of either broker's sender: the relay's
// Sender and Pinger (the ping also answers /readyz).
type brokerSender interface {
	relay.Sender
	relay.Pinger
}

// addRabbitMQFlags adds the settings that switch serve and worker to
// RabbitMQ (docs/brokers.md#rabbitmq).
func addRabbitMQFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.RabbitMQURL, "rabbitmq-url", "", "amqp://user:pass@host:5672/vhost; when set, events go through RabbitMQ instead of Kafka")
	fs.StringVar(&s.RabbitMQExchange, "rabbitmq-exchange", rabbitmq.DefaultExchange, "durable topic exchange that receives both event types (serve declares it)")
	showEnvTwins(fs)
}

// addServeRabbitMQFlags adds serve's own RabbitMQ settings.
func addServeRabbitMQFlags(fs *pflag.FlagSet, s *settings) {
	fs.BoolVar(&s.RabbitMQDeclare, "rabbitmq-declare-queue", true, "serve declares and binds the worker group's queue (POSTING_WORKER_GROUP) at start, as the worker does, so events sent before the first worker runs wait in it; false: the worker alone declares it")
	showEnvTwins(fs)
}

// validateBrokerChoice refuses both brokers at once: which one the events
// go through must be the operator's choice, never a guess.
func (s *settings) validateBrokerChoice() error {
	if s.RabbitMQURL != "" && len(s.KafkaBrokers) > 0 {
		return usageError{fmt.Errorf("POSTING_RABBITMQ_URL and POSTING_KAFKA_BROKERS are both set: choose one broker (unset POSTING_KAFKA_BROKERS to use RabbitMQ, or POSTING_RABBITMQ_URL to use Kafka)")}
	}
	return nil
}

// brokerName names the broker in /readyz and logs.
func brokerName(s *settings) string {
	if s.RabbitMQURL != "" {
		return "rabbitmq"
	}
	return "kafka"
}

func (s *settings) rabbitmqConfig() rabbitmq.Config {
	c := rabbitmq.DefaultConfig()
	c.URL, c.Exchange = s.RabbitMQURL, s.RabbitMQExchange
	return c
}

func newRabbitSender(s *settings, log *slog.Logger) (*rabbitmq.Sender, error) {
	rs, err := rabbitmq.NewSender(s.rabbitmqConfig(), log)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq sender: %w", s.settingError(err))
	}
	return rs, nil
}

// declareExchange connects the sender, which declares the exchange, within
// 15 s: serve does not start against a broker it cannot reach, as it does
// not against a Kafka cluster without the topic.
func declareExchange(ctx context.Context, s *settings, rs *rabbitmq.Sender) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	b := backoff.Backoff{Base: 250 * time.Millisecond, Max: 2 * time.Second}
	var cause error // the broker's last own answer, kept past a probe that timed out
	for {
		err := rs.Ping(ctx)
		if err == nil {
			return nil
		}
		var refused *amqp.Error
		if errors.As(err, &refused) {
			cause = err
			if !refused.Recover {
				// A wrong password, a missing vhost, no permission: trying
				// again for 15 s changes nothing.
				return fmt.Errorf("rabbitmq refused the connection (POSTING_RABBITMQ_URL=%s): %s (%d)",
					redactURL(s.RabbitMQURL), refused.Reason, refused.Code)
			}
		}
		if !backoff.Sleep(ctx, b.Next()) {
			if cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w; before that: %w", err, cause)
			}
			return fmt.Errorf("rabbitmq exchange %s (POSTING_RABBITMQ_URL=%s): %w", s.RabbitMQExchange, redactURL(s.RabbitMQURL), err)
		}
	}
}

// declareWorkerQueue declares the worker group's queue as the worker does
// (rabbitmq.DeclareQueue), within 15 s, unless POSTING_RABBITMQ_DECLARE_QUEUE
// is false.
func declareWorkerQueue(ctx context.Context, s *settings) error {
	if !s.RabbitMQDeclare {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c := s.rabbitmqConsumerConfig()
	if err := rabbitmq.DeclareQueue(ctx, c.URL, c.Exchange, c.Queue, rabbitmq.DefaultConfig().DialTimeout); err != nil {
		return fmt.Errorf("rabbitmq queue of the worker group %s (POSTING_WORKER_GROUP; POSTING_RABBITMQ_DECLARE_QUEUE=false leaves it to the worker): %w", c.Queue, err)
	}
	return nil
}

// rabbitmqConsumerConfig reads the worker group's queue: the queue is named
// after POSTING_WORKER_GROUP, as the Kafka consumer group is.
func (s *settings) rabbitmqConsumerConfig() rabbitmq.ConsumerConfig {
	c := rabbitmq.DefaultConsumerConfig()
	c.URL, c.Exchange, c.Queue = s.RabbitMQURL, s.RabbitMQExchange, s.WorkerGroup
	return c
}
