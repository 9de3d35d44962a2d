package config

import "net/url"

// RedactURL returns raw with the password of its user information replaced
// by "xxxxx", for logs and error messages: a URL setting may carry
// credentials (a database's, a webhook receiver's basic auth). A value that
// does not parse is not shown at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
