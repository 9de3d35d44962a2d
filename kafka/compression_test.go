package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// compressionTestCodecs records the compression codec (the low three bits
// of the batch attributes) of every record batch the broker is asked to
// write, by codec number: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
func compressionTestCodecs(b *kafkatest.Broker) func() map[int8]int {
	var mu sync.Mutex
	codecs := map[int8]int{}
	c := b.Cluster
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var batch kmsg.RecordBatch
				if batch.ReadFrom(rp.Records) == nil {
					codecs[int8(batch.Attributes&0x0007)]++
				}
			}
		}
		return nil, nil, false // observe only; the cluster writes the batch
	})
	return func() map[int8]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[int8]int{}
		for k, v := range codecs {
			out[k] = v
		}
		return out
	}
}

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       string   `json:"key"`
	Payload   string   `json:"payload"`
	Headers   []string `json:"headers"` // name, value, name, value...
}

// compressionTestKcat reads the whole topic with kcat (librdkafka), a client
// independent of sarama and franz-go. Without kcat on the PATH the test is
// skipped (ran is false), unless POSTING_TEST_REQUIRE_KCAT=1 makes it fail.
func compressionTestKcat(t *testing.T, addr, topic string) (recs []kcatRecord, ran bool) {
	t.Helper()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_KCAT") == "1" {
			t.Fatalf("kcat not found and POSTING_TEST_REQUIRE_KCAT=1: %v", err)
		}
		t.Log("kcat not on the PATH: the kcat read is skipped (apt-get install kcat)")
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q", "-J")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kcat: %s", stderr.String())
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r kcatRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "kcat line %s", sc.Text())
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	return recs, true
}

// Each codec: the producer sends batches compressed with it, and three
// independent clients read every message back intact: franz-go (kgo,
// kafkatest.ReadTopic), kcat (librdkafka) and the worker's sarama consumer.
func TestProducerCompressionReadByOtherClients(t *testing.T) {
	t.Parallel()
	for _, c := range Compressions() {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			b := kafkatest.Start(t)
			codecs := compressionTestCodecs(b)
			cfg := producerTestConfig(b.Addr)
			cfg.Compression = c
			p := producerTestNew(t, cfg)
			msgs := producerTestMessages(1, 60, 11, 12, 13, 14)
			producerTestRequireAllNil(t, p.Send(context.Background(), msgs))

			want, ok := c.codec()
			require.True(t, ok)
			seen := codecs()
			require.Len(t, seen, 1, "one codec for every batch: %v", seen)
			require.Positive(t, seen[int8(want)], "batches compressed with %s: %v", c, seen)

			wantValue := map[string]string{}
			for _, m := range msgs {
				wantValue[m.EventID] = string(event.WithSequence([]byte(m.Payload), m.ID))
			}

			recs := b.Records(t, len(msgs), 10*time.Second)
			require.Len(t, recs, len(msgs), "franz-go")
			for _, r := range recs {
				require.Equal(t, wantValue[r.Headers[event.HeaderEventID]], string(r.Value), "franz-go")
			}

			if krecs, ran := compressionTestKcat(t, b.Addr, b.Topic); ran {
				require.Len(t, krecs, len(msgs), "kcat")
				for _, r := range krecs {
					headers := map[string]string{}
					for i := 0; i+1 < len(r.Headers); i += 2 {
						headers[r.Headers[i]] = r.Headers[i+1]
					}
					require.Equal(t, wantValue[headers[event.HeaderEventID]], r.Payload, "kcat")
					require.Equal(t, kafkatest.PartitionFor(r.Key, b.Partitions), r.Partition, "kcat")
				}
			}

			h := &consumerTestHandler{}
			consumerTestStart(t, b.Addr, "compression-"+string(c), h, nil)
			require.Eventually(t, func() bool { return len(h.snapshot()) == len(msgs) }, 20*time.Second, 20*time.Millisecond, "sarama consumer")
			for _, ev := range h.snapshot() {
				require.JSONEq(t, wantValue[ev.EventID], string(ev.Value), "sarama consumer")
			}
		})
	}
}

func TestProducerConfigCompression(t *testing.T) {
	t.Parallel()
	require.Equal(t, CompressionNone, DefaultProducerConfig().Compression, "the Java client's default, read by every consumer")
	base := producerTestConfig("127.0.0.1:1").withDefaults()
	require.NoError(t, base.Validate())
	for _, c := range Compressions() {
		cfg := base
		cfg.Compression = c
		require.NoError(t, cfg.Validate(), "%s", c)
	}

	for _, tc := range []struct {
		compression Compression
		version     string
	}{
		{"brotli", "2.8.0"},
		{"LZ4", "2.8.0"}, // the names are lower case, as Java's compression.type
		{CompressionZstd, "2.0.0"},
	} {
		cfg := base
		cfg.Compression, cfg.KafkaVersion = tc.compression, tc.version
		err := cfg.Validate()
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "%+v", tc)
		require.Equal(t, "kafka.ProducerConfig.Compression", ce.Field)
		require.Equal(t, string(tc.compression), ce.Value)
		_, err = NewProducer(cfg, nil)
		require.ErrorContains(t, err, "invalid kafka producer config")
	}
}
