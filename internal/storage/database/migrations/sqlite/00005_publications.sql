-- +goose Up
-- The SQLite twin of mysql/00005_publications.sql: the worker's durable
-- schedule of publications, one row per post, re-armed by whichever worker
-- is assigned the row's Kafka partition.
CREATE TABLE publications (
    post_id      INTEGER  NOT NULL PRIMARY KEY,
    event_id     TEXT     NOT NULL,
    partition_id INTEGER  NOT NULL,
    scheduled_at DATETIME NOT NULL,
    status       TEXT     NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED')),
    attempts     INTEGER  NOT NULL DEFAULT 0,
    last_error   TEXT     NULL,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    published_at DATETIME NULL
);
CREATE INDEX idx_publications_status_partition ON publications (status, partition_id, scheduled_at);

-- +goose Down
DROP TABLE publications;
