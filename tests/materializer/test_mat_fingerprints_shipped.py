"""The fingerprints of the shipped flows' tables and sources, pinned.

A fingerprint names a table's checkpoint and hot-storage writer id: if it changes, every deployment of the
flow must rebuild the table (``--full-refresh``). These values were computed by the release before the
fingerprint was derived from the plan's fields (commit 23ec339); the derivation keeps them. A change to a
shipped action's SQL or a flow's table changes its fingerprint on purpose: update the pin then, and say so
in the release notes.

The three tables marked ``recompute -> incremental`` changed on purpose when the strategies topn and
agg_changelog arrived (the strategy is in the fingerprint: the new strategy keeps state the old checkpoint
never built): a deployment rebuilds them once with ``--full-refresh``. So did dws.attributed_orders when
join_changelog arrived, and with it ads.revenue_by_channel, which reads it (an upstream fingerprint is in
a table's own).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]

PINNED = {
    "ecommerce_activity": {
        "source:events": "251b142ccf230df9b7af60f12fc7be63b21747486e52acaf5bf52ade53f17691",
        "ods.events": "8aba5c31cab5e86a71ad5c064e3c754a2f78963bf240d9ec1f6516fa8d06bce6",
        "dwd.events": "3a617aac4b604d512eb14f49acc92314a80ce138274b7f3c986b7fbe80dff969",
        "dws.user_activity": "46e6d2678403e829579fded561a5814da7549f77eaa50f81cc63123445f17694",
        "ads.conversion": "fa6fbe515925d7a204fb0b58df29d6f9dcff5fe8950c3717d4b477e16dd1bd24",
        # recompute -> incremental
        "ads.top_users": "56bbc6fd65c29f68068e6dfe9ed663e2cbcf8f3ddbc9a019c55dcdf4f033bafd",
    },
    "order_attribution": {
        "source:orders": "67c7b9cc6f1ffd894300747302e1237656d092409c74647e4e05d019fc430055",
        "source:touches": "d4ace1ada1886ea8201f26bbb8603b19c340b588215dcd3b1a9f92ffdbab2b8f",
        "ods.orders": "ed7744b6bce58cd0ca56c5d029617c0fe0cfd1e8eb9720ad4cb0b1fa22f9bef5",
        "ods.touches": "204f45479e068af9fc49087cf3bb955b23a03120b3f2e17d26f31e587701bcb0",
        "dwd.orders": "0ca7664f8de2ddfb87a8d52c09a91cbdf4a8570ecde9c656a7a12616d8d9df60",
        "dws.first_touch": "7b17336e3354ee16b5cc8cd7161f3946801c118a45476723f3b96cdcfa491f04",
        # recompute -> join_changelog (an equi-join of two primary-key tables)
        "dws.attributed_orders": "0c4a9f2cebbc6b09ac3f60d245efe3a00e508a6e5afb72c4a6558d5305ae282a",
        # recompute -> incremental; and its input dws.attributed_orders changed fingerprint
        "ads.revenue_by_channel": "e2486b1888c97ef7953dfc2da5e9b123f7be616c17bfbe01bc72438e3d4f8886",
    },
    "shop_trends": {  # reads dwd.events of ecommerce_activity
        "dws.item_funnel": "659abce0ac2c401c485a5d54723a96e70b8fd791a773b8df196fec32f41b5e7a",
        "dws.events_per_minute": "465a8bf8533e42b3e7597d4279f063dcd4852dea2fc91e8d7056f59cb94604f2",
        # recompute -> incremental
        "ads.top_items": "014bfef16a281b62bf33b4bebea89f0599111ff5d4687cde31cfa0fda7b987a8",
    },
}


def test_shipped_flows_keep_their_fingerprints(spark, project_dir):
    from materializer.analyze import build_plan
    from runtime.core.refs import FlowRef
    from runtime.project import Project

    shutil.rmtree(project_dir / "actions")
    shutil.copytree(REPO / "actions", project_dir / "actions")
    project = Project.open()
    got, upstream = {}, {}
    try:
        for flow in PINNED:
            shutil.copy(REPO / "flows" / f"{flow}.yaml", project_dir / "flows")
            resolved = project._resolve(FlowRef(path=project_dir / "flows" / f"{flow}.yaml"), spark)
            plan = build_plan(project, resolved, spark, upstream=upstream)
            upstream.update({t.name: t for t in plan.tables})
            project.registry.register_flow(project_dir / "flows" / f"{flow}.yaml")  # as a trigger does
            got[flow] = {
                **{s.ref: s.fingerprint for s in plan.sources},
                **{t.name: t.fingerprint for t in plan.tables},
            }
    finally:
        project.close()
    assert got == PINNED
