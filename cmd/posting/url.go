package main

import (
	"errors"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/storage/database"
)

func isInvalidURL(err error) bool { return errors.Is(err, database.ErrInvalidURL) }

// redactURL hides a password before a URL is printed.
func redactURL(raw string) string { return config.RedactURL(raw) }
