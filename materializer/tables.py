"""The hot tables a flow plan needs: each table's storage description, and its quarantine's."""

from __future__ import annotations

from materializer.analyze import struct_of
from materializer.plan import QUARANTINE_DDL, TablePlan
from runtime.storage.api import TableMeta


def table_meta(plan: TablePlan) -> TableMeta:
    from runtime.spark.types import spark_to_arrow

    return TableMeta(
        name=plan.name,
        schema=spark_to_arrow(struct_of(plan.ddl)),
        kind=plan.kind,
        primary_key=plan.primary_key,
        buckets=plan.buckets,
        bucket_key=plan.bucket_key,
        merge_engine=plan.merge_engine,
        aggregations=dict(plan.aggregations),
        properties={"tidehouse.fingerprint": plan.fingerprint, "tidehouse.action": plan.action},
    )


def quarantine_meta(name: str) -> TableMeta:
    from runtime.spark.types import ddl_to_arrow

    return TableMeta(name=name, schema=ddl_to_arrow(QUARANTINE_DDL), kind="log")
