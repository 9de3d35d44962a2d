-- +goose Up
-- The per-post order check ("is an earlier event of this post still
-- unsent?") used idx_outbox_aggregate_status_id (aggregate_id, status, id).
-- That index had to walk each post's SENT history on every check, and every
-- claim and every SENT moved the row's entry to another place in it.
-- unsent_aggregate_id is the post id while the row still holds its post
-- (PENDING, RETRY, PROCESSING, or FAIL not discarded: the same test as
-- before) and NULL once it is SENT or discarded, so:
--   * the check is one dive into idx_outbox_unsent_aggregate_id that finds
--     only unsent rows;
--   * a claim (PENDING/RETRY -> PROCESSING) leaves the value, and the index,
--     unchanged; SENT moves the entry to the NULL end, in id order.
-- STORED, not VIRTUAL: InnoDB maintains an index on a virtual column by
-- computing old and new values on every write, which cost more than it saved.
-- idx_outbox_aggregate_id keeps the plain per-post lookups served (the
-- operator statistics join FAIL rows to the later rows of their post);
-- aggregate_id never changes, so a status change never touches it.
ALTER TABLE outbox
    ADD COLUMN unsent_aggregate_id BIGINT AS (
        CASE WHEN status IN ('PENDING','RETRY','PROCESSING','FAIL') AND discarded_at IS NULL
             THEN aggregate_id END) STORED,
    ADD KEY idx_outbox_unsent_aggregate_id (unsent_aggregate_id, id),
    ADD KEY idx_outbox_aggregate_id (aggregate_id, id),
    DROP KEY idx_outbox_aggregate_status_id;

-- +goose Down
ALTER TABLE outbox
    ADD KEY idx_outbox_aggregate_status_id (aggregate_id, status, id),
    DROP KEY idx_outbox_aggregate_id,
    DROP KEY idx_outbox_unsent_aggregate_id,
    DROP COLUMN unsent_aggregate_id;
