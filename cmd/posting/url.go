package main

import (
	"errors"
	"net/url"

	"github.com/postingsvc/posting/database"
)

func isInvalidURL(err error) bool { return errors.Is(err, database.ErrInvalidURL) }

// redactURL hides a password before a URL is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
