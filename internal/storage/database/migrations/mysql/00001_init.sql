-- +goose Up
-- MySQL commits each DDL statement on its own: a process killed inside this
-- migration leaves some tables created and the migration unrecorded. IF NOT
-- EXISTS lets the next start finish it instead of failing on "already exists".
-- posts holds the reservations. version is the optimistic lock that makes a
-- lost update impossible: every change is "UPDATE ... WHERE version = ?".
CREATE TABLE IF NOT EXISTS posts (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    title        VARCHAR(200) NOT NULL,
    content      MEDIUMTEXT   NOT NULL,
    status       ENUM('RESERVED','WORKING','PUBLISHED','CANCELLED') NOT NULL,
    scheduled_at DATETIME(6)  NOT NULL,
    created_at   DATETIME(6)  NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    published_at DATETIME(6)  NULL,
    version      BIGINT       NOT NULL DEFAULT 1,
    PRIMARY KEY (id),
    -- the scheduler: RESERVED posts due before a moment, oldest first
    KEY idx_posts_status_scheduled_at_id (status, scheduled_at, id),
    -- keyset pagination of GET /api/v1/posts?status=
    KEY idx_posts_status_id (status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- outbox is the transactional outbox: a row is written in the same
-- transaction as the post change it announces, and the relay moves it to Kafka.
CREATE TABLE IF NOT EXISTS outbox (
    id              BIGINT      NOT NULL AUTO_INCREMENT,
    event_id        CHAR(36)    NOT NULL,
    event_type      ENUM('POSTING_EVENT','POSTING_RESERVATION_EVENT') NOT NULL,
    aggregate_id    BIGINT      NOT NULL,
    payload         JSON        NOT NULL,
    created         DATETIME(6) NOT NULL,
    status          ENUM('PENDING','PROCESSING','SENT','RETRY','FAIL') NOT NULL DEFAULT 'PENDING',
    retry_count     INT         NOT NULL DEFAULT 0,
    version         BIGINT      NOT NULL DEFAULT 1,
    next_attempt_at DATETIME(6) NOT NULL,
    claimed_by      VARCHAR(255) NULL,
    claimed_at      DATETIME(6) NULL,
    sent_at         DATETIME(6) NULL,
    last_error      TEXT        NULL,
    -- dedup_key guards events that must exist at most once, such as the one
    -- reservation event of a post, whatever number of schedulers run.
    dedup_key       VARCHAR(191) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_outbox_event_id (event_id),
    UNIQUE KEY uk_outbox_dedup_key (dedup_key),
    -- the claim: rows of one status in (created, id) order without a sort
    KEY idx_outbox_status_created_id (status, created, id),
    -- per-key order: "is an earlier event of this post still unsent?"
    KEY idx_outbox_aggregate_status_id (aggregate_id, status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- inbox records the events a consumer has processed, written in the same
-- transaction as the consumer's own work, so a redelivery is recognised.
CREATE TABLE IF NOT EXISTS inbox (
    consumer     VARCHAR(100) NOT NULL,
    event_id     CHAR(36)     NOT NULL,
    event_type   VARCHAR(64)  NOT NULL,
    processed_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (consumer, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- +goose Down
DROP TABLE inbox;
DROP TABLE outbox;
DROP TABLE posts;
