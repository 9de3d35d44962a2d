-- +goose Up
-- publications is the worker's durable schedule: one row per post whose
-- reservation event the worker consumed, written in the same transaction as
-- the event's inbox row. A PENDING row is a publication still to happen at
-- scheduled_at; a worker that is assigned the row's partition (after a
-- restart or a rebalance) arms a timer for it, so no pending publication is
-- lost with a process. partition_id is the Kafka partition of the event.
CREATE TABLE IF NOT EXISTS publications (
    post_id      BIGINT       NOT NULL,
    event_id     CHAR(36)     NOT NULL,
    partition_id INT          NOT NULL,
    scheduled_at DATETIME(6)  NOT NULL,
    status       ENUM('PENDING','PUBLISHED','CANCELLED','FAILED') NOT NULL DEFAULT 'PENDING',
    attempts     INT          NOT NULL DEFAULT 0,
    last_error   TEXT         NULL,
    created_at   DATETIME(6)  NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    published_at DATETIME(6)  NULL,
    PRIMARY KEY (post_id),
    -- a partition's pending publications, earliest first, when it is assigned
    KEY idx_publications_status_partition (status, partition_id, scheduled_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- +goose Down
DROP TABLE publications;
