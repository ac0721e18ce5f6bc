"""Tidehouse materializer: flow -> networkx DAG -> plan -> PySpark Structured Streaming queries per layer.

* :func:`materializer.analyze.build_plan` — dry-run every table's SQL of a resolved flow with Spark and decide
  how each table is kept equal to its batch result: the :class:`~materializer.plan.FlowPlan` (pure data).
* :class:`materializer.runner.FlowRunner` — run a plan: one streaming query per table, layer by layer.
* :func:`materializer.status.flow_status` — per-table figures of a flow, running or not.

Users drive these through the façade, :class:`runtime.project.Project` (``plan``, ``trigger``, ``status``).
"""
