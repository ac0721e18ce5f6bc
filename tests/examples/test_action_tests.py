"""The shipped actions' own tests (``actions/<action>.test.yaml``), run by the real CLI: ``tidehouse test``
over ``actions/``, each case in Spark batch and in streaming flows, must pass; together they exercise every
strategy and, for every stateful action, rows that leave the result (retractions).

The run is the README tour's own ``tidehouse test`` (the session fixture ``tour`` in conftest.py, with
``--format json``) in the project ``tidehouse init`` made, whose ``actions/`` is checked here to be an exact
copy of the shipped ``actions/``: one run of every case instead of two.
"""

from __future__ import annotations

import json

import pytest

from registry.specs.actiontest import TEST_SUFFIX
from registry.specs.testfiles import load_action_tests
from tests.examples._library import ACTIONS
from tests.examples._tour import ACTION_TESTS

ALL = sorted(p.stem for p in ACTIONS.glob("*.sql"))


def test_every_shipped_action_has_a_test_file():
    tested = sorted(p.name[: -len(TEST_SUFFIX)] for p in ACTIONS.glob("*" + TEST_SUFFIX))
    assert tested == ALL, "write actions/<action>.test.yaml for every action (docs/actions.md)"
    cases = load_action_tests([ACTIONS])  # well-formed, without Spark
    assert {c.action.name for c in cases} == set(ALL)


@pytest.mark.spark
@pytest.mark.slow
def test_the_shipped_action_tests_pass_in_batch_and_streaming(tour):
    copied = tour.project_dir / "actions"  # `tidehouse test` with no path: every test file under actions/
    shipped = {p.name: p.read_bytes() for p in ACTIONS.iterdir() if p.is_file()}
    assert {p.name: p.read_bytes() for p in copied.iterdir() if p.is_file()} == shipped, (
        "the tour's project must hold an exact copy of the shipped actions/"
    )
    code, out, err = tour.codes[ACTION_TESTS], tour.outputs[ACTION_TESTS], tour.errors[ACTION_TESTS]
    data = json.loads(out) if out.startswith("{") else {"cases": []}
    failing = [
        (c["id"], c["status"], c["error"], c["failures"]) for c in data["cases"] if c["status"] != "pass"
    ]
    assert code == 0 and not failing, failing or out + err
    assert {c["action"] for c in data["cases"]} == set(ALL)
    strategies = {c["strategy"] for c in data["cases"]}  # every strategy, the incremental ones included
    kept_incrementally = {"topn", "agg_changelog", "agg_log", "join_changelog", "join_log"}
    assert {"append", "aggregate", "changelog", "recompute", "topn", "join_changelog"} <= strategies
    assert strategies <= {"append", "aggregate", "changelog", "recompute"} | kept_incrementally
    stateful = {
        c["action"] for c in data["cases"] if c["strategy"] in {"aggregate", "recompute"} | kept_incrementally
    }
    retracting = {c["action"] for c in data["cases"] if c["retractions"]}
    assert stateful <= retracting, f"no case where rows leave the result: {sorted(stateful - retracting)}"
    stream = data["stream"]
    print(
        f"\n[tidehouse test actions/] {len(data['cases'])} cases in {tour.seconds[ACTION_TESTS]:.1f} s "
        f"(batch {data['batch_seconds']:.1f} s, stream {stream['seconds']:.1f} s: {stream['flows']} flows, "
        f"{stream['tables']} tables, {stream['runs']} runs)"
    )
