-- +goose Up
-- The PostgreSQL twin of mysql/00011_posts_expiry.sql: publish_by, the
-- worker's publish_claimed_at, the overdue check's reannounced count, the
-- EXPIRED status of posts and publications, and the leases table.
ALTER TABLE posts DROP CONSTRAINT ck_posts_status;
ALTER TABLE posts
    ADD CONSTRAINT ck_posts_status CHECK (status IN ('RESERVED','WORKING','PUBLISHED','CANCELLED','EXPIRED')),
    ADD COLUMN publish_by TIMESTAMPTZ(6) NULL,
    ADD COLUMN publish_claimed_at TIMESTAMPTZ(6) NULL,
    ADD COLUMN reannounced INT NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS idx_posts_status_publish_by ON posts (status, publish_by);

ALTER TABLE publications DROP CONSTRAINT ck_publications_status;
ALTER TABLE publications
    ADD CONSTRAINT ck_publications_status CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED','EXPIRED'));

CREATE TABLE IF NOT EXISTS leases (
    name       VARCHAR(100)   NOT NULL PRIMARY KEY,
    holder     VARCHAR(255)   NOT NULL,
    info       VARCHAR(255)   NOT NULL DEFAULT '',
    expires_at TIMESTAMPTZ(6) NOT NULL
);

-- +goose Down
DROP TABLE leases;
UPDATE publications SET status = 'CANCELLED' WHERE status = 'EXPIRED';
UPDATE posts SET status = 'CANCELLED' WHERE status = 'EXPIRED';
ALTER TABLE publications DROP CONSTRAINT ck_publications_status;
ALTER TABLE publications
    ADD CONSTRAINT ck_publications_status CHECK (status IN ('PENDING','PUBLISHED','CANCELLED','FAILED'));
DROP INDEX idx_posts_status_publish_by;
ALTER TABLE posts DROP CONSTRAINT ck_posts_status;
ALTER TABLE posts
    DROP COLUMN reannounced,
    DROP COLUMN publish_claimed_at,
    DROP COLUMN publish_by,
    ADD CONSTRAINT ck_posts_status CHECK (status IN ('RESERVED','WORKING','PUBLISHED','CANCELLED'));
