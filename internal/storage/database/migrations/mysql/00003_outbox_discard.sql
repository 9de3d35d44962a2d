-- +goose Up
-- discarded_at marks a FAIL row an operator gave up on. The status ENUM of the
-- contract stays as it is: a discarded row keeps status FAIL, so it stays in
-- the event history with its last_error, but it no longer holds the later
-- events of its post and is not reported as blocking. NULL: not discarded.
ALTER TABLE outbox ADD COLUMN discarded_at DATETIME(6) NULL;

-- +goose Down
ALTER TABLE outbox DROP COLUMN discarded_at;
