-- +goose Up
-- The W3C traceparent of an outbox row and of a publication (see
-- mysql/00007_traceparent.sql). A nullable column without a default is a
-- catalog change only. NULL: none.
ALTER TABLE outbox ADD COLUMN traceparent VARCHAR(55) NULL;
ALTER TABLE publications ADD COLUMN traceparent VARCHAR(55) NULL;

-- +goose Down
ALTER TABLE publications DROP COLUMN traceparent;
ALTER TABLE outbox DROP COLUMN traceparent;
