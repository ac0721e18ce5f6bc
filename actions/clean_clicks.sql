/*---
name: clean_clicks
description: >
  Drop malformed shop events and normalise event types: keeps rows whose lower-cased `event_type` is one of
  `valid_types`, whose `price` is at least `min_price`, and that have a `user_id`, an `item_id` and a `ts`.
  Expects the columns user_id, event_type, item_id, price, ts.
inputs: [events]
params:
  valid_types:
    type: "array<string>"
    default: ["view", "click", "add_to_cart", "purchase"]
    description: Event types to keep (compared lower-cased).
  min_price:
    type: double
    default: 0.0
    description: Smallest price kept; rows with a null price are dropped.
output: "user_id string, event_type string, item_id string, price double, ts timestamp"
---*/
SELECT user_id, lower(event_type) AS event_type, item_id, price, ts
FROM events
WHERE user_id IS NOT NULL
  AND item_id IS NOT NULL
  AND ts IS NOT NULL
  AND array_contains(:valid_types, lower(event_type))
  AND price >= :min_price
