/*---
name: dedupe_by_key
description: >
  Keep the latest row per key: for each value of `key`, the whole row with the greatest `order_by`
  (ties broken arbitrarily). Declare `primary_key: [<key>]` on the table. An aggregation, so it is correct
  in batch and in streaming (update mode); use it to collapse re-sent or updated records.
inputs: [rows]
params:
  key:
    type: string
    default: id
    description: The key column (one column).
  order_by:
    type: string
    default: ts
    description: The column that says which row is the latest (e.g. an event or update time).
---*/
SELECT latest.*
FROM (
  SELECT max_by(struct(*), IDENTIFIER(:order_by)) AS latest
  FROM rows
  GROUP BY IDENTIFIER(:key)
)
