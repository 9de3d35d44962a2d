// Package kafkatest runs an in-process Kafka-protocol broker for tests, with
// outages, produce rejections and a reader of the topic.
package kafkatest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/endoffset"
)

// DefaultTopic and DefaultPartitions are what Start creates without WithTopic:
// the contract's topic, and enough partitions that keys spread out.
const (
	DefaultTopic      = event.DefaultTopic
	DefaultPartitions = 8
)

// restartTimeout bounds how long Restart keeps trying to bind the old port,
// which another process may briefly hold.
const restartTimeout = 5 * time.Second

// Broker is a running one-node kfake cluster with one topic.
type Broker struct {
	// Cluster is the current kfake cluster; Restart replaces it. Tests may
	// use its Control and Fault hooks directly.
	Cluster *kfake.Cluster
	// Addr is the bootstrap address, "127.0.0.1:port"; it survives Restart.
	Addr string
	// Topic is the topic Start created.
	Topic string
	// Partitions is the topic's partition count.
	Partitions int32

	dataDir string
	port    int

	mu         sync.Mutex
	stopped    bool
	rejects    map[string]int16 // key -> error code, see RejectKey
	rejections map[string]int   // key -> partition batches rejected
	faults     []*kfake.FaultHandle
}

// Option changes what Start builds.
type Option func(*Broker)

// WithTopic creates name with the given partition count instead of the
// default topic.
func WithTopic(name string, partitions int32) Option {
	return func(b *Broker) { b.Topic, b.Partitions = name, partitions }
}

// WithDataDir persists the cluster's log in dir, so Restart (or another Start
// on the same dir) keeps every record. Without it a Restart starts empty.
func WithDataDir(dir string) Option {
	return func(b *Broker) { b.dataDir = dir }
}

// Start runs a broker on a free port with its topic and closes it when the
// test ends.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	b := &Broker{
		Topic:      DefaultTopic,
		Partitions: DefaultPartitions,
		rejects:    map[string]int16{},
		rejections: map[string]int{},
	}
	for _, opt := range opts {
		opt(b)
	}
	require.NotEmpty(t, b.Topic, "kafkatest: empty topic")
	require.Positive(t, b.Partitions, "kafkatest: partitions")
	c, err := b.newCluster(0)
	require.NoError(t, err, "kafkatest: start kfake")
	b.Cluster = c
	b.Addr = c.ListenAddrs()[0]
	_, port, err := net.SplitHostPort(b.Addr)
	require.NoError(t, err)
	b.port, err = strconv.Atoi(port)
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	return b
}

func (b *Broker) newCluster(port int) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.Ports(port), // one node
		kfake.SeedTopics(b.Partitions, b.Topic),
	}
	if b.dataDir != "" {
		opts = append(opts, kfake.DataDir(b.dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, err
	}
	// One control for the cluster's whole life: it consults the current
	// rules, so RejectKey needs no control of its own and a restarted
	// cluster rejects the same keys.
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		b.rejectProduce(c, req.(*kmsg.ProduceRequest))
		return nil, nil, false // the cluster answers, with our faults applied
	})
	return c, nil
}

// Stop closes the cluster, which drops every client connection and refuses
// new ones: an outage. It is safe to call more than once.
func (b *Broker) Stop() {
	b.mu.Lock()
	c, stopped := b.Cluster, b.stopped
	b.stopped = true
	b.mu.Unlock()
	if !stopped {
		c.Close() // not under mu: a running control takes mu
	}
}

// Restart stops the cluster if it runs and starts a new one on the same port
// and data dir. Without a data dir the new cluster has the topic but no
// records.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Stop()
	deadline := time.Now().Add(restartTimeout)
	for {
		c, err := b.newCluster(b.port)
		if err == nil {
			b.mu.Lock()
			b.Cluster, b.stopped, b.faults = c, false, nil
			b.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err, "kafkatest: restart on %s", b.Addr)
		}
		time.Sleep(50 * time.Millisecond) // the port is still held; nothing to wait on but time
	}
}

// RejectKey makes the broker answer code for every produce partition batch
// that holds a record with this key, until stop is called. Kafka errors are
// per partition batch, so records that share the batch fail too; other
// partitions of the same request are written as usual. The rule stays in
// force across Restart.
func (b *Broker) RejectKey(key string, code int16) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rejects[key] = code
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.rejects[key] == code {
			delete(b.rejects, key)
		}
	}
}

// Rejections is how many partition batches were rejected because of key.
func (b *Broker) Rejections(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rejections[key]
}

// rejectProduce installs, for this one request, a fault on every partition
// batch that holds a rejected key. It runs inside the control, before the
// cluster handles req, and requests are handled one at a time, so the faults
// of an earlier request are spent or moot by now.
func (b *Broker) rejectProduce(c *kfake.Cluster, req *kmsg.ProduceRequest) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.faults {
		h.Remove()
	}
	b.faults = b.faults[:0]
	if len(b.rejects) == 0 {
		return
	}
	type target struct {
		topic   string
		topicID [16]byte
		code    int16
	}
	parts := map[target][]int32{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			keys, err := batchKeys(rp.Records)
			if err != nil {
				continue // the cluster answers CORRUPT_MESSAGE itself
			}
			for _, k := range keys {
				code, ok := b.rejects[k]
				if !ok {
					continue
				}
				b.rejections[k]++
				tg := target{topic: rt.Topic, topicID: rt.TopicID, code: code}
				parts[tg] = append(parts[tg], rp.Partition)
				break // one error per partition batch
			}
		}
	}
	for tg, ps := range parts {
		f := kfake.Fault{
			Keys:       []kmsg.Key{kmsg.Produce},
			Partitions: ps,
			Err:        kerrFor(tg.code),
			Count:      1, // one request, every listed partition
			When:       func(r kmsg.Request) bool { return r == kmsg.Request(req) },
		}
		if tg.topic != "" {
			f.Topic = tg.topic
		} else {
			f.TopicID = tg.topicID // produce v13 names topics by id
		}
		b.faults = append(b.faults, c.Fault(f))
	}
}

func kerrFor(code int16) *kerr.Error {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) && ke.Code == code {
		return ke
	}
	return &kerr.Error{Message: fmt.Sprintf("ERROR_%d", code), Code: code, Description: "injected by kafkatest"}
}

// batchKeys returns the record keys of one produce record batch.
func batchKeys(raw []byte) ([]string, error) {
	var batch kmsg.RecordBatch
	if err := batch.ReadFrom(raw); err != nil {
		return nil, err
	}
	recs := batch.Records
	if codec := kgo.CompressionCodecType(batch.Attributes & 0x0007); codec != kgo.CodecNone {
		var err error
		recs, err = kgo.DefaultDecompressor().Decompress(recs, codec)
		if err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, batch.NumRecords)
	for i := int32(0); i < batch.NumRecords; i++ {
		length, used := binary.Varint(recs)
		end := used + int(length)
		if used <= 0 || length < 0 || end > len(recs) {
			return nil, errors.New("truncated record")
		}
		var rec kmsg.Record
		if err := rec.ReadFrom(recs[:end]); err != nil {
			return nil, err
		}
		keys = append(keys, string(rec.Key))
		recs = recs[end:]
	}
	return keys, nil
}

// Record is one record read back from the topic.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
}

// Records reads the broker's topic with ReadTopic.
func (b *Broker) Records(t testing.TB, atLeast int, timeout time.Duration) []Record {
	t.Helper()
	return ReadTopic(t, b.Addr, b.Topic, atLeast, timeout)
}

// RawRecords reads the broker's topic with ReadTopicRaw: for tests that put
// records outside the contract on the topic themselves.
func (b *Broker) RawRecords(t testing.TB, atLeast int, timeout time.Duration) []Record {
	t.Helper()
	return ReadTopicRaw(t, b.Addr, b.Topic, atLeast, timeout)
}

// ReadTopic is ReadTopicRaw that also fails t unless every record keeps the
// message contract of the AsyncAPI document (event/asyncapi.json): key,
// headers and value, as eventtest.RequireValid checks them. Every test that
// reads what the service produced goes through here, so the document cannot
// drift from what is sent.
func ReadTopic(t testing.TB, addr, topic string, atLeast int, timeout time.Duration) []Record {
	t.Helper()
	recs := ReadTopicRaw(t, addr, topic, atLeast, timeout)
	msgs := make([]eventtest.Message, len(recs))
	for i, r := range recs {
		msgs[i] = eventtest.Message{Key: r.Key, Headers: r.Headers, Value: r.Value}
	}
	eventtest.RequireValid(t, msgs...)
	return recs
}

// ReadTopicRaw reads the whole topic at addr from the start as a
// read_committed consumer does (no record of an aborted transaction),
// until it holds at least atLeast records, a poll finds nothing more and no
// transaction is open, or until timeout passes; it then returns what it read, sorted by partition and
// offset. The caller asserts on the result, so a short read shows up as a
// clear failure. It works against any Kafka-protocol broker, such as the
// embedded one of `posting serve`.
func ReadTopicRaw(t testing.TB, addr, topic string, atLeast int, timeout time.Duration) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// What the service promises consumers: the records of committed
		// transactions, none of an aborted one (a stalled send's late copy).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.RetryTimeout(timeout),
	)
	require.NoError(t, err, "kafkatest: consumer")
	defer cl.Close()

	var out []Record
	for ctx.Err() == nil {
		pollCtx, pollCancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := cl.PollFetches(pollCtx)
		pollCancel()
		if fetches.NumRecords() == 0 && len(out) >= atLeast && settled(ctx, cl, topic) {
			// Nothing more within a poll, and no transaction open that
			// could still commit records before the end.
			break
		}
		fetches.EachRecord(func(r *kgo.Record) {
			rec := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: r.Value}
			if len(r.Headers) > 0 {
				rec.Headers = make(map[string]string, len(r.Headers))
				for _, h := range r.Headers {
					rec.Headers[h.Key] = string(h.Value)
				}
			}
			out = append(out, rec)
		})
	}
	if len(out) < atLeast {
		t.Logf("kafkatest: read %d records of topic %s, wanted at least %d within %s", len(out), topic, atLeast, timeout)
	}
	slices.SortFunc(out, func(x, y Record) int {
		if x.Partition != y.Partition {
			return int(x.Partition - y.Partition)
		}
		return int(x.Offset - y.Offset)
	})
	return out
}

// settled reports whether no partition of topic has a transaction open:
// its last stable offset is its end.
func settled(ctx context.Context, cl *kgo.Client, topic string) bool {
	ends, err := endoffset.List(ctx, cl, topic)
	if err != nil {
		return false
	}
	stable, err := endoffset.ListStable(ctx, cl, topic)
	if err != nil {
		return false
	}
	for p, end := range ends {
		if stable[p] != end {
			return false
		}
	}
	return true
}

// PartitionFor is the partition the Java client's default partitioner picks
// for key, toPositive(murmur2(key)) % partitions, as the service's producer
// does (kafka.PartitionFor). It is computed with franz-go's own murmur2
// partitioner, an implementation independent of sarama's, so a test that
// compares where the producer put a record with PartitionFor checks sarama
// against a second client. Tests also use it to choose keys that land on
// different partitions.
func PartitionFor(key string, partitions int32) int32 {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: []byte(key)}, int(partitions)))
}

// Produce writes recs to the broker's topic as they are (Topic, Partition and
// Offset are ignored; the key picks the partition as the service's producer
// would), synchronously, so tests can put any message, malformed
// ones included, in front of a consumer.
func (b *Broker) Produce(t testing.TB, recs ...Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DefaultProduceTopic(b.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err, "kafkatest: producer")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Key: []byte(r.Key), Value: r.Value, Partition: PartitionFor(r.Key, b.Partitions)}
		for k, v := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		out[i] = kr
	}
	require.NoError(t, cl.ProduceSync(ctx, out...).FirstErr(), "kafkatest: produce")
}
