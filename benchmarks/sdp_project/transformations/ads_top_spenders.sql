-- ADS: the serving table, the 100 biggest spenders ranked. A materialized view over the DWS view.
-- The same logic as Tidehouse's shipped `top_n` action (order_by spend, tiebreak user_id, n 100).
CREATE MATERIALIZED VIEW ads_top_spenders
COMMENT 'The 100 biggest spenders, ranked.'
AS SELECT *
FROM (
  SELECT row_number() OVER (ORDER BY spend DESC, user_id ASC) AS rank, *
  FROM dws_user_spend
)
WHERE rank <= 100
