/*---
name: count_by_key
description: >
  Count rows per key. Output: the key column and a count column named `as`. Declare
  `primary_key: [<key>]` on the table.
inputs: [rows]
params:
  key:
    type: string
    default: id
    description: The grouping column.
  as:
    type: string
    default: events
    description: Name of the count column.
---*/
SELECT IDENTIFIER(:key), count(*) AS IDENTIFIER(:as)
FROM rows
GROUP BY IDENTIFIER(:key)
