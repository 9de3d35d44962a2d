-- +goose Up
-- The SQLite twin of mysql/00012_series.sql: recurring series, the
-- (series, occurrence) key that makes each occurrence a post once, and the
-- series columns of posts (added in place: they are nullable or have a
-- default).
CREATE TABLE IF NOT EXISTS series (
    id                 INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    owner_id           TEXT     NOT NULL DEFAULT '',
    title              TEXT     NOT NULL,
    content            TEXT     NOT NULL,
    time_zone          TEXT     NOT NULL,
    start_local        DATETIME NOT NULL,
    rrule              TEXT     NOT NULL,
    publish_within     TEXT     NULL,
    status             TEXT     NOT NULL CHECK (status IN ('ACTIVE','ENDED','CANCELLED')),
    materialized_until DATETIME NOT NULL,
    created_at         DATETIME NOT NULL,
    updated_at         DATETIME NOT NULL,
    version            INTEGER  NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS idx_series_status_materialized ON series (status, materialized_until, id);
CREATE INDEX IF NOT EXISTS idx_series_owner_id ON series (owner_id, id);

CREATE TABLE IF NOT EXISTS series_occurrences (
    series_id  INTEGER  NOT NULL,
    occurrence DATETIME NOT NULL,
    post_id    INTEGER  NULL,
    PRIMARY KEY (series_id, occurrence)
);

ALTER TABLE posts ADD COLUMN series_id INTEGER NULL;
ALTER TABLE posts ADD COLUMN occurrence DATETIME NULL;
ALTER TABLE posts ADD COLUMN series_exception BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX idx_posts_series_id ON posts (series_id, id);

-- +goose Down
DROP INDEX idx_posts_series_id;
ALTER TABLE posts DROP COLUMN series_exception;
ALTER TABLE posts DROP COLUMN occurrence;
ALTER TABLE posts DROP COLUMN series_id;
DROP TABLE series_occurrences;
DROP TABLE series;
