-- +goose Up
-- The W3C traceparent of the request or scheduler run that wrote an outbox
-- row, sent as the message's traceparent header; and the one a reservation
-- event arrived with, kept with its publication so the worker's publication
-- continues that trace after a restart. 55 characters: version 00. NULL: none
-- (rows written before this migration). A nullable column at the end is an
-- instant ALTER on MariaDB 10.3+ and MySQL 8.0.29+: no table copy.
ALTER TABLE outbox ADD COLUMN traceparent VARCHAR(55) NULL;
ALTER TABLE publications ADD COLUMN traceparent VARCHAR(55) NULL;

-- +goose Down
ALTER TABLE publications DROP COLUMN traceparent;
ALTER TABLE outbox DROP COLUMN traceparent;
