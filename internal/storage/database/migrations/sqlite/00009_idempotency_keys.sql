-- +goose Up
-- The SQLite twin of mysql/00009_idempotency_keys.sql: the Idempotency-Key
-- of each create, per owner, with the SHA-256 of its request and the post's
-- JSON as first answered (TEXT compares byte for byte, BINARY collation).
CREATE TABLE idempotency_keys (
    id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
    owner_id     TEXT     NOT NULL,
    idem_key     TEXT     NOT NULL,
    request_hash TEXT     NOT NULL,
    post_id      INTEGER  NOT NULL,
    response     TEXT     NOT NULL,
    created_at   DATETIME NOT NULL
);
CREATE UNIQUE INDEX uq_idempotency_keys_owner_key ON idempotency_keys (owner_id, idem_key);
CREATE INDEX idx_idempotency_keys_created_at ON idempotency_keys (created_at, id);

-- +goose Down
DROP TABLE idempotency_keys;
