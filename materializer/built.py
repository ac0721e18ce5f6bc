"""Which definition built a flow's data: tables whose hot data another definition built (``TH405``), and the
registered version that built it (what ``tidehouse flow diff`` compares a file against).

A table's checkpoint lives in ``<checkpoints>/<table>/<fingerprint>``: the fingerprint is the hash of what
decides its content (``materializer.plan``). A table that holds data, whose folder holds another
fingerprint's checkpoint and not the plan's, was built by another definition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from materializer.plan import FlowPlan
from materializer.selection import select_tables, universe
from runtime.core.errors import ErrorCode, TidehouseError


def changed_tables(
    plan: FlowPlan, has_table: Callable[[str], bool], rebuilt: Iterable[str] = ()
) -> list[str]:
    """The tables of ``plan`` whose hot data (``has_table``) another definition built. ``rebuilt``: tables a
    full refresh drops before the run, which keep nothing of the old one."""
    skip = set(rebuilt)
    changed = []
    for t in plan.tables:
        folder, own = Path(t.checkpoint).parent, Path(t.checkpoint).name
        if t.name in skip or not folder.is_dir() or Path(t.checkpoint).is_dir() or not has_table(t.name):
            continue
        if any(p.is_dir() and p.name != own for p in folder.iterdir()):
            changed.append(t.name)
    return changed


def refuse_changed(
    plan: FlowPlan, has_table: Callable[[str], bool], full_refresh: Sequence[str] = ()
) -> None:
    """Refuse (``TH405``) to run ``plan`` over data another definition built: a run would mix them.
    ``full_refresh``: the run's ``--full-refresh`` selectors, whose tables and their readers are dropped
    before it runs."""
    chosen = select_tables(plan, full_refresh, option="--full-refresh") if full_refresh else []
    changed = changed_tables(plan, has_table, plan.graph().descendants(chosen) if chosen else ())
    if changed:
        roots = universe(plan).upstream_roots(changed)  # a full refresh rebuilds what reads them
        raise TidehouseError(
            ErrorCode.PLAN_CHANGED,
            f"flow {plan.flow}: the definition of {', '.join(changed)} changed since its data was built",
            hint="rebuild with "
            + " ".join(f"--full-refresh {t}" for t in roots)
            + " (and what reads it); `tidehouse flow diff FLOW_FILE` shows what changed and why",
        )


def built_by(plans: Sequence[Callable[[], FlowPlan]], has_table: Callable[[str], bool]) -> FlowPlan | None:
    """Of a flow's registered versions' plans, newest first (each made when asked), the first no table of
    which holds data another definition built; the newest if none is (None: no plans)."""
    newest = None
    for make in plans:
        plan = make()
        newest = newest or plan
        if not changed_tables(plan, has_table):
            return plan
    return newest
