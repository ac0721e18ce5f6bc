-- DWD: drop malformed events and normalise the event type. Incremental: a streaming table.
-- The same logic as Tidehouse's shipped `clean_clicks` action with min_price 0.01.
CREATE STREAMING TABLE dwd_events
COMMENT 'Valid events with lower-case event types.'
AS SELECT user_id, lower(event_type) AS event_type, item_id, price, ts
FROM STREAM(ods_events)
WHERE user_id IS NOT NULL
  AND item_id IS NOT NULL
  AND ts IS NOT NULL
  AND array_contains(array('view', 'click', 'add_to_cart', 'purchase'), lower(event_type))
  AND price >= 0.01
