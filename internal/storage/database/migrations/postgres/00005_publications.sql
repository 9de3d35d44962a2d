-- +goose Up
-- publications is the worker's durable schedule (see
-- mysql/00005_publications.sql): one row per post whose reservation event the
-- worker consumed, written with the event's inbox row. partition_id is the
-- Kafka partition of the event.
CREATE TABLE IF NOT EXISTS publications (
    post_id      BIGINT         NOT NULL PRIMARY KEY,
    event_id     VARCHAR(36)    NOT NULL,
    partition_id INT            NOT NULL,
    scheduled_at TIMESTAMPTZ(6) NOT NULL,
    status       VARCHAR(16)    NOT NULL DEFAULT 'PENDING'
        CONSTRAINT ck_publications_status CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED')),
    attempts     INT            NOT NULL DEFAULT 0,
    last_error   TEXT           NULL,
    created_at   TIMESTAMPTZ(6) NOT NULL,
    updated_at   TIMESTAMPTZ(6) NOT NULL,
    published_at TIMESTAMPTZ(6) NULL
);
-- a partition's pending publications, earliest first, when it is assigned
CREATE INDEX IF NOT EXISTS idx_publications_status_partition ON publications (status, partition_id, scheduled_at);

-- +goose Down
DROP TABLE publications;
