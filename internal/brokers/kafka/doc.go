// Package kafka is the only package that knows Kafka clients: the relay's
// producer, the worker's consumer and the in-process broker of embedded mode.
package kafka
