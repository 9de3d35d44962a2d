-- +goose Up
-- inbox_sequences holds, per consumer and post, the highest event sequence
-- (the CloudEvents sequence extension, the outbox row id) the consumer has
-- applied. An event of the post whose sequence is not above it arrived
-- after a later one (a send that timed out and landed late, a broker that
-- stalled): the consumer records it in the inbox and drops it. Written in the
-- same transaction as the inbox row. One row per post that sent a sequence.
CREATE TABLE IF NOT EXISTS inbox_sequences (
    consumer VARCHAR(100) NOT NULL,
    post_id  BIGINT       NOT NULL,
    sequence BIGINT       NOT NULL,
    PRIMARY KEY (consumer, post_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- +goose Down
DROP TABLE inbox_sequences;
