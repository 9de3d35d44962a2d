// Package wakeup wakes relays when outbox rows are committed, instead of
// leaving them to the next poll: a Notifier sends PostgreSQL's NOTIFY, a
// Listener LISTENs and calls Wake.
package wakeup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
)

// Config configures a Listener.
type Config struct {
	// Connect opens the listening connection, a session of its own outside
	// any pool (database.DB.ConnectPostgres). Required.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Channel is the channel to LISTEN on. Required (outbox.NotifyChannel).
	Channel string
	// Wake is called for every notification and after every (re)connection;
	// it must not block (relay.Relay.Wake). Required.
	Wake func()
	// CheckEvery is how long the connection may stay silent before it is
	// pinged, so that a connection a network dropped without a word is
	// noticed and replaced. Default 30s; at least 10ms.
	CheckEvery time.Duration
	// RetryBase is the pause after the first failed connection; it doubles
	// with jitter up to RetryMax. Defaults 250ms and 30s.
	RetryBase, RetryMax time.Duration
	// Logger receives the listener's logs. Default slog.Default().
	Logger *slog.Logger
	// Notify, if set, sends a notification on Channel with the payload
	// through the service's pool (another session than the listener's).
	// The first connection then checks that a notification reaches it: one
	// that does not arrive within ProbeWait means the listening session
	// does not last, as through a pooler in transaction mode (PgBouncer).
	// The listener then logs one warning naming the likely cause and stops:
	// the relays keep polling and the instance's own commits keep waking it.
	Notify func(ctx context.Context, payload string) error
	// ProbeWait bounds the probe's send, and then, from the moment it was
	// sent, the wait for its delivery. Default 2s.
	ProbeWait time.Duration
	// Origin, if set, is the payload of this process's own announcements
	// (outbox.Announce): a notification that carries it does not call
	// Wake, since the commit that sent it woke this process's relay
	// already. Without it every commit of the process woke its relay
	// twice, and the second wake made a poll that found nothing. Empty:
	// every notification wakes.
	Origin string
}

// DefaultConfig returns a Config with every optional field at its default.
func DefaultConfig() Config {
	return Config{
		CheckEvery: 30 * time.Second,
		RetryBase:  250 * time.Millisecond,
		RetryMax:   30 * time.Second,
		Logger:     slog.Default(),
		ProbeWait:  2 * time.Second,
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "wakeup.Config."
	switch {
	case c.Connect == nil:
		return config.Invalid(f+"Connect", nil, "required")
	case c.Channel == "":
		return config.Invalid(f+"Channel", c.Channel, "required")
	case c.Wake == nil:
		return config.Invalid(f+"Wake", nil, "required")
	case c.CheckEvery < 10*time.Millisecond:
		return config.Invalid(f+"CheckEvery", c.CheckEvery, "below 10ms")
	}
	// In the fields' order, so the setting named first is the first out.
	if err := backoff.CheckRetry(f, c.RetryBase, c.RetryMax); err != nil {
		return err
	}
	if c.ProbeWait <= 0 {
		return config.Invalid(f+"ProbeWait", c.ProbeWait, "must be positive")
	}
	return nil
}

// Listener LISTENs on a PostgreSQL channel and calls Wake for each
// notification, reconnecting when its connection drops.
type Listener struct {
	startstop.BaseStartStop
	cfg Config
	// listening, if set, is called each time LISTEN has been run on a new
	// connection (tests wait for it).
	listening func()
	probed    bool // a probe notification was delivered
}

// errNotDelivered is listen's error when the probe notification did not
// arrive.
var errNotDelivered = errors.New("no notification delivered")

// errPooled is listen's error when the connection reaches PostgreSQL
// through a pooler.
var errPooled = errors.New("connection goes through a pooler")

// New returns a Listener.
func New(cfg Config) (*Listener, error) {
	config.FillZero(&cfg, DefaultConfig())
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid wakeup config: %w", err)
	}
	return &Listener{cfg: cfg}, nil
}

// Start runs the listener in one goroutine until Stop is called or ctx ends.
func (l *Listener) Start(ctx context.Context) error {
	return l.StartLoop(ctx, "wakeup listener", l.loop)
}

func (l *Listener) loop(ctx context.Context) {
	log := l.cfg.Logger.With("component", "wakeup", "channel", l.cfg.Channel)
	retry := backoff.Backoff{Base: l.cfg.RetryBase, Max: l.cfg.RetryMax}
	for ctx.Err() == nil {
		err := l.listen(ctx, func() { retry.Reset() })
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPooled) {
			log.Warn("not listening for outbox notifications: POSTING_DATABASE_URL reaches PostgreSQL through a pooler (PgBouncer), " +
				"and behind a pooler in transaction mode a LISTEN does not receive notifications: it stays on a pooled server session, " +
				"where they arrive among other clients' statements. Set POSTING_DATABASE_DIRECT_URL to the database's direct URL. " +
				"Until then relays poll at their interval and wake on this instance's own commits only")
			return
		}
		if errors.Is(err, errNotDelivered) {
			log.Warn("LISTEN does not receive notifications: POSTING_DATABASE_URL likely points at a pooler in transaction mode (PgBouncer), "+
				"where a session does not last; set POSTING_DATABASE_DIRECT_URL to the database's direct URL. "+
				"Until then relays poll at their interval and wake on this instance's own commits only",
				"waited", l.cfg.ProbeWait)
			return
		}
		wait := retry.Next()
		if retry.Failures() == 1 || retry.Failures()%10 == 0 {
			log.Warn("not listening for outbox notifications; relays poll at their interval meanwhile",
				"err", err, "retry_in", wait, "failures", retry.Failures())
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// listen connects, LISTENs and wakes for every notification until the
// connection fails or ctx ends; connected is called once LISTEN succeeded.
func (l *Listener) listen(ctx context.Context, connected func()) error {
	conn, err := l.cfg.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Through a pooler the LISTEN would not belong to this connection: in
	// transaction mode it stays on whichever pooled server session ran it,
	// after this connection is gone, and every later notification arrives
	// there unasked. PgBouncer 1.18 can take one that arrives during its
	// server check for the check's answer and hand the session to a client
	// with that answer still to come: the client's statement reads the
	// check's row, and its next ones each the result of the one before.
	if pooled, err := throughPooler(ctx, conn); err != nil {
		return fmt.Errorf("check for a pooler: %w", err)
	} else if pooled {
		return errPooled
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	if l.listening != nil {
		l.listening()
	}
	if l.cfg.Notify != nil && !l.probed {
		// Only a delivered probe settles the check: one that could not be
		// sent (the pool down) or whose connection broke proves nothing,
		// and the next connection probes again.
		if err := l.probe(ctx, conn); err != nil {
			return err
		}
		l.probed = true
	}
	// Rows appended while nobody listened (start, reconnection) are due now.
	l.cfg.Wake()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.CheckEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && l.cfg.Origin != "" && n.Payload == l.cfg.Origin:
			// This process's own commit, which woke its relay already.
		case err == nil:
			l.cfg.Wake()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Silence: make sure the connection is still there.
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("connection check: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// throughPooler reports whether conn reaches PostgreSQL through a pooler.
// A pooler (PgBouncer, in either mode) answers a connection's startup
// itself, with a process id and cancel key of its own, so the process id
// conn was given is not that of the server session that runs its
// statements; a direct connection's is.
func throughPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return false, err
	}
	return pid != int64(conn.PgConn().PID()), nil
}

// probe sends a notification through Notify (up to ProbeWait) and then
// waits up to ProbeWait for conn to receive it; errNotDelivered if it does not. Other notifications
// received meanwhile wake as usual.
func (l *Listener) probe(ctx context.Context, conn *pgx.Conn) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	payload := "probe-" + hex.EncodeToString(b)
	sctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeWait)
	err := l.cfg.Notify(sctx, payload)
	cancel()
	if err != nil {
		return fmt.Errorf("probe notification: %w", err)
	}
	// The delivery gets a wait of its own: a send slowed by a busy pool
	// says nothing about the listening session.
	pctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeWait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(pctx)
		switch {
		case err == nil && n.Payload == payload:
			return nil
		case err == nil:
			l.cfg.Wake()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			return errNotDelivered
		default:
			return fmt.Errorf("wait for the probe notification: %w", err)
		}
	}
}
