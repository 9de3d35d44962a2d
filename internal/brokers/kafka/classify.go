package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/postingsvc/posting/internal/send/relay"
)

type ProducerRejectedError struct {
	// Code is the Kafka error code, or 0 when sarama refused the message
	// before sending it.
	Code int16
	// Name is the protocol name of Code, such as INVALID_RECORD.
	Name string
	// Err is sarama's error.
	Err error
}

// Error names the code, which the relay stores as the row's last error.
func (e *ProducerRejectedError) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("kafka producer refused the message: %v", e.Err)
	}
	return fmt.Sprintf("kafka broker rejected the message: %s (%d): %v", e.Name, e.Code, e.Err)
}

// Unwrap returns sarama's error.
func (e *ProducerRejectedError) Unwrap() error { return e.Err }

// producerUnavailableCodes are the Kafka errors that say "not now" about the
// cluster, not "never" about the message: leadership moving, replicas
// missing, timeouts, a topic not (yet) there, and the idempotent or
// transactional producer's own state (sequences, epoch, a producer that
// another one with its transactional id fenced, a transaction that must be
// aborted), which a fresh producer resets.
var producerUnavailableCodes = map[sarama.KError]bool{
	sarama.ErrUnknownTopicOrPartition:         true,
	sarama.ErrLeaderNotAvailable:              true,
	sarama.ErrNotLeaderForPartition:           true,
	sarama.ErrRequestTimedOut:                 true,
	sarama.ErrBrokerNotAvailable:              true,
	sarama.ErrReplicaNotAvailable:             true,
	sarama.ErrNetworkException:                true,
	sarama.ErrOffsetsLoadInProgress:           true,
	sarama.ErrConsumerCoordinatorNotAvailable: true,
	sarama.ErrNotCoordinatorForConsumer:       true,
	sarama.ErrNotEnoughReplicas:               true,
	sarama.ErrNotEnoughReplicasAfterAppend:    true,
	sarama.ErrNotController:                   true,
	sarama.ErrOutOfOrderSequenceNumber:        true,
	sarama.ErrInvalidProducerEpoch:            true,
	sarama.ErrConcurrentTransactions:          true,
	sarama.ErrKafkaStorageError:               true,
	sarama.ErrUnknownProducerID:               true,
	sarama.ErrFencedLeaderEpoch:               true,
	sarama.ErrUnknownLeaderEpoch:              true,
	sarama.ErrOffsetNotAvailable:              true,
	sarama.ErrPreferredLeaderNotAvailable:     true,
	sarama.ErrEligibleLeadersNotAvailable:     true,
	sarama.ErrThrottlingQuotaExceeded:         true,
	// The transactional producer's state: franz-go fails every record
	// buffered in a transaction whose coordinator answered one of these.
	sarama.ErrProducerFenced:                      true,
	sarama.ErrInvalidTxnState:                     true,
	sarama.ErrInvalidProducerIDMapping:            true,
	sarama.ErrTransactionCoordinatorFenced:        true,
	sarama.KError(kerr.TransactionAbortable.Code): true,
}

// producerClassify turns a sarama send error into relay.ErrUnavailable (the
// cluster could not take it now) or a *ProducerRejectedError (this message
// was refused). Errors that are not Kafka codes are connection trouble
// (ErrOutOfBrokers, ErrNotConnected, ErrClosedClient, ErrShuttingDown,
// network errors, timeouts) unless sarama refused the message itself.
func producerClassify(err error) error {
	var kerrCode sarama.KError
	if errors.As(err, &kerrCode) {
		return classifyCode(int16(kerrCode), err)
	}
	var confErr sarama.ConfigurationError
	var encErr sarama.PacketEncodingError
	if errors.As(err, &confErr) || errors.As(err, &encErr) {
		return &ProducerRejectedError{Err: err}
	}
	return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
}

// classifyCode classifies a Kafka error code the broker (or the client,
// for a record it refuses) answered, err being the client's error.
func classifyCode(code int16, err error) error {
	if producerUnavailableCodes[sarama.KError(code)] {
		return fmt.Errorf("%w: %s: %w", relay.ErrUnavailable, producerCodeName(code), err)
	}
	return &ProducerRejectedError{Code: code, Name: producerCodeName(code), Err: err}
}

// producerCodeName is the protocol name of a Kafka error code.
func producerCodeName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) && ke.Code == code {
		return ke.Message
	}
	return fmt.Sprintf("ERROR_%d", code)
}
