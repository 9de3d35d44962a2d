package main

import (
	"errors"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/database"
)

func isInvalidURL(err error) bool { return errors.Is(err, database.ErrInvalidURL) }

// redactURL hides a password before a URL is printed.
func redactURL(raw string) string { return config.RedactURL(raw) }
