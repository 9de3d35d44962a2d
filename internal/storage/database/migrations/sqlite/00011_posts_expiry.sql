-- +goose Up
-- The SQLite twin of mysql/00011_posts_expiry.sql. SQLite cannot change a
-- CHECK constraint in place, so posts and publications are rebuilt: a new
-- table, the rows copied, the old one dropped, the new one renamed, the
-- indexes made again. posts keeps its AUTOINCREMENT counter, so an id is
-- never handed out twice.
CREATE TABLE posts_new (
    id                 INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    title              TEXT     NOT NULL,
    content            TEXT     NOT NULL,
    status             TEXT     NOT NULL CHECK (status IN ('RESERVED','WORKING','PUBLISHED','CANCELLED','EXPIRED')),
    scheduled_at       DATETIME NOT NULL,
    created_at         DATETIME NOT NULL,
    updated_at         DATETIME NOT NULL,
    published_at       DATETIME NULL,
    version            INTEGER  NOT NULL DEFAULT 1,
    owner_id           TEXT     NOT NULL DEFAULT '',
    traceparent        VARCHAR(55) NULL,
    publish_by         DATETIME NULL,
    publish_claimed_at DATETIME NULL,
    reannounced        INTEGER  NOT NULL DEFAULT 0
);
INSERT INTO posts_new (id, title, content, status, scheduled_at, created_at, updated_at, published_at, version, owner_id, traceparent)
    SELECT id, title, content, status, scheduled_at, created_at, updated_at, published_at, version, owner_id, traceparent FROM posts;
DELETE FROM sqlite_sequence WHERE name = 'posts_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'posts_new', seq FROM sqlite_sequence WHERE name = 'posts';
DROP TABLE posts;
ALTER TABLE posts_new RENAME TO posts;
CREATE INDEX idx_posts_status_scheduled_at_id ON posts (status, scheduled_at, id);
CREATE INDEX idx_posts_status_id ON posts (status, id);
CREATE INDEX idx_posts_owner_id ON posts (owner_id, id);
CREATE INDEX idx_posts_owner_status_id ON posts (owner_id, status, id);
CREATE INDEX idx_posts_status_publish_by ON posts (status, publish_by);

CREATE TABLE publications_new (
    post_id      INTEGER  NOT NULL PRIMARY KEY,
    event_id     TEXT     NOT NULL,
    partition_id INTEGER  NOT NULL,
    scheduled_at DATETIME NOT NULL,
    status       TEXT     NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED','EXPIRED')),
    attempts     INTEGER  NOT NULL DEFAULT 0,
    last_error   TEXT     NULL,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    published_at DATETIME NULL,
    traceparent  VARCHAR(55) NULL
);
INSERT INTO publications_new SELECT post_id, event_id, partition_id, scheduled_at, status, attempts, last_error,
    created_at, updated_at, published_at, traceparent FROM publications;
DROP TABLE publications;
ALTER TABLE publications_new RENAME TO publications;
CREATE INDEX idx_publications_status_partition ON publications (status, partition_id, scheduled_at);

CREATE TABLE IF NOT EXISTS leases (
    name       TEXT     NOT NULL PRIMARY KEY,
    holder     TEXT     NOT NULL,
    info       TEXT     NOT NULL DEFAULT '',
    expires_at DATETIME NOT NULL
);

-- +goose Down
DROP TABLE leases;

CREATE TABLE publications_old (
    post_id      INTEGER  NOT NULL PRIMARY KEY,
    event_id     TEXT     NOT NULL,
    partition_id INTEGER  NOT NULL,
    scheduled_at DATETIME NOT NULL,
    status       TEXT     NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED')),
    attempts     INTEGER  NOT NULL DEFAULT 0,
    last_error   TEXT     NULL,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    published_at DATETIME NULL,
    traceparent  VARCHAR(55) NULL
);
INSERT INTO publications_old SELECT post_id, event_id, partition_id, scheduled_at,
    CASE status WHEN 'EXPIRED' THEN 'CANCELLED' ELSE status END, attempts, last_error,
    created_at, updated_at, published_at, traceparent FROM publications;
DROP TABLE publications;
ALTER TABLE publications_old RENAME TO publications;
CREATE INDEX idx_publications_status_partition ON publications (status, partition_id, scheduled_at);

CREATE TABLE posts_old (
    id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    title        TEXT     NOT NULL,
    content      TEXT     NOT NULL,
    status       TEXT     NOT NULL CHECK (status IN ('RESERVED','WORKING','PUBLISHED','CANCELLED')),
    scheduled_at DATETIME NOT NULL,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    published_at DATETIME NULL,
    version      INTEGER  NOT NULL DEFAULT 1,
    owner_id     TEXT     NOT NULL DEFAULT '',
    traceparent  VARCHAR(55) NULL
);
INSERT INTO posts_old (id, title, content, status, scheduled_at, created_at, updated_at, published_at, version, owner_id, traceparent)
    SELECT id, title, content, CASE status WHEN 'EXPIRED' THEN 'CANCELLED' ELSE status END,
        scheduled_at, created_at, updated_at, published_at, version, owner_id, traceparent FROM posts;
DELETE FROM sqlite_sequence WHERE name = 'posts_old';
INSERT INTO sqlite_sequence (name, seq) SELECT 'posts_old', seq FROM sqlite_sequence WHERE name = 'posts';
DROP TABLE posts;
ALTER TABLE posts_old RENAME TO posts;
CREATE INDEX idx_posts_status_scheduled_at_id ON posts (status, scheduled_at, id);
CREATE INDEX idx_posts_status_id ON posts (status, id);
CREATE INDEX idx_posts_owner_id ON posts (owner_id, id);
CREATE INDEX idx_posts_owner_status_id ON posts (owner_id, status, id);
