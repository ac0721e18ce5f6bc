"""The suite's markers say what a test needs: the fast suite (``-m "not spark and not slow ..."``, and CI's
Python matrix) must start no SparkSession."""

from __future__ import annotations

from tests._support import uses_the_shared_session


def test_every_test_that_uses_the_shared_session_is_a_spark_test(request):
    unmarked = [
        item.nodeid
        for item in request.session.items
        if uses_the_shared_session(item) and item.get_closest_marker("spark") is None
    ]
    assert not unmarked, f"these use the `spark` fixture without the spark marker: {unmarked}"
