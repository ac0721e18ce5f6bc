/*---
name: sum_by_key
description: >
  Sum a numeric column per key. Output: the key column, the sum named `as`, and `row_count` (how many input
  rows were summed). Declare `primary_key: [<key>]` on the table.
inputs: [rows]
params:
  key:
    type: string
    default: id
    description: The grouping column.
  value:
    type: string
    default: amount
    description: The numeric column to sum.
  as:
    type: string
    default: total
    description: Name of the sum column.
---*/
SELECT IDENTIFIER(:key), sum(IDENTIFIER(:value)) AS IDENTIFIER(:as), count(*) AS row_count
FROM rows
GROUP BY IDENTIFIER(:key)
