-- +goose Up
-- Recurring series. A series holds an RFC 5545 rule in a time zone; the
-- service makes each occurrence within its horizon into an ordinary post
-- (posts.series_id, posts.occurrence) ahead of time.
-- start_local and occurrence are wall times of the series' zone, kept as
-- DATETIME values without a zone; every other time is UTC.
-- materialized_until is the instant up to which the series' occurrences
-- have been made into posts; idx_series_status_materialized finds the
-- series whose horizon moved past it.
-- series_occurrences holds one row per (series, occurrence) made into a
-- post: its primary key, written with an insert that skips a taken key, is
-- what makes each occurrence a post exactly once, however many instances
-- materialize. A series edit that drops an occurrence deletes its row.
-- posts.series_exception marks an occurrence post changed on its own (an
-- edit or a cancel through the posts API): series edits leave it alone.
--
-- MySQL commits each statement on its own: a start killed part way runs the
-- whole migration again. So every statement but the last can run twice
-- (IF NOT EXISTS), and the ALTER of posts is one statement and comes last.
CREATE TABLE IF NOT EXISTS series (
    id                 BIGINT        NOT NULL AUTO_INCREMENT,
    owner_id           VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    title              VARCHAR(200)  NOT NULL,
    content            MEDIUMTEXT    NOT NULL,
    time_zone          VARCHAR(64)   NOT NULL,
    start_local        DATETIME(6)   NOT NULL,
    rrule              VARCHAR(1000) NOT NULL,
    publish_within     VARCHAR(64)   NULL,
    status             ENUM('ACTIVE','ENDED','CANCELLED') NOT NULL,
    materialized_until DATETIME(6)   NOT NULL,
    created_at         DATETIME(6)   NOT NULL,
    updated_at         DATETIME(6)   NOT NULL,
    version            BIGINT        NOT NULL DEFAULT 1,
    PRIMARY KEY (id),
    KEY idx_series_status_materialized (status, materialized_until, id),
    KEY idx_series_owner_id (owner_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS series_occurrences (
    series_id  BIGINT      NOT NULL,
    occurrence DATETIME(6) NOT NULL,
    post_id    BIGINT      NULL,
    PRIMARY KEY (series_id, occurrence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

ALTER TABLE posts
    ADD COLUMN series_id BIGINT NULL,
    ADD COLUMN occurrence DATETIME(6) NULL,
    ADD COLUMN series_exception BOOLEAN NOT NULL DEFAULT FALSE,
    ADD INDEX idx_posts_series_id (series_id, id);

-- +goose Down
ALTER TABLE posts
    DROP INDEX idx_posts_series_id,
    DROP COLUMN series_exception,
    DROP COLUMN occurrence,
    DROP COLUMN series_id;
DROP TABLE IF EXISTS series_occurrences;
DROP TABLE IF EXISTS series;
