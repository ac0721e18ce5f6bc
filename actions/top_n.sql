/*---
name: top_n
description: >
  The `n` rows with the greatest `order_by`, ranked 1..n (ties broken by `tiebreak`, ascending). Output:
  `rank` followed by the input's columns. Declare `primary_key: [rank]` so the table always holds exactly
  the current top n (a row that drops out is overwritten by the one that takes its rank).
inputs: [rows]
params:
  order_by:
    type: string
    default: events
    description: The column to rank by, highest first.
  tiebreak:
    type: string
    default: id
    description: The column that orders equal values (ascending), so ranks are deterministic.
  n:
    type: int
    default: 10
    description: How many rows to keep.
---*/
SELECT *
FROM (
  SELECT row_number() OVER (ORDER BY IDENTIFIER(:order_by) DESC, IDENTIFIER(:tiebreak) ASC) AS rank, *
  FROM rows
)
WHERE rank <= :n
