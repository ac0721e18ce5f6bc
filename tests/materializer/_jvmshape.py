"""The reference the explain-text reader (materializer.plantext) is held to: the same facts read by walking
the analysed plan's JVM objects through py4j (what the planner did before it ran over Spark Connect)."""

from __future__ import annotations

from materializer import shape as shape_mod
from materializer.plantext import NONDETERMINISTIC

SESSION_WINDOW_MARK = "spark.sessionWindow"  # metadata of session_window(...) columns
WATERMARK_DELAY_MARK = "spark.watermarkDelayMs"  # metadata of event-time columns


def jvm_shape(df) -> shape_mod.SqlShape:
    plan = df._jdf.queryExecution().analyzed()
    nodes: set[str] = set()
    distinct_agg = False
    session_window = False
    watermarks: dict[str, float] = {}
    stack = [plan]
    while stack:
        node = stack.pop()
        name = node.nodeName()
        nodes.add(name)
        if name == "Aggregate" and "DISTINCT" in node.toString().upper().split("\n")[0]:
            distinct_agg = True
        if name == "Aggregate":
            grouping = node.groupingExpressions()
            session_window = session_window or any(
                _marked(grouping.apply(i), SESSION_WINDOW_MARK) for i in range(grouping.size())
            )
        output = node.output()
        for i in range(output.size()):
            column = output.apply(i)
            meta = column.metadata()
            if meta.contains(WATERMARK_DELAY_MARK) and column.dataType().typeName().startswith("timestamp"):
                watermarks[column.name()] = meta.getLong(WATERMARK_DELAY_MARK) / 1000.0
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
        inner = node.innerChildren()  # subquery plans inside expressions
        stack.extend(inner.apply(i) for i in range(inner.size()) if hasattr(inner.apply(i), "nodeName"))
    top_node = plan
    while top_node.nodeName() in shape_mod.PASS_THROUGH and top_node.children().size() == 1:
        top_node = top_node.children().apply(0)
    deterministic = bool(plan.deterministic())
    hint = ""
    if not deterministic:
        found = NONDETERMINISTIC.search(plan.toString())
        hint = f" ({found.group(1).lower()}())" if found else ""
    return shape_mod.SqlShape(
        frozenset(nodes),
        top_node.nodeName(),
        deterministic,
        hint,
        distinct_agg,
        bool(nodes & {"GlobalLimit", "LocalLimit"}),
        _is_identity(plan),
        session_window=session_window,
        watermarks=tuple(sorted(watermarks.items())),
    )


def _marked(expression, mark: str) -> bool:
    from py4j.protocol import Py4JError

    try:
        return bool(expression.metadata().contains(mark))
    except Py4JError:
        return False


def _is_identity(plan) -> bool:
    def columns(node) -> list[tuple]:
        out = node.output()
        return [
            (out.apply(i).name(), out.apply(i).exprId().id(), out.apply(i).dataType().simpleString())
            for i in range(out.size())
        ]

    node = plan
    while node.nodeName() in ("Project", "SubqueryAlias") and node.children().size() == 1:
        node = node.children().apply(0)
    return node.nodeName() == "View" and columns(plan) == columns(node)
