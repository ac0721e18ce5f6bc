"""The shipped actions' own tests (``actions/<action>.test.yaml``), run by the real CLI: ``tidehouse test``
over ``actions/``, each case in Spark batch and in streaming flows, must pass; together they exercise every
strategy and, for every stateful action, rows that leave the result (retractions)."""

from __future__ import annotations

import json
import time

import pytest

from registry.specs.actiontest import TEST_SUFFIX
from registry.specs.testfiles import load_action_tests
from tests.examples._library import ACTIONS

ALL = sorted(p.stem for p in ACTIONS.glob("*.sql"))


def test_every_shipped_action_has_a_test_file():
    tested = sorted(p.name[: -len(TEST_SUFFIX)] for p in ACTIONS.glob("*" + TEST_SUFFIX))
    assert tested == ALL, "write actions/<action>.test.yaml for every action (docs/actions.md)"
    cases = load_action_tests([ACTIONS])  # well-formed, without Spark
    assert {c.action.name for c in cases} == set(ALL)


@pytest.mark.spark
@pytest.mark.slow
def test_the_shipped_action_tests_pass_in_batch_and_streaming(spark, run_cli, project_dir):
    began = time.monotonic()
    code, out, err = run_cli("test", "--format", "json", str(ACTIONS))
    data = json.loads(out) if out.startswith("{") else {"cases": []}
    failing = [
        (c["id"], c["status"], c["error"], c["failures"]) for c in data["cases"] if c["status"] != "pass"
    ]
    assert code == 0 and not failing, failing or out + err
    assert {c["action"] for c in data["cases"]} == set(ALL)
    strategies = {c["strategy"] for c in data["cases"]}  # every strategy, the incremental ones included
    kept_incrementally = {"topn", "agg_changelog", "join_changelog"}
    assert {"append", "aggregate", "changelog", "recompute", "topn", "join_changelog"} <= strategies
    assert strategies <= {"append", "aggregate", "changelog", "recompute"} | kept_incrementally
    stateful = {
        c["action"] for c in data["cases"] if c["strategy"] in {"aggregate", "recompute"} | kept_incrementally
    }
    retracting = {c["action"] for c in data["cases"] if c["retractions"]}
    assert stateful <= retracting, f"no case where rows leave the result: {sorted(stateful - retracting)}"
    stream = data["stream"]
    print(
        f"\n[tidehouse test actions/] {len(data['cases'])} cases in {time.monotonic() - began:.1f} s "
        f"(batch {data['batch_seconds']:.1f} s, stream {stream['seconds']:.1f} s: {stream['flows']} flows, "
        f"{stream['tables']} tables, {stream['runs']} runs)"
    )
