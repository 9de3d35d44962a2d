// Package e2e holds the tests whose subject is several components working
// together rather than one unit: the posting binary's serve and worker
// processes on a real database and broker (Kafka, RabbitMQ), through
// PgBouncer or a PostgreSQL failover, checked from outside (HTTP API,
// database rows, topic, webhook calls). It has no code of its own: the
// binary is built and driven with cmd/posting/postingtest, and a unit's
// tests stay in the unit's package.
package e2e
