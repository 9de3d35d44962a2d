-- +goose Up
-- The PostgreSQL twin of mysql/00006_posts_owner.sql: owner_id is the JWT
-- subject that created the post, "" without authentication; text compares
-- byte for byte under the database's deterministic collation. Adding a
-- column with a constant default does not rewrite the table.
ALTER TABLE posts ADD COLUMN owner_id VARCHAR(255) NOT NULL DEFAULT '';
CREATE INDEX idx_posts_owner_id ON posts (owner_id, id);
CREATE INDEX idx_posts_owner_status_id ON posts (owner_id, status, id);

-- +goose Down
DROP INDEX idx_posts_owner_status_id;
DROP INDEX idx_posts_owner_id;
ALTER TABLE posts DROP COLUMN owner_id;
