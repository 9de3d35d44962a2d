-- +goose Up
-- The SQLite twin of mysql/00008_posts_traceparent.sql: the W3C traceparent
-- of the request that created the post or last edited it. NULL: none.
ALTER TABLE posts ADD COLUMN traceparent VARCHAR(55) NULL;

-- +goose Down
ALTER TABLE posts DROP COLUMN traceparent;
