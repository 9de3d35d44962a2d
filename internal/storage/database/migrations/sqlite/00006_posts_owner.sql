-- +goose Up
-- The SQLite twin of mysql/00006_posts_owner.sql: owner_id is the JWT
-- subject that created the post, "" without authentication (TEXT compares
-- byte for byte, BINARY collation).
ALTER TABLE posts ADD COLUMN owner_id TEXT NOT NULL DEFAULT '';
CREATE INDEX idx_posts_owner_id ON posts (owner_id, id);
CREATE INDEX idx_posts_owner_status_id ON posts (owner_id, status, id);

-- +goose Down
DROP INDEX idx_posts_owner_status_id;
DROP INDEX idx_posts_owner_id;
ALTER TABLE posts DROP COLUMN owner_id;
