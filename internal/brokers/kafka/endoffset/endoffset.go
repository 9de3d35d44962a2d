// Package endoffset reads where a topic's partitions end, with franz-go's
// raw requests: what a reader that wants only what comes next (posting
// bench) or one that reads up to the end (kafkatest) starts from or stops at.
package endoffset

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// List returns the end offset (the high watermark: the offset the next
// record gets) of every partition of topic, by partition. A topic the
// cluster does not know, one without partitions, or an answer that leaves
// a partition out is an error.
func List(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	return list(ctx, cl, topic, 0)
}

// ListStable returns the last stable offset of every partition of topic:
// the end as a read_committed consumer sees it, before the first record of
// a transaction still open. It equals List's offset when none is open.
func ListStable(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	return list(ctx, cl, topic, 1)
}

// list asks the end offsets at isolation level isolation (0
// read_uncommitted, 1 read_committed).
func list(ctx context.Context, cl *kgo.Client, topic string, isolation int8) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	metaResp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	list := kmsg.NewPtrListOffsetsRequest()
	list.IsolationLevel = isolation
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, t := range metaResp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp = p.Partition, -1 // -1: the end
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	if len(lt.Partitions) == 0 {
		return nil, fmt.Errorf("partitions of %s: none", topic)
	}
	list.Topics = append(list.Topics, lt)
	listResp, err := list.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := make(map[int32]int64, len(lt.Partitions))
	for _, t := range listResp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	if len(ends) != len(lt.Partitions) {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, len(ends), len(lt.Partitions))
	}
	return ends, nil
}
