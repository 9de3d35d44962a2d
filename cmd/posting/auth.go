package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/auth"
)

// defaultWriteRate is POSTING_API_WRITE_RATE's default: 50 writes per
// second per caller, far above a person's pace, low enough that one
// runaway client cannot fill the outbox.
const defaultWriteRate = "50/s"

// addAuthFlags adds the settings of the posts API's authentication.
func addAuthFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.AuthJWTSecret, "auth-jwt-secret", "", "HS256 key (at least 32 bytes) that bearer JWTs on /api/v1 are verified with; prefer the environment variable")
	fs.StringVar(&s.AuthJWKSURL, "auth-jwks-url", "", "JWKS endpoint (https; http only to a loopback host) of an identity provider whose keys (RS*, PS*, ES*, EdDSA) verify bearer JWTs on /api/v1; answers over 1 MiB are refused")
	fs.StringVar(&s.AuthIssuer, "auth-issuer", "", "required iss of a token; empty: not checked")
	fs.StringVar(&s.AuthAudience, "auth-audience", "", "required aud of a token; empty: not checked")
	showEnvTwins(fs)
}

// addServeAuthFlags adds the settings only serve has: opening the API on
// purpose and the write limit.
func addServeAuthFlags(fs *pflag.FlagSet, s *settings) {
	fs.BoolVar(&s.AuthDisabled, "auth-disabled", false, "true opens /api/v1 to anyone, on purpose, also on a non-loopback address")
	fs.StringVar(&s.APIWriteRate, "api-write-rate", defaultWriteRate, "writes per caller (token subject, else client IP) on /api/v1: N/s, N/m, N/h or N/<duration>, or off")
	showEnvTwins(fs)
}

// authConfigured reports whether tokens are verified.
func (s *settings) authConfigured() bool { return s.AuthJWTSecret != "" || s.AuthJWKSURL != "" }

func (s *settings) authConfig() auth.Config {
	return auth.Config{Secret: []byte(s.AuthJWTSecret), JWKSURL: s.AuthJWKSURL, Issuer: s.AuthIssuer, Audience: s.AuthAudience}
}

// validateAuth checks the authentication settings of serve, and refuses to
// open the API to a network without them: no key and a non-loopback
// POSTING_HTTP_ADDR needs POSTING_AUTH_DISABLED=true.
func (s *settings) validateAuth() error {
	if _, err := parseWriteRate(s.APIWriteRate); err != nil {
		return badSetting("POSTING_API_WRITE_RATE", s.APIWriteRate, err)
	}
	if s.AuthDisabled && s.authConfigured() {
		return usageError{errors.New("POSTING_AUTH_DISABLED=true together with POSTING_AUTH_JWT_SECRET or POSTING_AUTH_JWKS_URL: " +
			"unset one, so it is clear whether the API is open")}
	}
	if s.authConfigured() {
		if err := s.authConfig().Validate(); err != nil {
			return authSettingError(err)
		}
		return nil
	}
	if s.AuthIssuer != "" || s.AuthAudience != "" {
		return usageError{errors.New("POSTING_AUTH_ISSUER or POSTING_AUTH_AUDIENCE is set but no key: " +
			"set POSTING_AUTH_JWT_SECRET or POSTING_AUTH_JWKS_URL")}
	}
	if !s.AuthDisabled && !loopback(s.HTTPAddr) {
		return usageError{fmt.Errorf("POSTING_HTTP_ADDR=%s is not a loopback address and the API has no authentication: "+
			"set POSTING_AUTH_JWT_SECRET or POSTING_AUTH_JWKS_URL, or POSTING_AUTH_DISABLED=true to open it to anyone on purpose", s.HTTPAddr)}
	}
	return nil
}

// authSettingError names the setting behind a refused auth.Config field;
// the secret's value is never shown.
func authSettingError(err error) error {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Field {
	case "auth.Config.Secret":
		return usageError{fmt.Errorf("invalid POSTING_AUTH_JWT_SECRET (%v): %v", ce.Value, ce.Err)}
	case "auth.Config.JWKSURL":
		return badSetting("POSTING_AUTH_JWKS_URL", fmt.Sprint(ce.Value), ce.Err)
	}
	return err
}

// loopback reports whether addr (host:port) listens on loopback only:
// localhost or a loopback IP. An empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseWriteRate reads POSTING_API_WRITE_RATE: "N/s", "N/m", "N/h",
// "N/<Go duration>" (at least 1s), or "off" for none.
func parseWriteRate(v string) (api.WriteLimit, error) {
	if strings.EqualFold(v, "off") {
		return api.WriteLimit{}, nil
	}
	const want = "want N/s, N/m, N/h or N/<duration> with N >= 1 and a duration of at least 1s, such as 50/s, or off"
	n, per, ok := strings.Cut(v, "/")
	if !ok {
		return api.WriteLimit{}, errors.New(want)
	}
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 {
		return api.WriteLimit{}, errors.New(want)
	}
	var window time.Duration
	switch per {
	case "s":
		window = time.Second
	case "m":
		window = time.Minute
	case "h":
		window = time.Hour
	default:
		window, err = time.ParseDuration(per)
		if err != nil || window < time.Second {
			return api.WriteLimit{}, errors.New(want)
		}
	}
	return api.WriteLimit{Requests: count, Window: window}, nil
}

// newVerifier returns the API's verifier, or nil (and a warning, once)
// when the API is open.
func newVerifier(s *settings, log *slog.Logger) (*auth.Verifier, error) {
	if !s.authConfigured() {
		reason := "POSTING_HTTP_ADDR is a loopback address"
		if s.AuthDisabled {
			reason = "POSTING_AUTH_DISABLED=true"
		}
		log.Warn("the API is unauthenticated: anyone who reaches it can read, change and cancel every post",
			"component", "auth", "addr", s.HTTPAddr, "because", reason,
			"to_protect", "set POSTING_AUTH_JWT_SECRET or POSTING_AUTH_JWKS_URL")
		return nil, nil
	}
	cfg := s.authConfig()
	cfg.Logger = log
	v, err := auth.New(cfg)
	if err != nil {
		return nil, authSettingError(err)
	}
	log.Info("the API requires bearer JWTs", "component", "auth", "hs256", len(cfg.Secret) > 0,
		"jwks_url", redactURL(cfg.JWKSURL), "issuer", cfg.Issuer, "audience", cfg.Audience)
	return v, nil
}

// newTokenCommand is `posting token`: an HS256 token signed with the
// configured secret, to try the API out.
func newTokenCommand() *cobra.Command {
	var (
		s      settings
		sub    string
		scopes []string
		ttl    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --sub NAME [--scope posts:admin] [--ttl 1h]",
		Short: "Print a bearer JWT signed with POSTING_AUTH_JWT_SECRET, for trying the API out",
		Long: "Prints an HS256 JWT for the subject, signed with POSTING_AUTH_JWT_SECRET and carrying\n" +
			"POSTING_AUTH_ISSUER and POSTING_AUTH_AUDIENCE when they are set, so serve accepts it.\n" +
			"Use it as: curl -H \"Authorization: Bearer $(posting token --sub alice)\" ...",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			if s.AuthJWTSecret == "" {
				return usageError{errors.New("no POSTING_AUTH_JWT_SECRET: posting token signs with it (a JWKS provider's tokens come from the provider)")}
			}
			if len(s.AuthJWTSecret) < auth.MinSecretLength {
				return usageError{fmt.Errorf("invalid POSTING_AUTH_JWT_SECRET (%d bytes): must be at least %d bytes", len(s.AuthJWTSecret), auth.MinSecretLength)}
			}
			if sub == "" {
				return usageError{errors.New("--sub is required")}
			}
			if ttl <= 0 {
				return usageError{fmt.Errorf("invalid --ttl=%s: must be positive", ttl)}
			}
			var words []string
			for _, sc := range scopes {
				words = append(words, strings.Fields(sc)...)
			}
			tok, err := auth.Mint([]byte(s.AuthJWTSecret), auth.Token{Subject: sub, Scopes: words, TTL: ttl,
				Issuer: s.AuthIssuer, Audience: s.AuthAudience})
			if err != nil {
				return usageError{err}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	addAuthFlags(cmd.Flags(), &s)
	cmd.Flags().StringVar(&sub, "sub", "", "the token's subject: the owner of the posts it creates")
	cmd.Flags().StringArrayVar(&scopes, "scope", nil, "a scope to grant, such as "+auth.AdminScope+" (repeatable)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	return cmd
}

// operatorSource is the source of an audit line of a CLI action: "cli" and
// the OS user running it.
func operatorSource() []any {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if v := os.Getenv("USER"); v != "" {
		name = v
	}
	return []any{"source", "cli", "os_user", name}
}
