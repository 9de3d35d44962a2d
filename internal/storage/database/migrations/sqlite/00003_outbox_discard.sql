-- +goose Up
-- The SQLite twin of mysql/00003_outbox_discard.sql: discarded_at marks a FAIL
-- row an operator gave up on; the row keeps status FAIL and stays in the
-- history, but no longer holds the later events of its post. NULL: not discarded.
ALTER TABLE outbox ADD COLUMN discarded_at DATETIME NULL;

-- +goose Down
ALTER TABLE outbox DROP COLUMN discarded_at;
