"""A flow whose ADS tables are kept by the incremental strategies, with rows that leave their input: the
users of dws.mid_users leave it once they reach 4 events (deletes in its changelog), so rows leave the top-N
(global and per group), leave a global aggregate, groups fall under the HAVING threshold (a count, and a
string max: 'u3' > 'u23' > 'u2' > 'u13') and min/max extremes are deleted. The oracle is DuckDB SQL."""

from __future__ import annotations

from tests.materializer._flowkit import ACTIONS, ORACLE, flow_head

INC_ACTIONS = {
    **ACTIONS,
    "t_mid.sql": """/*---
name: t_mid
description: users with fewer than 4 events, and their group (they leave as they get more)
inputs: [activity]
---*/
SELECT user_id, events, spend, right(user_id, 1) AS grp FROM activity WHERE events < 4
""",
    "t_top_mid.sql": """/*---
name: t_top_mid
description: top 3 of the mid users by spend
inputs: [mid]
params:
  n: {type: int, default: 3}
---*/
SELECT * FROM (
  SELECT rank() OVER (ORDER BY spend DESC) AS rank, user_id, events, spend FROM mid
) WHERE rank <= :n
""",
    "t_groups.sql": """/*---
name: t_groups
description: per group of mid users, with at least 2 of them
inputs: [mid]
params:
  at_least: {type: bigint, default: 2}
---*/
SELECT grp, count(*) AS users, sum(events) AS total, avg(spend) AS avg_spend, min(events) AS lo,
       max(spend) AS hi, count(DISTINCT events) AS kinds, max(user_id) AS last_user
FROM mid
GROUP BY grp
HAVING count(*) >= :at_least AND max(user_id) > 'u2' AND count(DISTINCT events) <> 1
""",
    "t_mid_totals.sql": """/*---
name: t_mid_totals
description: all mid users at once (a global aggregate; rows leave it as users leave mid)
inputs: [mid]
---*/
SELECT 'mid' AS id, count(*) AS users, sum(spend) AS spend, min(events) AS lo, max(user_id) AS last_user,
       count(DISTINCT grp) AS grps
FROM mid
""",
    "t_top_per_grp.sql": """/*---
name: t_top_per_grp
description: the 2 biggest spenders of each group of mid users
inputs: [mid]
---*/
SELECT * FROM (
  SELECT row_number() OVER (PARTITION BY grp ORDER BY spend DESC, user_id ASC) AS rank, grp, user_id, spend
  FROM mid
) WHERE rank <= 2
""",
    "t_ranked_per_grp.sql": """/*---
name: t_ranked_per_grp
description: per group, the mid users of the 2 highest event counts (ties share a rank), named in capitals
inputs: [mid]
---*/
SELECT * FROM (
  SELECT dense_rank() OVER (PARTITION BY grp ORDER BY events DESC) AS rank, upper(user_id) AS who, grp
  FROM mid
) WHERE rank <= 2
""",
}

INC_FLOW = (
    flow_head("incremental top-N and aggregates over changelogs with retractions")
    + """    mid_users:
      action: t_mid
      inputs: {activity: dws.user_activity}
      primary_key: [user_id]
      buckets: 2
  ads:
    top_users:
      action: t_top
      inputs: {activity: dws.user_activity}
      primary_key: [rank]
    top_mid:
      action: t_top_mid
      inputs: {mid: dws.mid_users}
      primary_key: [user_id]
    mid_groups:
      action: t_groups
      inputs: {mid: dws.mid_users}
      primary_key: [grp]
    mid_totals:
      action: t_mid_totals
      inputs: {mid: dws.mid_users}
      primary_key: [id]
    top_per_grp:
      action: t_top_per_grp
      inputs: {mid: dws.mid_users}
      primary_key: [grp, rank]
    ranked_per_grp:
      action: t_ranked_per_grp
      inputs: {mid: dws.mid_users}
      primary_key: [who]
"""
)

MID = (
    f"SELECT user_id, events, spend, right(user_id, 1) AS grp FROM ({ORACLE['dws.user_activity']}) "
    "WHERE events < 4"
)
INC_ORACLE = {
    "dws.user_activity": ORACLE["dws.user_activity"],
    "dws.mid_users": MID,
    "ads.top_users": ORACLE["ads.top_users"],
    "ads.top_mid": (
        "SELECT * FROM (SELECT rank() OVER (ORDER BY spend DESC) AS rank, user_id, events, spend "
        f"FROM ({MID})) WHERE rank <= 3"
    ),
    "ads.mid_groups": (
        "SELECT grp, count(*) AS users, sum(events) AS total, avg(spend) AS avg_spend, min(events) AS lo, "
        f"max(spend) AS hi, count(DISTINCT events) AS kinds, max(user_id) AS last_user FROM ({MID}) "
        "GROUP BY grp HAVING count(*) >= 2 AND max(user_id) > 'u2' AND count(DISTINCT events) <> 1"
    ),
}
INC_ORACLE["ads.mid_totals"] = (
    "SELECT 'mid' AS id, count(*) AS users, sum(spend) AS spend, min(events) AS lo, "
    f"max(user_id) AS last_user, count(DISTINCT grp) AS grps FROM ({MID})"
)
INC_ORACLE["ads.top_per_grp"] = (
    "SELECT * FROM (SELECT row_number() OVER (PARTITION BY grp ORDER BY spend DESC, user_id ASC) AS rank, "
    f"grp, user_id, spend FROM ({MID})) WHERE rank <= 2"
)
INC_ORACLE["ads.ranked_per_grp"] = (
    "SELECT * FROM (SELECT dense_rank() OVER (PARTITION BY grp ORDER BY events DESC) AS rank, upper(user_id) "
    f"AS who, grp FROM ({MID})) WHERE rank <= 2"
)
STRATEGIES = {
    "ads.top_users": "topn",
    "ads.top_mid": "topn",
    "ads.mid_groups": "agg_changelog",
    "ads.mid_totals": "agg_changelog",  # a global aggregate
    "ads.top_per_grp": "topn",  # PARTITION BY, ranked in the driver
    "ads.ranked_per_grp": "topn",  # PARTITION BY, a computed column: Spark runs the SQL over the partitions
}


def inc_oracle(lines: list[str]) -> dict:
    from tests.materializer._flowkit import canon, oracle_connection

    con = oracle_connection(lines)
    return {name: canon(con.sql(sql).to_arrow_table()) for name, sql in INC_ORACLE.items()}
