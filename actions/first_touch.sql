/*---
name: first_touch
description: >
  The first marketing touch per customer: for each key, the channel and campaign of the earliest touch and
  its time (`first_touch_ts`). Expects the columns channel, campaign and the event-time column. Declare
  `primary_key: [<key>]` on the table.
inputs: [touches]
params:
  key:
    type: string
    default: customer_id
    description: The customer column.
  ts:
    type: string
    default: ts
    description: The time of a touch.
---*/
SELECT IDENTIFIER(:key),
       min_by(channel, IDENTIFIER(:ts))  AS channel,
       min_by(campaign, IDENTIFIER(:ts)) AS campaign,
       min(IDENTIFIER(:ts))              AS first_touch_ts
FROM touches
GROUP BY IDENTIFIER(:key)
