package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/postingsvc/posting/database"
)

// This file holds the refusals of configurations that split the chain
// outbox → broker → inbox → publication between two databases or two
// brokers (issue 34): each is found at start and stops the command with
// exit status 2, naming the setting to change.

// validateSharedDatabase refuses a serve or worker that would talk to an
// external broker from the embedded SQLite file. The broker is shared with
// the rest of the setup, the file is not: a worker would take the setup's
// events into the file and publish nothing, a serve would send events of
// posts no other worker's database holds. It runs with the other settings'
// checks, before anything is opened.
func (s *settings) validateSharedDatabase(command string) error {
	if s.DatabaseURL != "" {
		return nil // an explicit URL, sqlite:// included, is the operator's choice
	}
	var broker, verb string
	switch {
	case s.RabbitMQURL != "":
		broker = "RabbitMQ at POSTING_RABBITMQ_URL=" + redactURL(s.RabbitMQURL)
	case len(s.KafkaBrokers) > 0:
		broker = "the Kafka brokers POSTING_KAFKA_BROKERS=" + strings.Join(s.KafkaBrokers, ",")
	default:
		return nil // embedded: serve and its worker share the file
	}
	switch command {
	case "worker":
		verb = "reads events from"
	default:
		verb = "sends events to"
	}
	file := filepath.Join(s.DataDir, database.EmbeddedFileName)
	return usageError{fmt.Errorf("POSTING_DATABASE_URL is not set, so this %s would use the embedded SQLite file %s "+
		"while it %s %s: its events would go into a private SQLite file, not the database the rest of the setup uses. "+
		"Set POSTING_DATABASE_URL to the database of your serve instances (an explicit sqlite:// URL is allowed)",
		command, file, verb, broker)}
}
