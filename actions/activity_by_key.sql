/*---
name: activity_by_key
description: >
  Shop activity per key (a user, an item, ...): how many events of each funnel stage, the purchase
  revenue, and the time of the last event. Expects the columns of clean_clicks (event_type, price, ts).
  Declare `primary_key: [<key>]` on the table.
inputs: [events]
params:
  key:
    type: string
    default: user_id
    description: The grouping column.
  view_type:     {type: string, default: view, description: event_type of a view.}
  click_type:    {type: string, default: click, description: event_type of a click.}
  cart_type:     {type: string, default: add_to_cart, description: event_type of an add-to-cart.}
  purchase_type: {type: string, default: purchase, description: event_type of a purchase.}
---*/
SELECT IDENTIFIER(:key),
       count(*)                                   AS events,
       count_if(event_type = :view_type)          AS views,
       count_if(event_type = :click_type)         AS clicks,
       count_if(event_type = :cart_type)          AS add_to_carts,
       count_if(event_type = :purchase_type)      AS purchases,
       coalesce(sum(CASE WHEN event_type = :purchase_type THEN price END), 0.0) AS revenue,
       max(ts)                                    AS last_event_ts
FROM events
GROUP BY IDENTIFIER(:key)
