/*---
name: conversion_funnel
description: >
  A four-stage conversion funnel over per-key activity (the output of activity_by_key, e.g.
  dws.user_activity): one row per stage with how many keys reached it (at least one event of that stage),
  the rate from the previous stage and the rate from the first stage (NULL when the denominator is 0).
  Declare `primary_key: [step]` on the table.
inputs: [activity]
output: "step int, stage string, reached bigint, rate_from_previous double, rate_from_first double"
---*/
WITH reached AS (
  SELECT count_if(views > 0)        AS v,
         count_if(clicks > 0)       AS c,
         count_if(add_to_carts > 0) AS a,
         count_if(purchases > 0)    AS p
  FROM activity
)
SELECT step, stage, reached, rate_from_previous, rate_from_first
FROM (
  SELECT stack(4,
    1, 'view',        v, CAST(NULL AS DOUBLE),     try_divide(v, v),
    2, 'click',       c, try_divide(c, v),         try_divide(c, v),
    3, 'add_to_cart', a, try_divide(a, c),         try_divide(a, v),
    4, 'purchase',    p, try_divide(p, a),         try_divide(p, v)
  ) AS (step, stage, reached, rate_from_previous, rate_from_first)
  FROM reached
)
