-- +goose Up
-- The SQLite twin of mysql/00004_outbox_unsent_index.sql: unsent_aggregate_id
-- is the post id while the row holds its post (PENDING, RETRY, PROCESSING, or
-- FAIL not discarded) and NULL once it is SENT or discarded, and the per-post
-- order check looks it up in idx_outbox_unsent_aggregate_id. SQLite can add a
-- generated column only as VIRTUAL; it indexes it all the same.
ALTER TABLE outbox ADD COLUMN unsent_aggregate_id INTEGER GENERATED ALWAYS AS (
    CASE WHEN status IN ('PENDING','RETRY','PROCESSING','FAIL') AND discarded_at IS NULL
         THEN aggregate_id END) VIRTUAL;
CREATE INDEX idx_outbox_unsent_aggregate_id ON outbox (unsent_aggregate_id, id);
CREATE INDEX idx_outbox_aggregate_id ON outbox (aggregate_id, id);
DROP INDEX idx_outbox_aggregate_status_id;

-- +goose Down
CREATE INDEX idx_outbox_aggregate_status_id ON outbox (aggregate_id, status, id);
DROP INDEX idx_outbox_aggregate_id;
DROP INDEX idx_outbox_unsent_aggregate_id;
ALTER TABLE outbox DROP COLUMN unsent_aggregate_id;
