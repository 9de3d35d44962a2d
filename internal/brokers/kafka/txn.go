package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/relay"
)

// This file is the transactional path of Producer (ProducerConfig.
// TransactionalID set). It sends with franz-go: sarama's transactional
// producer races in its error paths (IBM/sarama#2913), and franz-go's is
// the one its own in-process broker, kfake, is tested against.
//
// Each Send is one transaction. A send that got no answer within the send
// timeout is never committed: Send tears its connections down and the
// client is closed once it returns, so the next client, with the same
// transactional id, takes a new epoch. The broker then aborts the old
// transaction and refuses the old epoch's late requests; a late request
// that lands before that is in the aborted transaction. Either way a
// read_committed consumer never reads it, so a post's next event cannot be
// overtaken by a late copy of the one before.

// errAborted is the outcome of a message that the broker took inside a
// transaction that was then aborted because another message of the batch
// failed (refused, or its partition unavailable): no read_committed
// consumer will read it, so it is unsent.
var errAborted = fmt.Errorf("%w: its transaction was aborted because another message of the batch failed", relay.ErrUnavailable)

// kgoOptions is the one place franz-go is configured for sending, the
// counterpart of saramaConfig: the same timeouts, acks, retries, codec,
// size bound and partitioner (franz-go's key partitioner is the Java
// client's murmur2, as newPartitioner is).
func (cfg ProducerConfig) kgoOptions(dial DialFunc) ([]kgo.Opt, error) {
	codec, err := cfg.Compression.kgoCodec()
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TransactionTimeout()),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(cfg.AckTimeout),
		kgo.RequestTimeoutOverhead(cfg.RequestTimeout - cfg.AckTimeout),
		kgo.RecordRetries(cfg.Retries),
		kgo.RequestRetries(cfg.Retries),
		kgo.RetryBackoffFn(func(int) time.Duration { return cfg.RetryBackoff }),
		// A partition batch is retried once its metadata is fresh again;
		// franz-go's default wait for that (5 s) made a partition that
		// keeps answering a retriable error (NOT_ENOUGH_REPLICAS) hold
		// the whole transaction 15 s. sarama refreshes after its backoff.
		kgo.MetadataMinAge(cfg.RetryBackoff),
		kgo.RecordDeliveryTimeout(cfg.SendTimeout),
		// A request other than a produce (finding the transaction's
		// coordinator, taking a producer id, ending the transaction) is
		// retried for at most one attempt's worth, as sarama's metadata
		// is: a cluster that is down is told at once, not at the send
		// timeout.
		kgo.RetryTimeout(cfg.DialTimeout + cfg.RequestTimeout),
		kgo.DialTimeout(cfg.DialTimeout),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) { return dial(ctx, network, host) }),
		kgo.ProducerLinger(0),
		// The cluster decides, as with sarama: with
		// auto.create.topics.enable it creates the topic.
		kgo.AllowAutoTopicCreation(),
	}
	if v := kversion.FromString(cfg.KafkaVersion); v != nil {
		opts = append(opts, kgo.MaxVersions(v))
	}
	return opts, nil
}

// kgoCodec is franz-go's codec for c.
func (c Compression) kgoCodec() (kgo.CompressionCodec, error) {
	switch c {
	case CompressionNone:
		return kgo.NoCompression(), nil
	case CompressionGzip:
		return kgo.GzipCompression(), nil
	case CompressionSnappy:
		return kgo.SnappyCompression(), nil
	case CompressionLZ4:
		return kgo.Lz4Compression(), nil
	case CompressionZstd:
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown compression %q", c)
}

// kgoRecords are msgs as franz-go records, with the same key, value and
// headers as the sarama path's.
func (p *Producer) kgoRecords(msgs []event.Message) []*kgo.Record {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		hs := make([]kgo.RecordHeader, len(m.Headers))
		for j, h := range m.Headers {
			hs[j] = kgo.RecordHeader{Key: headerKey(h), Value: []byte(h.Value)}
		}
		recs[i] = &kgo.Record{Topic: p.cfg.Topic, Key: []byte(m.Key), Value: m.Value, Headers: hs}
	}
	return recs
}

// connectTxn returns the current franz-go client or builds one. It holds
// the turn.
func (p *Producer) connectTxn() (*kgo.Client, *connSet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errProducerClosed
	}
	if p.cl != nil {
		return p.cl, p.conns, nil
	}
	conns := newConnSet(p.cfg.Dial, p.cfg.DialTimeout)
	opts, err := p.cfg.kgoOptions(conns.DialContext)
	if err != nil {
		return nil, nil, &ProducerRejectedError{Err: err}
	}
	opts = append(opts, kgo.WithHooks(&conns.ends))
	cl, err := kgo.NewClient(opts...)
	if err == nil {
		// franz-go connects lazily and would wait for a producer id until
		// the delivery timeout: a cluster that is down is told now.
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout+p.cfg.RequestTimeout)
		if err = cl.Ping(ctx); err != nil {
			cl.Close()
		}
		cancel()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: connect to %s: %w", relay.ErrUnavailable, strings.Join(p.cfg.Brokers, ","), err)
	}
	p.cl, p.conns = cl, conns
	if !p.connected {
		p.connected = true
		p.logger.Info("kafka producer connected", "brokers", strings.Join(p.cfg.Brokers, ","), "topic", p.cfg.Topic,
			"client_id", p.cfg.ClientID, "transactional_id", p.cfg.TransactionalID)
	}
	return cl, conns, nil
}

// disconnectTxn closes cl if it is still the current client, so the next
// send builds a new one, which fences cl's epoch.
func (p *Producer) disconnectTxn(cl *kgo.Client) {
	p.mu.Lock()
	if p.cl == cl {
		p.cl, p.conns = nil, nil
	}
	p.mu.Unlock()
	cl.Close()
}

// sendTxn sends msgs in one transaction, holding the turn. ctx ends when
// Send gives up (abandoned is then set). A message the broker refused, or
// whose partition stayed unavailable, aborts the transaction (a
// transaction is all or nothing); the others are then sent once more in a
// transaction of their own, so one refused record or one sick partition
// does not hold back the rest of its batch.
func (p *Producer) sendTxn(ctx context.Context, msgs []event.Message, abandoned *atomic.Bool, connsOut chan<- *connSet) []error {
	errs := make([]error, len(msgs))
	cl, conns, err := p.connectTxn()
	if err != nil {
		return relay.FailAll(errs, err)
	}
	connsOut <- conns
	if abandoned.Load() {
		conns.tearDown() // Send gave up while we connected
	}
	recs := p.kgoRecords(msgs)
	todo := make([]int, len(recs))
	for i := range todo {
		todo[i] = i
	}
	outage := false
	for round := 0; ; round++ {
		err = p.transaction(ctx, cl, conns, recs, todo, errs, abandoned)
		for _, i := range todo {
			outage = outage || (errs[i] != nil && !errors.Is(errs[i], errAborted) && !refusal(errs[i]))
		}
		if !errors.Is(err, errAborted) || round > 0 {
			break
		}
		var rest []int
		for _, i := range todo {
			if errors.Is(errs[i], errAborted) {
				rest = append(rest, i)
			}
		}
		if len(rest) == 0 {
			break
		}
		todo = rest
	}
	// After an outage the client may be in a state a new one resets.
	if (err != nil && !errors.Is(err, errAborted)) || outage || abandoned.Load() || p.isClosed() {
		p.fenced(append([]error{err}, errs...)...)
		p.disconnectTxn(cl)
	}
	return errs
}

// transaction runs one transaction of recs[i] for i in todo and sets
// errs[i]. It returns nil once committed; errAborted after a clean abort
// (the client may go on); any other error leaves the client to be closed.
func (p *Producer) transaction(ctx context.Context, cl *kgo.Client, conns *connSet, recs []*kgo.Record, todo []int, errs []error, abandoned *atomic.Bool) error {
	fail := func(err error) error {
		for _, i := range todo {
			errs[i] = err
		}
		return err
	}
	if err := cl.BeginTransaction(); err != nil {
		return fail(fmt.Errorf("%w: begin transaction: %w", relay.ErrUnavailable, err))
	}
	batch := make([]*kgo.Record, len(todo))
	index := make(map[*kgo.Record]int, len(todo)) // results come in the order they complete
	for j, i := range todo {
		batch[j] = recs[i]
		index[recs[i]] = i
	}
	// Records already sent wait for an answer whatever ctx says, and a
	// torn-down connection never gives one: once Send gives up, fail them
	// all. Their sequence numbers are lost with them, so the client is
	// closed after (sendTxn) and the next one starts a new epoch.
	produced := make(chan struct{})
	defer close(produced)
	go func() {
		select {
		case <-ctx.Done():
			if abandoned.Load() {
				cl.UnsafeAbortBufferedRecords()
			}
		case <-produced:
		}
	}()
	for _, res := range cl.ProduceSync(ctx, batch...) {
		i, ok := index[res.Record]
		if !ok {
			continue
		}
		errs[i] = nil
		if res.Err != nil {
			errs[i] = kgoClassify(res.Err)
		}
	}
	if abandoned.Load() || ctx.Err() != nil {
		// Never commit what Send gave up on: the next client's epoch
		// aborts it.
		return fail(fmt.Errorf("%w: send abandoned, transaction left to be aborted", relay.ErrUnavailable))
	}
	ok, wrote := true, false
	for _, i := range todo {
		ok = ok && errs[i] == nil
		wrote = wrote || errs[i] == nil
	}
	ends := conns.ends.answered.Load()
	// ended says whether the broker answered an EndTxn since ends. A
	// transaction that wrote a record is over only then: franz-go's
	// EndTransaction can return nil without sending one (seen with
	// v1.22.3 under load: it found no partition marked added), which left
	// the records in a transaction still open, reported as committed. A
	// read_committed consumer would never have read them, and the next
	// transaction under this epoch would have joined it.
	ended := func() bool { return conns.ends.answered.Load() > ends }
	if ok {
		if err := p.endTransaction(ctx, cl, kgo.TryCommit); err != nil {
			// Whether the commit landed is not known, and the rows are
			// released at once. A resend (from this instance, after the
			// next client's epoch settled it, or from another one at any
			// time) follows the first copy, never a later event: the open
			// transaction's records sit before it on the partition, and
			// read_committed reads stop there until it ends.
			return fail(fmt.Errorf("%w: commit transaction: %w", relay.ErrUnavailable, err))
		}
		if !ended() {
			// Not committed: the next client's epoch aborts it (sendTxn
			// closes this one), and the rows are sent again.
			return fail(fmt.Errorf("%w: commit transaction: the client ended it without asking the broker", relay.ErrUnavailable))
		}
		return nil
	}
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		return fail(fmt.Errorf("%w: abort transaction: %w", relay.ErrUnavailable, err))
	}
	err := p.endTransaction(ctx, cl, kgo.TryAbort)
	if err == nil && wrote && !ended() {
		// The records written stay in an open transaction that this
		// client's next one would join and commit: close the client
		// instead (sendTxn), whose successor's epoch aborts it.
		err = errors.New("the client ended it without asking the broker")
	}
	if err != nil {
		for _, i := range todo {
			if errs[i] == nil || !refusal(errs[i]) {
				errs[i] = fmt.Errorf("%w: abort transaction: %w", relay.ErrUnavailable, err)
			}
		}
		return err
	}
	for _, i := range todo {
		if errs[i] == nil {
			errs[i] = errAborted
		}
	}
	return errAborted
}

// endTransaction is cl.EndTransaction, or what a test put in its place.
func (p *Producer) endTransaction(ctx context.Context, cl *kgo.Client, how kgo.TransactionEndTry) error {
	if p.endTxn != nil {
		return p.endTxn(ctx, cl, how)
	}
	return cl.EndTransaction(ctx, how)
}

func refusal(err error) bool {
	var rej *ProducerRejectedError
	return errors.As(err, &rej)
}

// kgoClassify is producerClassify for franz-go's errors: Kafka codes by the
// same table, the client's own refusals of a record as rejections, and
// everything else (timeouts, connections, a closed client, an abort) as
// unavailable.
func kgoClassify(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return classifyCode(ke.Code, err)
	}
	return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
}

// fenced logs, once, that another producer took this one's transactional
// id: two instances given the same POSTING_INSTANCE_ID fence each other's
// every transaction. The fence shows in the transaction's error or only in
// its messages' (franz-go fails the records with it, and an abort of a
// transaction that added no partition ends without asking the broker).
func (p *Producer) fenced(errs ...error) {
	for _, err := range errs {
		if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
			p.logger.Warn("kafka producer fenced: another producer uses its transactional id (two instances with one instance id?)",
				"transactional_id", p.cfg.TransactionalID, "error", err)
			return
		}
	}
}

// ErrTransactionalIDRefused is what CheckTransactions reports when the
// cluster refuses the producer's transactional id (an ACL).
var ErrTransactionalIDRefused = errors.New("the cluster refuses the transactional id")

// CheckTransactions takes the producer's transactional id on the cluster:
// it loads a producer id with a new epoch, which also aborts a transaction
// an earlier run under the same id left open (read_committed consumers of
// its partitions wait no longer), and tells at start a cluster that
// refuses the id, which every send would otherwise fail on. A producer
// without a transactional id has nothing to check. It waits for a running
// send up to SendTimeout.
func (p *Producer) CheckTransactions(ctx context.Context) error {
	if p.cfg.TransactionalID == "" {
		return nil
	}
	release, ok := p.turn.Within(p.cfg.SendTimeout)
	if !ok {
		return fmt.Errorf("%w: a send still runs after %s", relay.ErrUnavailable, p.cfg.SendTimeout)
	}
	defer release()
	cl, _, err := p.connectTxn()
	if err != nil {
		return err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		p.disconnectTxn(cl)
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return fmt.Errorf("%w %q (%w): grant the service's principal Write and Describe on it",
				ErrTransactionalIDRefused, p.cfg.TransactionalID, err)
		}
		return fmt.Errorf("%w: take the transactional id %q: %w", relay.ErrUnavailable, p.cfg.TransactionalID, err)
	}
	return nil
}
