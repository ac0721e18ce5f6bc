/*---
name: attribute_orders
description: >
  Attribute each order to its customer's first marketing touch (the output of first_touch): the order's
  columns plus channel, campaign and first_touch_ts. Orders of customers without a touch get the channel
  `unattributed`. Expects orders(order_id, customer_id, amount, ts) and first touches keyed by
  customer_id. Declare `primary_key: [order_id]` on the table.
inputs: [orders, first_touches]
params:
  unattributed:
    type: string
    default: direct
    description: Channel of an order whose customer has no recorded touch.
---*/
SELECT o.order_id, o.customer_id, o.amount, o.ts,
       coalesce(t.channel, :unattributed) AS channel,
       t.campaign,
       t.first_touch_ts
FROM orders o
LEFT JOIN first_touches t ON o.customer_id = t.customer_id
