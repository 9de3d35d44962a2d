package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

func embeddedTestStart(t *testing.T, cfg EmbeddedConfig) *Embedded {
	t.Helper()
	e, err := StartEmbedded(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

func embeddedTestSend(t *testing.T, addr, topic string, msgs []outbox.Message) {
	t.Helper()
	cfg := producerTestConfig(addr)
	cfg.Topic = topic
	p := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))
	require.NoError(t, p.Close())
}

func TestEmbeddedKeepsLogAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "127.0.0.1:0", DataDir: dir})
	addr := e.Addr()
	require.NotEqual(t, "127.0.0.1:0", addr, "a port was picked")
	require.Equal(t, event.DefaultTopic, e.Topic())
	first := producerTestMessages(1, 30, 1, 2, 3)
	embeddedTestSend(t, addr, e.Topic(), first)
	e.Close()
	e.Close() // idempotent

	e2 := embeddedTestStart(t, EmbeddedConfig{Addr: addr, DataDir: dir})
	require.Equal(t, addr, e2.Addr())
	second := producerTestMessages(100, 30, 1, 2, 3)
	embeddedTestSend(t, addr, e2.Topic(), second)

	recs := kafkatest.ReadTopic(t, addr, e2.Topic(), 60, 10*time.Second)
	require.Len(t, recs, 60)
	partitions := map[int32]bool{}
	lastID := map[string]string{}
	var ids []string
	for _, r := range recs {
		partitions[r.Partition] = true
		require.Equal(t, kafkatest.PartitionFor(r.Key, 8), r.Partition, "the default 8 partitions kept")
		id := r.Headers[event.HeaderEventID]
		require.Greater(t, id, lastID[r.Key], "per-key order across the restart")
		lastID[r.Key] = id
		ids = append(ids, id)
	}
	var want []string
	for _, m := range append(first, second...) {
		want = append(want, m.EventID)
	}
	require.ElementsMatch(t, want, ids, "earlier records kept, new ones appended")
}

func TestEmbeddedCreatesMissingTopicInExistingDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "127.0.0.1:0", DataDir: dir, Topic: "first", Partitions: 2})
	addr := e.Addr()
	e.Close()

	e2 := embeddedTestStart(t, EmbeddedConfig{Addr: addr, DataDir: dir, Topic: "second", Partitions: 3})
	for _, topic := range []string{"first", "second"} {
		cfg := producerTestConfig(e2.Addr())
		cfg.Topic = topic
		require.NoError(t, producerTestNew(t, cfg).CheckTopic(context.Background()), topic)
	}
	msgs := producerTestMessages(1, 9, 1, 2, 3, 4, 5, 6)
	embeddedTestSend(t, addr, "second", msgs)
	recs := kafkatest.ReadTopic(t, addr, "second", len(msgs), 10*time.Second)
	require.Len(t, recs, len(msgs))
	for _, r := range recs {
		require.Less(t, r.Partition, int32(3))
	}
}

// A log is recorded as the log of the database it was started for; a start
// for another database is refused, saying which database the log belongs
// to, and its records stay as they were.
func TestEmbeddedRefusesALogOfAnotherDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const first, second = "sqlite://<data dir>/posting.db", "mysql://127.0.0.1:3306/other"
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "127.0.0.1:0", DataDir: dir, Database: first})
	addr := e.Addr()
	msgs := producerTestMessages(1, 3, 1)
	embeddedTestSend(t, addr, e.Topic(), msgs)
	e.Close()
	raw, err := os.ReadFile(filepath.Join(dir, EmbeddedDatabaseFile))
	require.NoError(t, err)
	require.Equal(t, first+"\n", string(raw))

	_, err = StartEmbedded(EmbeddedConfig{Addr: addr, DataDir: dir, Database: second}, nil)
	require.ErrorIs(t, err, ErrOtherDatabase)
	var ode *OtherDatabaseError
	require.True(t, errors.As(err, &ode))
	require.Equal(t, OtherDatabaseError{DataDir: dir, LogDatabase: first, Database: second}, *ode)
	require.ErrorContains(t, err, "belongs to database "+first+", not "+second)

	// Its own database still opens it, with every record kept.
	e2 := embeddedTestStart(t, EmbeddedConfig{Addr: addr, DataDir: dir, Database: first})
	require.Len(t, kafkatest.ReadTopic(t, e2.Addr(), e2.Topic(), len(msgs), 10*time.Second), len(msgs))
}

// A data dir written before databases were recorded is adopted by the first
// database that starts on it, and is then that database's.
func TestEmbeddedAdoptsALogWithoutDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "127.0.0.1:0", DataDir: dir})
	addr := e.Addr()
	e.Close()
	_, err := os.Stat(filepath.Join(dir, EmbeddedDatabaseFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no database given, none recorded")

	e = embeddedTestStart(t, EmbeddedConfig{Addr: addr, DataDir: dir, Database: "sqlite://a.db"})
	e.Close()
	_, err = StartEmbedded(EmbeddedConfig{Addr: addr, DataDir: dir, Database: "sqlite://b.db"}, nil)
	require.ErrorIs(t, err, ErrOtherDatabase)
}

func TestEmbeddedRejectsBadConfigAndBusyPort(t *testing.T) {
	t.Parallel()
	for _, cfg := range []EmbeddedConfig{
		{Addr: "0.0.0.0:9092"},
		{Addr: ":9092"},
		{Addr: "localhost"},
		{Addr: "127.0.0.1:0", Partitions: -1},
	} {
		_, err := StartEmbedded(cfg, nil)
		require.ErrorContains(t, err, "invalid embedded kafka config", cfg.Addr)
	}
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "127.0.0.1:0"})
	_, err := StartEmbedded(EmbeddedConfig{Addr: e.Addr()}, nil)
	require.ErrorContains(t, err, e.Addr())
}

// The embedded broker takes records from anyone who reaches it, so it
// listens on loopback only: a wildcard, a LAN address or a host name other
// than localhost is refused before anything listens, naming the address and
// why; loopback addresses and localhost start.
func TestEmbeddedListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", "192.168.1.10:0", "10.0.0.1:0", "example.com:0", "posting-host:0"} {
		cfg := DefaultEmbeddedConfig()
		cfg.Addr = addr
		err := cfg.Validate()
		require.ErrorIs(t, err, ErrNotLoopback, addr)
		var ce *config.Error
		require.ErrorAs(t, err, &ce, addr)
		require.Equal(t, "kafka.EmbeddedConfig.Addr", ce.Field, addr)
		_, err = StartEmbedded(EmbeddedConfig{Addr: addr}, nil)
		require.ErrorIs(t, err, ErrNotLoopback, addr)
	}
	for _, addr := range []string{"127.0.0.1:0", "127.0.0.2:0", "localhost:0", "LOCALHOST:0", "[::1]:0"} {
		cfg := DefaultEmbeddedConfig()
		cfg.Addr = addr
		require.NoError(t, cfg.Validate(), addr)
	}
	e := embeddedTestStart(t, EmbeddedConfig{Addr: "localhost:0"})
	host, _, err := net.SplitHostPort(e.Addr())
	require.NoError(t, err)
	require.True(t, net.ParseIP(host).IsLoopback(), "localhost listens on %s", e.Addr())
}

// TestEmbeddedWithKcat reads the embedded broker with the kcat command its
// start-up log line offers, copied from the line as a user would.
func TestEmbeddedWithKcat(t *testing.T) {
	t.Parallel()
	kcat, ok := kafkatest.Kcat(t)
	if !ok {
		t.Skip("kcat not installed (apt-get install kcat); set POSTING_TEST_REQUIRE_KCAT=1 to fail instead")
	}
	var logs logtest.Buffer
	e, err := StartEmbedded(EmbeddedConfig{Addr: "127.0.0.1:0", DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(e.Close)
	msgs := producerTestMessages(1, 4, 7)
	embeddedTestSend(t, e.Addr(), e.Topic(), msgs)

	hint := regexp.MustCompile(`hint="([^"]*)"`).FindStringSubmatch(logs.String())
	require.NotNil(t, hint, "no hint on the start-up line: %s", logs.String())
	require.True(t, strings.HasPrefix(hint[1], "kcat "), hint[1])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", hint[1])
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(kcat)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(msgs), string(out))
	for i, line := range lines {
		var rec kcatRecord
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		require.Equal(t, "7", rec.Key)
		require.Contains(t, rec.Headers, event.HeaderEventID)
		require.Contains(t, rec.Headers, msgs[i].EventID)
		require.Contains(t, rec.Headers, string(msgs[i].EventType))
		require.Equal(t, string(event.WithSequence([]byte(msgs[i].Payload), msgs[i].ID)), rec.Payload)
	}

	out, err = exec.CommandContext(ctx, kcat, "-b", e.Addr(), "-L", "-t", e.Topic()).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), `topic "`+e.Topic()+`" with 8 partitions`)
}
