package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// ErrUnparseableURL is ParseURL's error for a value that is not a URL.
var ErrUnparseableURL = errors.New("cannot be parsed as a URL")

// redacted replaces a secret in RedactURL's answer.
const redacted = "xxxxx"

// quoted is a quoted part of url.Parse's reason: a piece of the value.
var quoted = regexp.MustCompile(`\s*"(?:[^"\\]|\\.)*"`)

// ParseURL is url.Parse with an error that quotes nothing of raw.
// url.Parse's own error repeats the whole value, and its reason quotes a
// piece of it: a password holding / or # cuts the authority short, and the
// rest of the password is quoted as the port.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil {
		return u, nil
	}
	reason := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		reason = ue.Err.Error()
	}
	reason = strings.TrimPrefix(quoted.ReplaceAllString(reason, ""), "net/url: ")
	return nil, fmt.Errorf("%w (%s; percent-encode / # ? @ : %% in a password)", ErrUnparseableURL, reason)
}

// RedactURL returns raw for logs and error messages with its secrets
// replaced by "xxxxx": the password of its user information, that of a
// go-sql-driver DSN (user:pass@tcp(host)/db), and the value of a query
// parameter named like a password, secret or token (PostgreSQL reads
// password=). A value that does not parse is not shown at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.Opaque != "" {
		// "user:pass@host" without //: the scheme is the user, the opaque
		// part starts with the password.
		if i := strings.LastIndex(u.Opaque, "@"); i >= 0 {
			u.Opaque = redacted + u.Opaque[i:]
		}
	}
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, pair := range pairs {
			k, _, _ := strings.Cut(pair, "=")
			if name, err := url.QueryUnescape(k); err != nil || secretParam(name) {
				pairs[i] = k + "=" + redacted
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.Redacted()
}

// secretParam reports whether a query parameter's value is a secret.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"pass", "pwd", "secret", "token", "key"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// RedactError returns err's message with the URL of every *url.Error in its
// chain shown by RedactURL: net/http's errors repeat the request's URL with
// only its password masked, a token in its query shown.
func RedactError(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		if ue.URL != "" {
			msg = strings.ReplaceAll(msg, ue.URL, RedactURL(ue.URL))
		}
		e = ue.Err
	}
	return msg
}
