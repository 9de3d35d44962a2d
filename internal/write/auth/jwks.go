package auth

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/postingsvc/posting/internal/platform/config"
)

// ErrJWKSTooLarge is the failure of a key set fetch whose answer is longer
// than MaxJWKSBytes.
var ErrJWKSTooLarge = errors.New("jwks answer too large")

// errJWKSInsecure is a JWKS URL, or a redirect's target, over http to a
// host that is not loopback.
var errJWKSInsecure = errors.New("must be https: http is accepted only for a loopback host (localhost, 127.0.0.0/8, ::1)")

// checkJWKSScheme refuses http to a host that is not loopback: keys fetched
// in clear over a network could be swapped on the way.
func checkJWKSScheme(u *url.URL) error {
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return errJWKSInsecure
	}
	return nil
}

// maxJWKSRedirects is the redirects a fetch follows, as Go's client does.
const maxJWKSRedirects = 10

// cappedClient is c (nil: http.DefaultClient) with every answer's body cut
// off after max bytes with ErrJWKSTooLarge, and redirects followed only
// where the URL itself may point (https, or http to a loopback host): an
// https provider that redirects to http elsewhere would have the keys
// travel in clear. jwkset decodes the answer as a stream with no bound of
// its own, so the bound sits in the transport.
func cappedClient(c *http.Client, max int64) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	capped := *c
	next := c.CheckRedirect
	capped.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" && req.URL.Scheme != "http" {
			return fmt.Errorf("redirect to %s: must be an https URL", config.RedactURL(req.URL.String()))
		}
		if err := checkJWKSScheme(req.URL); err != nil {
			return fmt.Errorf("redirect to %s: %w", config.RedactURL(req.URL.String()), err)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxJWKSRedirects {
			return fmt.Errorf("stopped after %d redirects", maxJWKSRedirects)
		}
		return nil
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	capped.Transport = capTransport{base: base, max: max}
	return &capped
}

// capTransport bounds the bodies of base's answers.
type capTransport struct {
	base http.RoundTripper
	max  int64
}

func (t capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: Content-Length %d is over the %d bytes accepted", ErrJWKSTooLarge, resp.ContentLength, t.max)
	}
	resp.Body = &capReader{body: resp.Body, left: t.max, max: t.max}
	return resp, nil
}

// capReader reads body until more than left bytes came, then fails.
type capReader struct {
	body io.ReadCloser
	left int64
	max  int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.tooLarge()
	}
	// One byte more than allowed tells an answer of exactly the bound from
	// a longer one.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.body.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, c.tooLarge()
	}
	return n, err
}

func (c *capReader) tooLarge() error {
	return fmt.Errorf("%w: more than %d bytes", ErrJWKSTooLarge, c.max)
}

func (c *capReader) Close() error { return c.body.Close() }

// loopbackHost reports whether host (no port) is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
