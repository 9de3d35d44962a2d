-- +goose Up
-- The SQLite twin of mysql/00001_init.sql: same tables, columns and indexes;
-- ENUMs become CHECK constraints and AUTOINCREMENT keeps ids from being reused,
-- so outbox id order stays the order of writes.
CREATE TABLE posts (
    id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    title        TEXT     NOT NULL,
    content      TEXT     NOT NULL,
    status       TEXT     NOT NULL CHECK (status IN ('RESERVED','WORKING','PUBLISHED','CANCELLED')),
    scheduled_at DATETIME NOT NULL,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    published_at DATETIME NULL,
    version      INTEGER  NOT NULL DEFAULT 1
);
CREATE INDEX idx_posts_status_scheduled_at_id ON posts (status, scheduled_at, id);
CREATE INDEX idx_posts_status_id ON posts (status, id);

CREATE TABLE outbox (
    id              INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT     NOT NULL,
    event_type      TEXT     NOT NULL CHECK (event_type IN ('POSTING_EVENT','POSTING_RESERVATION_EVENT')),
    aggregate_id    INTEGER  NOT NULL,
    payload         TEXT     NOT NULL CHECK (json_valid(payload)),
    created         DATETIME NOT NULL,
    status          TEXT     NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING','PROCESSING','SENT','RETRY','FAIL')),
    retry_count     INTEGER  NOT NULL DEFAULT 0,
    version         INTEGER  NOT NULL DEFAULT 1,
    next_attempt_at DATETIME NOT NULL,
    claimed_by      TEXT     NULL,
    claimed_at      DATETIME NULL,
    sent_at         DATETIME NULL,
    last_error      TEXT     NULL,
    dedup_key       TEXT     NULL
);
CREATE UNIQUE INDEX uk_outbox_event_id ON outbox (event_id);
CREATE UNIQUE INDEX uk_outbox_dedup_key ON outbox (dedup_key);
CREATE INDEX idx_outbox_status_created_id ON outbox (status, created, id);
CREATE INDEX idx_outbox_aggregate_status_id ON outbox (aggregate_id, status, id);

CREATE TABLE inbox (
    consumer     TEXT     NOT NULL,
    event_id     TEXT     NOT NULL,
    event_type   TEXT     NOT NULL,
    processed_at DATETIME NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- +goose Down
DROP TABLE inbox;
DROP TABLE outbox;
DROP TABLE posts;
