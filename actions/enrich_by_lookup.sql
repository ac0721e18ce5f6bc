/*---
name: enrich_by_lookup
description: >
  Add the columns of a lookup table (typically a primary-key dimension table such as dws.customers) to
  every fact row with the same `key`: a left join, so facts without a match keep NULLs in the lookup
  columns. The key appears once, first; the two inputs must not share any other column name.
inputs: [facts, lookup]
params:
  key:
    type: string
    default: id
    description: The join column, present in both inputs.
---*/
SELECT *
FROM facts
LEFT JOIN lookup USING (IDENTIFIER(:key))
