// Package kafka is the only place that knows Kafka clients: a sarama producer
// built for the outbox relay (idempotent, acks from all in-sync replicas, one
// request in flight per broker, keyed by post id), the consumer side of the
// worker, and the in-process Kafka-protocol broker (franz-go's kfake) that
// `posting serve` runs in embedded mode.
//
// The rest of the service sees small interfaces declared where they are used
// (relay.Sender) and the errors of those packages (relay.ErrUnavailable);
// no other package imports sarama.
//
// Files by concern: the producer's settings (producer_config.go, with the
// compression codec), its partitioning, the Java client's murmur2
// (partitioner.go), its sending (producer.go), its probes for readiness and the topic (probe.go),
// and the sorting of send errors into "unavailable" and "rejected"
// (classify.go); the consumer (consumer.go); the embedded broker
// (embedded.go).
package kafka
