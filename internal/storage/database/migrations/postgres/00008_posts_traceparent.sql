-- +goose Up
-- The W3C traceparent of the request that created the post or last edited
-- it (see mysql/00008_posts_traceparent.sql). A nullable column without a
-- default is a catalog change only. NULL: none.
ALTER TABLE posts ADD COLUMN traceparent VARCHAR(55) NULL;

-- +goose Down
ALTER TABLE posts DROP COLUMN traceparent;
