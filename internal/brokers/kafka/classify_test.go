package kafka

import (
	"fmt"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/postingsvc/posting/internal/send/relay"
)

// Every Kafka code the producer treats as "the cluster cannot take it now"
// is listed here by hand, not read from producerUnavailableCodes: dropping
// one of them from the producer (an outage would then spend a retry of
// every row in flight and could turn a backlog into FAIL) must fail this
// test. A sample of rejection codes, wrapped as sarama returns them, must
// stay rejections: they spend an attempt.
func TestProducerClassifiesEveryUnavailableCode(t *testing.T) {
	t.Parallel()
	unavailable := []sarama.KError{
		sarama.ErrUnknownTopicOrPartition,         // 3
		sarama.ErrLeaderNotAvailable,              // 5
		sarama.ErrNotLeaderForPartition,           // 6
		sarama.ErrRequestTimedOut,                 // 7
		sarama.ErrBrokerNotAvailable,              // 8
		sarama.ErrReplicaNotAvailable,             // 9
		sarama.ErrNetworkException,                // 13
		sarama.ErrOffsetsLoadInProgress,           // 14
		sarama.ErrConsumerCoordinatorNotAvailable, // 15
		sarama.ErrNotCoordinatorForConsumer,       // 16
		sarama.ErrNotEnoughReplicas,               // 19
		sarama.ErrNotEnoughReplicasAfterAppend,    // 20
		sarama.ErrNotController,                   // 41
		sarama.ErrOutOfOrderSequenceNumber,        // 45
		sarama.ErrInvalidProducerEpoch,            // 47
		sarama.ErrConcurrentTransactions,          // 51
		sarama.ErrKafkaStorageError,               // 56
		sarama.ErrUnknownProducerID,               // 59
		sarama.ErrFencedLeaderEpoch,               // 74
		sarama.ErrUnknownLeaderEpoch,              // 75
		sarama.ErrOffsetNotAvailable,              // 78
		sarama.ErrPreferredLeaderNotAvailable,     // 80
		sarama.ErrEligibleLeadersNotAvailable,     // 83
		sarama.ErrThrottlingQuotaExceeded,         // 89
		// The transactional producer's state: a fresh client resets it.
		sarama.ErrInvalidTxnState,                     // 48
		sarama.ErrInvalidProducerIDMapping,            // 49
		sarama.ErrTransactionCoordinatorFenced,        // 52
		sarama.ErrProducerFenced,                      // 90
		sarama.KError(kerr.TransactionAbortable.Code), // 120
	}
	require.Len(t, unavailable, 29)
	for _, code := range unavailable {
		// send hands producerClassify the code of each failed message.
		got := producerClassify(code)
		require.ErrorIs(t, got, relay.ErrUnavailable, "code %d (%s) must not spend an attempt", int16(code), producerCodeName(int16(code)))
		require.ErrorIs(t, got, code, "keeps the cause")
		var rej *ProducerRejectedError
		require.NotErrorAs(t, got, &rej, "code %d", int16(code))
		require.Contains(t, got.Error(), producerCodeName(int16(code)), "the code is named in last_error and logs")
	}
	require.Len(t, producerUnavailableCodes, len(unavailable),
		"the producer's list changed: list every unavailable code in this test too")

	for _, code := range []sarama.KError{
		sarama.ErrInvalidMessage,              // 2 CORRUPT_MESSAGE
		sarama.ErrMessageSizeTooLarge,         // 10
		sarama.ErrInvalidTopic,                // 17
		sarama.ErrMessageSetSizeTooLarge,      // 18
		sarama.ErrInvalidRequiredAcks,         // 21
		sarama.ErrTopicAuthorizationFailed,    // 29
		sarama.ErrUnsupportedForMessageFormat, // 43
		sarama.ErrPolicyViolation,             // 44
		sarama.ErrDuplicateSequenceNumber,     // 46
		sarama.ErrInvalidRecord,               // 87
	} {
		got := producerClassify(fmt.Errorf("send: %w", code))
		require.NotErrorIs(t, got, relay.ErrUnavailable, "code %d (%s) is a rejection", int16(code), producerCodeName(int16(code)))
		var rej *ProducerRejectedError
		require.ErrorAs(t, got, &rej, "code %d", int16(code))
		require.Equal(t, int16(code), rej.Code)
		require.Equal(t, producerCodeName(int16(code)), rej.Name)
	}
}
