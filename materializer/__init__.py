"""Tidehouse materializer: flow -> networkx DAG -> plan -> PySpark Structured Streaming queries per layer.

The public API (what the CLI, tests and notebooks call):

* :func:`analyze` ``(project, flow, spark=None) -> FlowPlan`` — resolve a flow (registered NAME or PATH) and
  dry-run every table's SQL with Spark; raises ``TidehouseError`` (``ACTION_SQL_INVALID``,
  ``SHAPE_UNSUPPORTED``, ...) for a flow that cannot run.
* :func:`trigger` ``(project, flow, *, until_idle=False, duration=None, full_refresh=(), spark=None,
  stop_event=None, on_status=None) -> RunReport`` — register (a PATH) and run a flow.
* :func:`flow_status` ``(project, name) -> dict`` — per-table figures of a flow, running or not.
"""

from __future__ import annotations

from pathlib import Path

from materializer.analyze import analyze, build_plan, resolve  # noqa: F401
from materializer.plan import FlowPlan, TablePlan  # noqa: F401
from materializer.runner import FlowRunner, RunLock, RunReport
from materializer.status import flow_status  # noqa: F401


def plan_flow(project, flow: str | Path, *, register: bool = False, spark=None) -> FlowPlan:
    """The plan of a flow (a PATH's actions are registered first; the flow itself only with ``register``)."""
    return build_plan(project, resolve(project, flow, register=register), spark)


def trigger(project, flow: str | Path, *, until_idle: bool = False, duration: float | None = None,
            full_refresh=(), spark=None, stop_event=None, on_status=None, tiering: bool = True) -> RunReport:
    """Register (a PATH), plan and run a flow; see :class:`materializer.runner.FlowRunner`.

    The flow's run lock is taken before anything else, so a second trigger of a running flow is refused at
    once — before it starts Spark or registers a new version of the flow under the running one.
    """
    lock = RunLock(project.config.run_dir, _flow_name(flow))
    lock.acquire()
    try:
        plan = plan_flow(project, flow, register=True, spark=spark)
        runner = FlowRunner(project, plan, spark=spark, on_status=on_status, lock=lock)
        return runner.run(until_idle=until_idle, duration=duration, full_refresh=full_refresh,
                          stop_event=stop_event, tiering=tiering)
    finally:
        lock.release()


def _flow_name(flow: str | Path) -> str:
    """The flow's name without Spark or the registry: a PATH's ``flow:`` key, else NAME[@N]'s NAME."""
    from registry.specs import parse_flow

    path = Path(flow)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return parse_flow(path).flow if path.is_file() else path.stem
    return str(flow).partition("@")[0]
