-- +goose Up
-- inbox_sequences: the highest event sequence each consumer applied per post
-- (see mysql/00010_inbox_sequences.sql).
CREATE TABLE IF NOT EXISTS inbox_sequences (
    consumer VARCHAR(100) NOT NULL,
    post_id  BIGINT       NOT NULL,
    sequence BIGINT       NOT NULL,
    PRIMARY KEY (consumer, post_id)
);

-- +goose Down
DROP TABLE inbox_sequences;
