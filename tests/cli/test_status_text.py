"""The figures ``tidehouse flow status`` prints as text (the command itself: tests/materializer)."""

from __future__ import annotations

from runtime.cli.run import _offsets


def test_offsets_print_one_figure_per_bucket_and_read_as_a_list_when_there_are_several():
    assert _offsets([5000]) == "5000"
    assert _offsets([97, 103]) == "[97,103]"  # "97,103" read as ninety-seven thousand one hundred three
    assert _offsets([0, 1_000_000, 7]) == "[0,1000000,7]"
    assert _offsets(None) == "-" and _offsets([]) == "-"
