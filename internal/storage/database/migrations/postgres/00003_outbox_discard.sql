-- +goose Up
-- discarded_at marks a FAIL row an operator gave up on (see
-- mysql/00003_outbox_discard.sql): it keeps status FAIL, but no longer holds
-- the later events of its post. NULL: not discarded.
ALTER TABLE outbox ADD COLUMN discarded_at TIMESTAMPTZ(6) NULL;

-- +goose Down
ALTER TABLE outbox DROP COLUMN discarded_at;
