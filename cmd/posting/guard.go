package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/storage/database"
)

// This file holds the refusals of configurations that split the chain
// outbox → broker → inbox → publication between two databases or two
// brokers: each is found at start and stops the command with
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

// embeddedBrokerLease is the lease (database.AcquireLease) that the serve
// running the embedded broker of a database holds: one embedded broker per
// database, so that every event of the database is on one log. Its info is
// the broker's address and host (brokerInfo).
const embeddedBrokerLease = "embedded-broker"

const (
	// brokerLeaseTTL is how long the lease outlives its holder's last
	// renewal: a serve killed on another host blocks a new embedded
	// broker on its database this long at most.
	brokerLeaseTTL = 30 * time.Second
	// brokerLeaseRenewEvery leaves two renewals to fail before the expiry.
	brokerLeaseRenewEvery = brokerLeaseTTL / 3
	// brokerLeaseDialTimeout bounds the dial that tells a live holder on
	// this host from a dead one; a listener on loopback answers at once.
	brokerLeaseDialTimeout = time.Second
	// brokerLeaseTimeout bounds each database round of the lease.
	brokerLeaseTimeout = 10 * time.Second
)

// brokerInfo is what the holder tells the others: "<addr> on <host>
// [net <network>]", with ", starting" until its broker listens. A holder
// whose broker should listen on this network namespace (same host name and
// network, see thisNetwork) and does not answer is dead (killed), and its
// lease is taken over at once rather than at its expiry; a holder elsewhere,
// or one still starting, is waited out.
type brokerInfo struct {
	addr, host string
	// net names the holder's network namespace ("" where unknown): a host
	// name alone is shared by cloned machines and by the replicas of a
	// container given one hostname, whose loopbacks are not this one.
	net      string
	starting bool
}

const (
	brokerInfoOn       = " on "
	brokerInfoNet      = " [net "
	brokerInfoStarting = ", starting"
)

func (i brokerInfo) String() string {
	s := i.addr + brokerInfoOn + i.host
	if i.net != "" {
		s += brokerInfoNet + i.net + "]"
	}
	if i.starting {
		s += brokerInfoStarting
	}
	return s
}

// sameNetwork reports whether the holder i listens on the loopback this
// process dials: the same host name and network namespace.
func (i brokerInfo) sameNetwork(here brokerInfo) bool {
	return i.host == here.host && i.net == here.net
}

// elsewhere reports whether i was surely written on another host or
// network than here: another host name, or two known networks that differ.
func (i brokerInfo) elsewhere(here brokerInfo) bool {
	return i.host != here.host || (i.net != "" && here.net != "" && i.net != here.net)
}

// parseBrokerInfo reads a lease's info; ok is false for one this code did
// not write.
func parseBrokerInfo(raw string) (i brokerInfo, ok bool) {
	addr, rest, found := strings.Cut(raw, brokerInfoOn)
	if !found || addr == "" {
		return brokerInfo{}, false
	}
	i.addr = addr
	rest, i.starting = strings.CutSuffix(rest, brokerInfoStarting)
	if k := strings.LastIndex(rest, brokerInfoNet); k >= 0 && strings.HasSuffix(rest, "]") {
		rest, i.net = rest[:k], rest[k+len(brokerInfoNet):len(rest)-1]
	}
	i.host = rest
	return i, i.host != ""
}

// thisHost names the host in the lease, cut to fit the info column.
func thisHost() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if len(host) > 180 {
		host = host[:180]
	}
	return host
}

// thisNetwork names this process's network namespace on Linux: the kernel's
// boot id (one per machine and boot) and the namespace's inode; "" where
// either cannot be read.
func thisNetwork() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/net") // net:[4026531840]
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(boot))
	inode := strings.TrimSuffix(strings.TrimPrefix(ns, "net:["), "]")
	if len(id) < 8 || inode == "" || len(inode) > 20 {
		return ""
	}
	return id[:8] + ":" + inode
}

// brokerLease is serve's hold on embeddedBrokerLease.
type brokerLease struct {
	db     *database.DB
	holder string // instance id # a token of this run: a restart is another holder
	info   brokerInfo
	bound  string // the broker's address as this serve bound it, "" if not
	log    *slog.Logger
	// lost receives the renewal's error once another serve holds the
	// lease: serve stops then, rather than run a second embedded broker
	// on the database beside the new holder's.
	lost chan error
}

// errBrokerLeaseLost is renew's error when another serve holds the lease.
var errBrokerLeaseLost = errors.New("embedded broker") // its text prefixes the message, as renew's other errors

// takeBrokerLease takes the embedded broker's lease on db before the broker
// starts, and registers its release on st (run after the broker's Close,
// registered later). A live holder refuses it with a usage error naming the
// holder and POSTING_KAFKA_BROKERS; a holder on this host whose broker no
// longer answers was killed, and its lease is taken over.
//
// bound is the broker's port, bound by this serve (nil in tests that take
// the lease alone): a holder whose broker listened at that very address
// is dead, since nobody else can listen there now.
func takeBrokerLease(s *settings, db *database.DB, bound net.Listener, log *slog.Logger, st *startstop.Stack) (*brokerLease, error) {
	var token [4]byte
	_, _ = rand.Read(token[:]) // crypto/rand.Read does not fail
	l := &brokerLease{db: db, holder: s.InstanceID + "#" + hex.EncodeToString(token[:]),
		info: brokerInfo{addr: s.EmbeddedKafkaAddr, host: thisHost(), net: thisNetwork(), starting: true}, log: log, lost: make(chan error, 1)}
	if bound != nil {
		l.bound = bound.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*brokerLeaseTimeout)
	defer cancel()
	held, ok, err := database.AcquireLease(ctx, db.DB, embeddedBrokerLease, l.holder, l.info.String(), brokerLeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	if !ok && l.holderIsDead(held) {
		// Only this holder's lease goes: if another serve took it over
		// meanwhile, the take below is refused and names that one.
		if err := database.ReleaseLease(ctx, db.DB, embeddedBrokerLease, held.Holder); err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		dead := held
		if held, ok, err = database.AcquireLease(ctx, db.DB, embeddedBrokerLease, l.holder, l.info.String(), brokerLeaseTTL); err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		if ok {
			log.Warn("took over the embedded broker's lease of a serve whose broker no longer answers",
				"component", "kafka", "lease", embeddedBrokerLease, "previous_holder", dead.Holder, "previous", dead.Info)
		}
	}
	if !ok {
		return nil, l.refusal(s, held)
	}
	st.OnStop(l.release)
	return l, nil
}

// holderIsDead reports whether the lease's holder is a serve on this host
// whose broker, listening when it last renewed, no longer answers.
func (l *brokerLease) holderIsDead(held database.Lease) bool {
	info, ok := parseBrokerInfo(held.Info)
	if !ok || info.starting || !info.sameNetwork(l.info) {
		return false // waited out: its expiry is the only sign
	}
	if l.bound != "" && sameTCPAddr(info.addr, l.bound) {
		return true // this serve holds the port: a dial would reach itself
	}
	conn, err := net.DialTimeout("tcp", info.addr, brokerLeaseDialTimeout)
	if err != nil {
		return true
	}
	_ = conn.Close()
	return false
}

// sameTCPAddr reports whether a and b resolve to one IP and port.
func sameTCPAddr(a, b string) bool {
	x, errA := net.ResolveTCPAddr("tcp", a)
	y, errB := net.ResolveTCPAddr("tcp", b)
	return errA == nil && errB == nil && x.IP.Equal(y.IP) && x.Port == y.Port
}

// refusal is the usage error for a lease another serve holds.
func (l *brokerLease) refusal(s *settings, held database.Lease) error {
	instance := held.Holder // instance id # token of its run; the id may hold a # too
	if i := strings.LastIndex(instance, "#"); i > 0 {
		instance = instance[:i]
	}
	info, ok := parseBrokerInfo(held.Info)
	if !ok {
		info = brokerInfo{addr: held.Info, host: "unknown"}
	}
	first := fmt.Sprintf("serve %s already runs the embedded broker of this database at %s on host %s", instance, info.addr, info.host)
	why := "; a second embedded broker would split the database's events between two logs"
	point := "POSTING_KAFKA_BROKERS=" + info.addr
	if l.db.File() != "" && s.DatabaseURL == "" {
		point += " and POSTING_DATABASE_URL=" + l.db.Location
	}
	var todo string
	if info.sameNetwork(l.info) {
		todo = fmt.Sprintf(". Point this serve at that broker with %s, or give every serve an external Kafka cluster (POSTING_KAFKA_BROKERS) or RabbitMQ (POSTING_RABBITMQ_URL)", point)
	} else {
		todo = fmt.Sprintf(". That broker listens on the loopback of %s only: run this serve there with %s, "+
			"or give every serve an external Kafka cluster (POSTING_KAFKA_BROKERS) or RabbitMQ (POSTING_RABBITMQ_URL)", info.host, point)
	}
	if info.starting || !info.sameNetwork(l.info) {
		todo += fmt.Sprintf(". If that serve is gone, its lease expires at %s (database clock)", held.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return usageError{fmt.Errorf("%s%s%s", first, why, todo)}
}

// keep records addr, where the broker listens now, and starts renewing the
// lease until st stops.
func (l *brokerLease) keep(st *startstop.Stack, addr string) error {
	l.info.addr, l.info.starting = addr, false
	ctx, cancel := context.WithTimeout(context.Background(), brokerLeaseTimeout)
	defer cancel()
	if err := l.renew(ctx); err != nil {
		return err
	}
	l.log.Info("embedded broker lease taken", "component", "kafka", "lease", embeddedBrokerLease,
		"holder", l.holder, "info", l.info.String(), "ttl", brokerLeaseTTL)
	return st.Start(context.Background(), &brokerLeaseRenewer{lease: l})
}

// renew extends the lease; an error says it failed or was lost.
func (l *brokerLease) renew(ctx context.Context) error {
	held, ok, err := database.AcquireLease(ctx, l.db.DB, embeddedBrokerLease, l.holder, l.info.String(), brokerLeaseTTL)
	if err != nil {
		return fmt.Errorf("embedded broker: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: lease %s lost to %s (%s): two embedded brokers may serve this database",
			errBrokerLeaseLost, embeddedBrokerLease, held.Holder, held.Info)
	}
	return nil
}

// release gives the lease up at a clean stop, so the next serve takes it
// at once.
func (l *brokerLease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), brokerLeaseTimeout)
	defer cancel()
	if err := database.ReleaseLease(ctx, l.db.DB, embeddedBrokerLease, l.holder); err != nil {
		l.log.Warn("embedded broker lease not released; it expires by itself", "component", "kafka", "err", err, "ttl", brokerLeaseTTL)
	}
}

// brokerLeaseRenewer renews the lease every brokerLeaseRenewEvery while the
// broker runs. It logs when a renewal fails and when renewals work again;
// a lease another serve holds ends it and tells serve (brokerLease.lost).
type brokerLeaseRenewer struct {
	startstop.BaseStartStop
	lease *brokerLease
}

// Start begins renewing.
func (r *brokerLeaseRenewer) Start(ctx context.Context) error {
	return r.StartLoop(ctx, "embedded broker lease", r.loop)
}

func (r *brokerLeaseRenewer) loop(ctx context.Context) {
	tick := time.NewTicker(brokerLeaseRenewEvery)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := r.runOnce(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case errors.Is(err, errBrokerLeaseLost):
			// Another serve took the lease (this one stalled past its
			// expiry) and runs its broker: this one stops.
			r.lease.log.Error("embedded broker lease lost; serve stops", "component", "kafka", "err", err)
			select {
			case r.lease.lost <- err:
			default:
			}
			return
		case err != nil && !failing:
			r.lease.log.Error("embedded broker lease not renewed", "component", "kafka", "err", err)
		case err == nil && failing:
			r.lease.log.Info("embedded broker lease renewed again", "component", "kafka")
		}
		failing = err != nil
	}
}

// runOnce renews the lease once.
func (r *brokerLeaseRenewer) runOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, brokerLeaseTimeout)
	defer cancel()
	return r.lease.renew(ctx)
}

// readsEmbeddedBroker reports whether a worker reads the embedded broker of
// a serve (no RabbitMQ URL, no Kafka brokers) rather than a broker of its own
// choosing.
func (s *settings) readsEmbeddedBroker() bool {
	return s.RabbitMQURL == "" && len(s.KafkaBrokers) == 0
}

// embeddedBrokerWait bounds how long a worker waits for a serve started
// beside it to take the embedded broker's lease on their database.
var embeddedBrokerWait = 10 * time.Second

// wrongDatabaseForEmbeddedBroker is the usage error of a worker whose
// database is not the one of the embedded broker it would read.
func wrongDatabaseForEmbeddedBroker(s *settings, location, why string) error {
	return usageError{fmt.Errorf("this worker reads the embedded broker at POSTING_EMBEDDED_KAFKA_ADDR=%s, "+
		"but its database %s %s: it would take that serve's events into a database no serve sends from. "+
		"Set POSTING_DATABASE_URL to the database of the serve whose embedded broker listens at %s",
		s.EmbeddedKafkaAddr, location, why, s.EmbeddedKafkaAddr)}
}

// requireEmbeddedBrokerFile refuses, before anything is opened, a worker on
// the embedded broker whose SQLite file does not exist: the serve of that
// broker makes it, so it is not that serve's database, and creating it would
// hide the mistake. A serve (or migrate) started beside the worker may not
// have made it yet: the worker waits up to embeddedBrokerWait for it.
func (s *settings) requireEmbeddedBrokerFile(ctx context.Context, log *slog.Logger) error {
	if !s.readsEmbeddedBroker() {
		return nil
	}
	file := database.FileOf(s.DatabaseURL)
	if s.DatabaseURL == "" {
		file = filepath.Join(s.DataDir, database.EmbeddedFileName)
	}
	if file == "" {
		return nil // a database on a server: its lease says (requireEmbeddedBrokerLease)
	}
	deadline := time.Now().Add(embeddedBrokerWait)
	for waiting := false; ; waiting = true {
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !time.Now().Before(deadline) {
			location := "sqlite://" + file
			if s.DatabaseURL == "" {
				location = "(POSTING_DATABASE_URL is not set, so the embedded SQLite file " + file + ")"
			}
			return wrongDatabaseForEmbeddedBroker(s, location, "does not exist")
		}
		if !waiting {
			log.Info("waiting for the embedded broker's serve to create its SQLite file", "component", "database",
				"file", file, "broker_addr", s.EmbeddedKafkaAddr, "timeout", embeddedBrokerWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// requireEmbeddedBrokerLease refuses a worker on the embedded broker unless
// its database holds a live embedded-broker lease for that broker's address:
// the serve of the broker records it there (takeBrokerLease), so a worker
// on any other database, such as a stale ./data/posting.db beside a serve
// on PostgreSQL, finds none. A serve started beside the worker may not have
// taken its lease yet: the worker waits up to embeddedBrokerWait for one.
// The broker listens on its host's loopback, so a lease taken on another
// host or network names another broker than the one this worker reaches at
// the same address, and is refused too. It runs before the worker joins the
// consumer group.
func requireEmbeddedBrokerLease(ctx context.Context, s *settings, db *database.DB, log *slog.Logger) error {
	if !s.readsEmbeddedBroker() {
		return nil
	}
	here := brokerInfo{host: thisHost(), net: thisNetwork()}
	deadline := time.Now().Add(embeddedBrokerWait)
	waiting := false
	for {
		rctx, cancel := context.WithTimeout(ctx, brokerLeaseTimeout)
		held, live, err := database.ReadLease(rctx, db.DB, embeddedBrokerLease)
		cancel()
		if err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		info, ok := parseBrokerInfo(held.Info)
		switch {
		case live && ok && sameBrokerAddr(info.addr, s.EmbeddedKafkaAddr) && info.elsewhere(here):
			return wrongDatabaseForEmbeddedBroker(s, db.Location,
				fmt.Sprintf("belongs to the embedded broker at %s on host %s, which listens on that host's loopback only; "+
					"this worker on host %s would read another broker at that address", info.addr, info.host, here.host))
		case live && ok && sameBrokerAddr(info.addr, s.EmbeddedKafkaAddr):
			return nil
		case live && ok:
			return wrongDatabaseForEmbeddedBroker(s, db.Location,
				fmt.Sprintf("belongs to the embedded broker at %s, not this one", info.addr))
		}
		if !time.Now().Before(deadline) {
			return wrongDatabaseForEmbeddedBroker(s, db.Location,
				"holds no live lease of an embedded broker (a serve running its embedded broker on this database records one)")
		}
		if !waiting {
			log.Info("waiting for the embedded broker's serve to record its lease in this database", "component", "kafka",
				"database", db.Location, "broker_addr", s.EmbeddedKafkaAddr, "timeout", embeddedBrokerWait)
			waiting = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sameBrokerAddr reports whether a and b name one loopback listener: equal,
// resolving to one IP and port, or the same port on loopback hosts (the
// embedded broker listens on loopback only, so localhost and 127.0.0.1
// reach it alike).
func sameBrokerAddr(a, b string) bool {
	if a == b || sameTCPAddr(a, b) {
		return true
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	return errA == nil && errB == nil && pa == pb && isLoopbackHost(ha) && isLoopbackHost(hb)
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
