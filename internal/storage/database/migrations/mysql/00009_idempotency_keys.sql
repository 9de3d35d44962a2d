-- +goose Up
-- idempotency_keys remembers, per owner, the Idempotency-Key of each
-- POST /api/v1/posts that created a post: a retry with the same key and the
-- same request gets the first answer again instead of a second post. The
-- row commits in the transaction of the post and its outbox row, and the
-- unique key makes a concurrent request with the same key wait for that
-- transaction and then find the row. request_hash is the SHA-256 of the
-- request's title, content and scheduledAt; response is the post's JSON as
-- first answered. The binary collations compare owner and key byte for
-- byte (a key is case-sensitive). The cleaner deletes rows older than
-- POSTING_IDEMPOTENCY_RETENTION by created_at, in id batches.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    owner_id     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idem_key     VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    request_hash CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    post_id      BIGINT       NOT NULL,
    response     MEDIUMTEXT   NOT NULL,
    created_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_idempotency_keys_owner_key (owner_id, idem_key),
    KEY idx_idempotency_keys_created_at (created_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- +goose Down
DROP TABLE idempotency_keys;
