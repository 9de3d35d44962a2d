// Package auth authenticates the callers of the posts API: it verifies a
// request's bearer JWT and gives the handlers the Caller it names.
package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/postingsvc/posting/internal/platform/config"
)

// AdminScope is the scope that lets a caller see and change every post.
const AdminScope = "posts:admin"

// MinSecretLength is the shortest HS256 secret accepted, in bytes: RFC 7518
// 3.2 asks for a key at least as long as the hash (256 bits).
const MinSecretLength = 32

// MaxSubjectLength is the longest sub accepted, in characters: the posts
// table keeps the owner in VARCHAR(255).
const MaxSubjectLength = 255

// Defaults of Config.
const (
	DefaultLeeway             = 30 * time.Second
	DefaultJWKSRefresh        = time.Hour
	DefaultJWKSUnknownKIDWait = 30 * time.Second
	DefaultJWKSTimeout        = 10 * time.Second
)

// MaxJWKSBytes bounds the JWKS answer read: a key set is a few kilobytes, and
// a provider (or whoever answers in its place) sending more must not grow the
// process's memory. A larger answer is refused and logged; the keys held
// before stay in use.
const MaxJWKSBytes = 1 << 20

// MaxTokenBytes bounds a bearer token's length: a longer one is refused
// before any of it is decoded, so an unauthenticated caller cannot make the
// service parse a claims set of megabytes. 16 KiB holds the largest tokens
// identity providers issue (group and role claims included).
const MaxTokenBytes = 16 << 10

// MaxHeaderBytes bounds the encoded JOSE header that is decoded to find the
// key before the signature is checked (an x5c certificate chain fits).
const MaxHeaderBytes = 8 << 10

// HMACMethods are the algorithms a token verified with Config.Secret may
// use; AsymmetricMethods those a token verified with a JWKS key may use.
// "none" is in neither, and a token is checked against the key of its own
// family only, so an RSA public key can never serve as an HMAC secret.
var (
	HMACMethods       = []string{"HS256"}
	AsymmetricMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

// ErrUnauthorized is wrapped by every refusal of Verify; the wrapping
// error's text says what was wrong, without the token.
var ErrUnauthorized = errors.New("unauthorized")

// Config configures a Verifier. At least one of Secret and JWKSURL is
// required.
type Config struct {
	// Secret verifies HS256 tokens; empty: none accepted. At least
	// MinSecretLength (32) bytes.
	Secret []byte
	// JWKSURL is an identity provider's JWKS endpoint: RS*, PS*, ES* and
	// EdDSA tokens are verified with the key named by their kid. https, or
	// http only to a loopback host (a local provider or a test): keys
	// fetched in clear over a network could be swapped on the way. Empty:
	// none accepted.
	JWKSURL string
	// Issuer, when set, is the required iss claim. Default "": not checked.
	Issuer string
	// Audience, when set, must be one of the token's aud. Default "": not
	// checked.
	Audience string
	// Leeway is the clock skew allowed for exp and nbf. Default
	// DefaultLeeway (30s); 0..5m.
	Leeway time.Duration
	// Now is the clock of exp and nbf. Default time.Now.
	Now func() time.Time
	// JWKSRefresh is how often the key set is fetched again. Default
	// DefaultJWKSRefresh (1h); at least 1s.
	JWKSRefresh time.Duration
	// JWKSUnknownKIDWait is the least time between two fetches caused by a
	// token whose kid is not in the cached set (a rotated key): a flood of
	// unknown kids costs the provider one request per interval. Default
	// DefaultJWKSUnknownKIDWait (30s); at least 1ms.
	JWKSUnknownKIDWait time.Duration
	// JWKSTimeout bounds one fetch of the key set. Default
	// DefaultJWKSTimeout (10s).
	JWKSTimeout time.Duration
	// HTTPClient fetches the key set; its answers are read up to
	// MaxJWKSBytes. Default http.DefaultClient.
	HTTPClient *http.Client
	// Logger receives failed key set fetches. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.JWKSRefresh == 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if c.JWKSUnknownKIDWait == 0 {
		c.JWKSUnknownKIDWait = DefaultJWKSUnknownKIDWait
	}
	if c.JWKSTimeout == 0 {
		c.JWKSTimeout = DefaultJWKSTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a missing or out-of-range setting as a *config.Error; a
// zero field stands for its default. The secret's value is never part of the
// error.
func (c Config) Validate() error {
	const f = "auth.Config."
	if len(c.Secret) == 0 && c.JWKSURL == "" {
		return config.Invalid(f+"Secret", nil, "or JWKSURL must be set")
	}
	if len(c.Secret) > 0 && len(c.Secret) < MinSecretLength {
		return config.Invalid(f+"Secret", fmt.Sprintf("<%d bytes>", len(c.Secret)),
			"must be at least %d bytes (HS256 wants a key as long as its hash)", MinSecretLength)
	}
	if c.JWKSURL != "" {
		// The URL may carry basic auth: the refusal shows it redacted.
		u, err := config.ParseURL(c.JWKSURL)
		if err != nil {
			return config.Invalid(f+"JWKSURL", config.RedactURL(c.JWKSURL), "%w", err)
		}
		if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return config.Invalid(f+"JWKSURL", config.RedactURL(c.JWKSURL), "must be an https URL")
		}
		if err := checkJWKSScheme(u); err != nil {
			return config.Invalid(f+"JWKSURL", config.RedactURL(c.JWKSURL), "%w", err)
		}
	}
	if c.Leeway < 0 || c.Leeway > 5*time.Minute {
		return config.Invalid(f+"Leeway", c.Leeway, "want 0..5m")
	}
	if c.JWKSRefresh != 0 && c.JWKSRefresh < time.Second {
		return config.Invalid(f+"JWKSRefresh", c.JWKSRefresh, "want at least 1s")
	}
	if c.JWKSUnknownKIDWait != 0 && c.JWKSUnknownKIDWait < time.Millisecond {
		return config.Invalid(f+"JWKSUnknownKIDWait", c.JWKSUnknownKIDWait, "want at least 1ms")
	}
	if c.JWKSTimeout < 0 {
		return config.Invalid(f+"JWKSTimeout", c.JWKSTimeout, "must be positive")
	}
	return nil
}

// Caller is the authenticated subject of a request.
type Caller struct {
	// Subject is the token's sub.
	Subject string
	// Scopes are the space-separated words of the token's scope claim.
	Scopes []string
}

// Admin reports whether the caller has AdminScope.
func (c Caller) Admin() bool { return slices.Contains(c.Scopes, AdminScope) }

// Verifier verifies bearer JWTs. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	jwks   keyfunc.Keyfunc // nil without a JWKS URL
	cancel context.CancelFunc
}

// New returns a Verifier. With a JWKS URL it fetches the key set once
// (a failure is logged, not returned: the provider may come up later, and
// a token with an unknown kid fetches again) and then every JWKSRefresh,
// until Close.
func New(cfg Config) (*Verifier, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid auth config: %w", err)
	}
	var methods []string
	if len(cfg.Secret) > 0 {
		methods = append(methods, HMACMethods...)
	}
	if cfg.JWKSURL != "" {
		methods = append(methods, AsymmetricMethods...)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithExpirationRequired(),
		// An iat later than the clock plus the leeway: a token from the
		// future is refused like one not valid yet.
		jwt.WithIssuedAt(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v := &Verifier{cfg: cfg, parser: jwt.NewParser(opts...), cancel: func() {}}
	if cfg.JWKSURL != "" {
		ctx, cancel := context.WithCancel(context.Background())
		noFail := true
		log := cfg.Logger
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
			Client:                    cappedClient(cfg.HTTPClient, MaxJWKSBytes),
			HTTPTimeout:               cfg.JWKSTimeout,
			NoErrorReturnFirstHTTPReq: &noFail,
			RefreshInterval:           cfg.JWKSRefresh,
			RefreshUnknownKID:         rate.NewLimiter(rate.Every(cfg.JWKSUnknownKIDWait), 1),
			// A request with an unknown kid waits for the limiter at most
			// this long; when the next fetch is further away it is refused
			// at once instead of holding a connection.
			RateLimitWaitMax: cfg.JWKSTimeout,
			RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
				return func(ctx context.Context, err error) {
					log.LogAttrs(ctx, slog.LevelWarn, "jwks fetch failed", slog.String("component", "auth"),
						slog.String("jwks_url", config.RedactURL(u)), slog.String("error", config.RedactError(err)))
				}
			},
		})
		if err == nil {
			// keyfunc's default accepts a key whatever its use; a key
			// published for encryption (use "enc") must never verify a
			// signature (RFC 7517 4.2), so only "sig" and unmarked keys are
			// looked at.
			kf, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: kf.Storage(),
				UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
		}
		if err != nil {
			cancel()
			return nil, fmt.Errorf("jwks %s: %w", config.RedactURL(cfg.JWKSURL), err)
		}
		v.jwks, v.cancel = kf, cancel
	}
	return v, nil
}

// Close stops the key set's background refresh. Safe to call twice.
func (v *Verifier) Close() { v.cancel() }

// claims are the claims Verify reads.
type claims struct {
	jwt.RegisteredClaims
	Scope scopeClaim `json:"scope"`
}

// UnmarshalJSON reads the claims set only if it passes checkClaims: the
// standard library and golang-jwt read it leniently (invalid UTF-8 becomes
// U+FFFD, a numeric date may be a string, a repeated name takes the last).
func (c *claims) UnmarshalJSON(b []byte) error {
	if err := checkClaims(b); err != nil {
		return err
	}
	type plain claims // without this method
	return json.Unmarshal(b, (*plain)(c))
}

// scopeClaim is the scope claim: a space-separated string (RFC 8693 4.2),
// or, as some providers send it, an array of strings.
type scopeClaim []string

func (s *scopeClaim) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		// RFC 6749 3.3: scope tokens are separated by spaces (0x20) and
		// nothing else: "x\u00a0posts:admin" is one token, not two.
		*s = slices.DeleteFunc(strings.Split(str, " "), func(w string) bool { return w == "" })
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("scope must be a string or an array of strings")
	}
	*s = list
	return nil
}

// Verify checks a compact JWT and returns its Caller, or an error wrapping
// ErrUnauthorized whose text says what was wrong (never the token itself).
func (v *Verifier) Verify(ctx context.Context, token string) (Caller, error) {
	if len(token) > MaxTokenBytes {
		return Caller{}, fmt.Errorf("%w: the bearer token is %d bytes long, more than %d", ErrUnauthorized, len(token), MaxTokenBytes)
	}
	if err := v.verifySignature(ctx, token); err != nil {
		return Caller{}, fmt.Errorf("%w: %s", ErrUnauthorized, reason(err))
	}
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		return v.key(ctx, t)
	})
	if err != nil {
		return Caller{}, fmt.Errorf("%w: %s", ErrUnauthorized, reason(err))
	}
	if c.Subject == "" {
		return Caller{}, fmt.Errorf("%w: the token has no sub claim", ErrUnauthorized)
	}
	if n := utf8.RuneCountInString(c.Subject); n > MaxSubjectLength {
		return Caller{}, fmt.Errorf("%w: the token's sub is %d characters long, more than %d", ErrUnauthorized, n, MaxSubjectLength)
	}
	if strings.ContainsFunc(c.Subject, unicode.IsControl) {
		return Caller{}, fmt.Errorf("%w: the token's sub contains control characters", ErrUnauthorized)
	}
	if strings.TrimSpace(c.Subject) != c.Subject {
		// MySQL's PAD SPACE collations (utf8mb4_bin among them) compare
		// "alice " equal to "alice": such a caller would own alice's posts.
		return Caller{}, fmt.Errorf("%w: the token's sub begins or ends with white space", ErrUnauthorized)
	}
	return Caller{Subject: c.Subject, Scopes: []string(c.Scope)}, nil
}

// key is the key that verifies t: the secret for an HMAC alg, the key set's
// key of its kid for an asymmetric one.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	alg, _ := t.Header["alg"].(string)
	switch {
	case slices.Contains(HMACMethods, alg) && len(v.cfg.Secret) > 0:
		return v.cfg.Secret, nil
	case slices.Contains(AsymmetricMethods, alg) && v.jwks != nil:
		// Not the request's cancellation: a fetch for an unknown kid
		// spends the rate limiter's token for every caller, so a caller
		// that hangs up must not abort it (keyfunc bounds it by
		// JWKSTimeout all the same).
		return v.jwks.KeyfuncCtx(context.WithoutCancel(ctx))(t)
	}
	// WithValidMethods refuses such a token before this is called.
	return nil, fmt.Errorf("no key for alg %q", alg)
}

// verifySignature checks the token's signature before anything reads its
// claims: golang-jwt decodes the claims set (several JSON passes over it)
// before it verifies, so an unsigned token of many claims would cost CPU
// for nothing. Only the header, at most MaxHeaderBytes, is decoded first. A
// token this cannot judge (malformed, an alg that is not accepted) is left
// to the parser, whose refusal says why.
func (v *Verifier) verifySignature(ctx context.Context, token string) error {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || len(head) > MaxHeaderBytes {
		return nil
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return nil
	}
	var header map[string]any
	if err := json.Unmarshal(raw, &header); err != nil {
		return nil
	}
	alg, _ := header["alg"].(string)
	method := jwt.GetSigningMethod(alg)
	if method == nil || !v.acceptsAlg(alg) {
		return nil
	}
	key, err := v.key(ctx, &jwt.Token{Header: header, Method: method})
	if err != nil {
		return fmt.Errorf("%w: %w", jwt.ErrTokenUnverifiable, err)
	}
	sigBytes, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil
	}
	keys := []any{key}
	if set, ok := key.(jwt.VerificationKeySet); ok {
		// A token without a kid: any key of the set may have signed it, as
		// golang-jwt itself tries them.
		keys = make([]any, len(set.Keys))
		for i, k := range set.Keys {
			keys[i] = k
		}
	}
	err = jwt.ErrSignatureInvalid
	for _, k := range keys {
		if err = method.Verify(head+"."+payload, sigBytes, k); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, err)
}

// acceptsAlg reports whether alg is one the verifier has keys for.
func (v *Verifier) acceptsAlg(alg string) bool {
	return (len(v.cfg.Secret) > 0 && slices.Contains(HMACMethods, alg)) ||
		(v.cfg.JWKSURL != "" && slices.Contains(AsymmetricMethods, alg))
}

// reason says why golang-jwt refused a token, in words a client can act
// on; the library's own text can carry header values.
func reason(err error) string {
	if ce := (*claimError)(nil); errors.As(err, &ce) {
		return ce.reason
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) && strings.Contains(err.Error(), r.saying) {
			return r.text
		}
	}
	if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		for _, claim := range []string{"exp", "iss", "aud", "nbf", "iat"} {
			if strings.Contains(err.Error(), claim+" claim is required") {
				return "the token has no " + claim + " claim, which this service requires"
			}
		}
		return "the token lacks a claim this service requires"
	}
	return "the token's claims are not valid"
}

// reasons are the words of reason for golang-jwt's errors, the first match
// first: an error that is err and whose text contains saying ("" for any).
var reasons = []struct {
	err    error
	saying string
	text   string
}{
	{jwt.ErrTokenMalformed, "", "the bearer token is not a well-formed JWT"},
	// golang-jwt reports an alg outside WithValidMethods (none, or another
	// family than the configured keys) as a bad signature.
	{jwt.ErrTokenSignatureInvalid, "signing method", "the token cannot be verified: its alg is not accepted"},
	{jwt.ErrTokenSignatureInvalid, "", "the token's signature does not verify"},
	// An algorithm this service does not accept (none, or another family
	// than its keys), or no key for the token's kid.
	{jwt.ErrTokenUnverifiable, "", "the token cannot be verified: its alg is not accepted or no key matches its kid"},
	{jwt.ErrTokenExpired, "", "the token is expired (exp)"},
	{jwt.ErrTokenNotValidYet, "", "the token is not valid yet (nbf)"},
	{jwt.ErrTokenUsedBeforeIssued, "", "the token is issued in the future (iat)"},
	{jwt.ErrTokenInvalidIssuer, "", "the token's issuer (iss) is not the one this service accepts"},
	{jwt.ErrTokenInvalidAudience, "", "the token's audience (aud) does not include this service"},
}
