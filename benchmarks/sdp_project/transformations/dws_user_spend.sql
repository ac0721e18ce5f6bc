-- DWS: spend per user over the whole history. An aggregate: a materialized view (recomputed by each run).
-- The same logic as Tidehouse's shipped `sum_by_key` action (key user_id, value price, as spend).
CREATE MATERIALIZED VIEW dws_user_spend
COMMENT 'Spend and number of events per user.'
AS SELECT user_id, sum(price) AS spend, count(*) AS row_count
FROM dwd_events
GROUP BY user_id
