"""A flow whose ADS tables join two primary-key tables (join_changelog), with changes on both sides: users of
dws.mid_users change their event count (a join key: they move between partitions) and leave the table at 4
events (deletes); dws.grp_stats and dws.per_events, the other sides, are aggregates whose rows change and
disappear (a dimension change revises joined rows already written); dws.nullable_grp has NULL join keys (a
full outer join keeps them unmatched). The oracle is DuckDB SQL."""

from __future__ import annotations

from tests.materializer._flowkit import ORACLE, flow_head
from tests.materializer._incflow import INC_ACTIONS, MID

JOIN_ACTIONS = {
    **INC_ACTIONS,
    "t_grp_stats.sql": """/*---
name: t_grp_stats
description: per group of mid users, with at least 2 of them
inputs: [mid]
---*/
SELECT grp, count(*) AS users, max(spend) AS hi FROM mid GROUP BY grp HAVING count(*) >= 2
""",
    "t_per_events.sql": """/*---
name: t_per_events
description: how many users have each event count
inputs: [activity]
---*/
SELECT events, count(*) AS users FROM activity GROUP BY events
""",
    "t_with_group.sql": """/*---
name: t_with_group
description: mid users with the stats of their group (inner join)
inputs: [mid, groups]
---*/
SELECT m.user_id, m.spend, g.users AS group_users, g.hi AS group_hi
FROM mid m JOIN groups g ON m.grp = g.grp
WHERE m.spend > 1.0
""",
    "t_by_events.sql": """/*---
name: t_by_events
description: mid users with how many users share their event count (left join on a changing key)
inputs: [mid, counts]
---*/
SELECT m.user_id, m.events, coalesce(c.users, -1) AS same_count, m.grp
FROM mid m LEFT JOIN counts c ON m.events = c.events
""",
    "t_nullable.sql": """/*---
name: t_nullable
description: mid users whose group is unknown (NULL) while they have 2 events
inputs: [mid]
---*/
SELECT user_id, IF(events = 2, NULL, grp) AS grp, spend FROM mid
""",
    "t_full.sql": """/*---
name: t_full
description: users and groups side by side (full outer join; NULL keys never match)
inputs: [nullable, groups]
---*/
SELECT coalesce(m.user_id, concat('g', g.grp)) AS id, m.spend, g.users
FROM nullable m FULL OUTER JOIN groups g ON m.grp = g.grp
""",
    "t_group_events.sql": """/*---
name: t_group_events
description: each group with how many users have its size as event count (right join)
inputs: [counts, groups]
---*/
SELECT g.grp, g.users, c.users AS with_that_count
FROM counts c RIGHT JOIN (SELECT * FROM groups WHERE hi > 0) g ON c.events = g.users
""",
}

JOIN_FLOW = (
    flow_head("joins of primary-key tables kept with join_changelog")
    + """    mid_users:
      action: t_mid
      inputs: {activity: dws.user_activity}
      primary_key: [user_id]
      buckets: 2
    grp_stats:
      action: t_grp_stats
      inputs: {mid: dws.mid_users}
      primary_key: [grp]
    per_events:
      action: t_per_events
      inputs: {activity: dws.user_activity}
      primary_key: [events]
    nullable_grp:
      action: t_nullable
      inputs: {mid: dws.mid_users}
      primary_key: [user_id]
  ads:
    with_group:
      action: t_with_group
      inputs: {mid: dws.mid_users, groups: dws.grp_stats}
      primary_key: [user_id]
      buckets: 2
    by_events:
      action: t_by_events
      inputs: {mid: dws.mid_users, counts: dws.per_events}
      primary_key: [user_id]
    group_events:
      action: t_group_events
      inputs: {counts: dws.per_events, groups: dws.grp_stats}
      primary_key: [grp]
    full_groups:
      action: t_full
      inputs: {nullable: dws.nullable_grp, groups: dws.grp_stats}
      primary_key: [id]
"""
)

ACT = ORACLE["dws.user_activity"]
GRP = f"SELECT grp, count(*) AS users, max(spend) AS hi FROM ({MID}) GROUP BY grp HAVING count(*) >= 2"
PER = f"SELECT events, count(*) AS users FROM ({ACT}) GROUP BY events"
NUL = f"SELECT user_id, CASE WHEN events = 2 THEN NULL ELSE grp END AS grp, spend FROM ({MID})"
JOIN_ORACLE = {
    "dws.mid_users": MID,
    "dws.grp_stats": GRP,
    "dws.per_events": PER,
    "ads.with_group": (
        f"SELECT m.user_id, m.spend, g.users AS group_users, g.hi AS group_hi FROM ({MID}) m "
        f"JOIN ({GRP}) g ON m.grp = g.grp WHERE m.spend > 1.0"
    ),
    "ads.by_events": (
        f"SELECT m.user_id, m.events, coalesce(c.users, -1) AS same_count, m.grp FROM ({MID}) m "
        f"LEFT JOIN ({PER}) c ON m.events = c.events"
    ),
    "ads.group_events": (
        f"SELECT g.grp, g.users, c.users AS with_that_count FROM ({PER}) c "
        f"RIGHT JOIN (SELECT * FROM ({GRP}) WHERE hi > 0) g ON c.events = g.users"
    ),
    "ads.full_groups": (
        f"SELECT coalesce(m.user_id, concat('g', g.grp)) AS id, m.spend, g.users FROM ({NUL}) m "
        f"FULL OUTER JOIN ({GRP}) g ON m.grp = g.grp"
    ),
}
STRATEGIES = {
    "dws.grp_stats": "agg_changelog",
    "dws.per_events": "agg_changelog",
    "ads.with_group": "join_changelog",
    "ads.by_events": "join_changelog",
    "ads.group_events": "join_changelog",
    "ads.full_groups": "join_changelog",
}


def join_oracle(lines: list[str]) -> dict:
    from tests.materializer._flowkit import canon, oracle_connection

    con = oracle_connection(lines)
    return {name: canon(con.sql(sql).to_arrow_table()) for name, sql in JOIN_ORACLE.items()}
