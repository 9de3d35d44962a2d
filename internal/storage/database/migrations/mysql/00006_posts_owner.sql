-- +goose Up
-- owner_id is the JWT subject (sub) that created the post; "" for a post
-- created while the API ran without authentication (and for every post that
-- existed before this migration). The binary collation compares it byte for
-- byte, as a subject is compared: "alice" and "Alice " are two owners.
-- idx_posts_owner_id serves an owner's list in id order (the default),
-- idx_posts_owner_status_id the same list filtered by status. One ALTER, so a
-- process killed during the migration leaves it either applied or not.
ALTER TABLE posts
    ADD COLUMN owner_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    ADD INDEX idx_posts_owner_id (owner_id, id),
    ADD INDEX idx_posts_owner_status_id (owner_id, status, id);

-- +goose Down
ALTER TABLE posts
    DROP INDEX idx_posts_owner_status_id,
    DROP INDEX idx_posts_owner_id,
    DROP COLUMN owner_id;
