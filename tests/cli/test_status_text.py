"""The figures ``tidehouse flow status`` prints as text (the command itself: tests/materializer)."""

from __future__ import annotations

import csv
import io

from runtime.cli.run import _offsets
from runtime.core.text import counted, table_csv, table_text


def test_offsets_print_one_figure_per_bucket_and_read_as_a_list_when_there_are_several():
    assert _offsets([5000]) == "5000"
    assert _offsets([97, 103]) == "[97,103]"  # "97,103" read as ninety-seven thousand one hundred three
    assert _offsets([0, 1_000_000, 7]) == "[0,1000000,7]"
    assert _offsets(None) == "-" and _offsets([]) == "-"


def test_counts_read_in_the_singular_for_one():
    assert [counted(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert [counted(n, "batch") for n in (1, 4)] == ["1 batch", "4 batches"]
    assert counted(1, "late row") + " dropped" == "1 late row dropped"


def test_a_layer_line_shows_a_delay_not_measured_yet_as_a_dash():
    from runtime.cli.run import _layer_lines

    row = {"layer": "ods", "rows_written": 1, "batches": 1, "hot_delay_s": None, "lake_delay_s": 2.25}
    assert _layer_lines({"tables": [row]}) == ["ods: 1 row in 1 batch, hot delay -, lake delay 2.2s"]


def test_a_table_cell_shows_control_characters_as_escapes():
    """A quarantined line of binary data broke the table into lines and sent ESC sequences to the terminal."""
    raw = "a\tb\x1b[31mred\x00\r\n\x7f\x85ü"
    text = table_text(["raw"], [[raw]])
    assert text.splitlines()[2] == "a\\tb\\x1b[31mred\\x00\\r\\n\\x7f\\x85ü"
    assert len(text.splitlines()) == 3
    assert raw in table_csv(["raw"], [[raw]])  # CSV (and JSON) keep the text as it is


def test_csv_is_what_pythons_csv_module_reads_back():
    """Written by hand: Python 3.10's csv.writer refused a NUL in a cell (`tidehouse query --format csv` of a
    quarantined binary record failed there)."""
    rows = [["a,b", 'say "hi"', "line\r\nbreak"], [None, 1.5, True], ["", " x ", "ü"]]
    text = table_csv(["h1", "h2", "h3"], rows)
    assert list(csv.reader(io.StringIO(text + "\n", newline=""))) == [
        ["h1", "h2", "h3"],
        ["a,b", 'say "hi"', "line\r\nbreak"],
        ["", "1.5", "True"],
        ["", " x ", "ü"],
    ]
    assert table_csv(["only"], [[None], ["x"]]) == 'only\r\n""\r\nx\r'  # one empty cell is not an empty line
    assert table_csv(["raw"], [["a\x00b"]]) == "raw\r\na\x00b\r"


def test_status_says_why_the_lake_figures_are_missing(run_cli, monkeypatch):
    """A catalog that cannot be opened left every lake column at '-', which reads as "not tiered yet"."""
    from runtime.project import Project

    why = "tidehouse.yaml: lake.catalog: cannot open the lake catalog: Connection refused [TH500]"
    row = {
        "table": "ods.events",
        "layer": "ods",
        "state": "stopped",
        "hot_end_offsets": [5],
        "lake_error": why,
    }
    status = {"flow": "f", "version": 1, "running": False, "state": "stopped", "tables": [row, {**row}]}
    monkeypatch.setattr(Project, "status", lambda self, name: status)
    code, out, err = run_cli("flow", "status", "f")
    assert code == 0 and "ods.events" in out, err
    assert err == f"no lake figures: {why}\n"  # once, however many tables miss them


def test_status_takes_format_json_as_every_other_command_does(run_cli, monkeypatch):
    """`flow status NAME --format json` was "No such option" (only `--json`); both print the same JSON."""
    import json

    from runtime.project import Project

    row = {"table": "ods.events", "layer": "ods", "state": "stopped", "hot_end_offsets": [5]}
    status = {"flow": "f", "version": 1, "running": False, "state": "stopped", "tables": [row]}
    monkeypatch.setattr(Project, "status", lambda self, name: status)
    printed = [run_cli("flow", "status", "f", *flag) for flag in (["--format", "json"], ["--json"])]
    assert [code for code, _, _ in printed] == [0, 0]
    assert json.loads(printed[0][1]) == json.loads(printed[1][1]) == status
    code, out, _ = run_cli("flow", "status", "f", "--format", "text")
    assert code == 0 and out.startswith("flow f (version 1): stopped")


def test_a_flow_that_never_ran_shows_no_quarantine_count(run_cli, project_dir):
    """Its tables showed `quarantined 0` beside `-` in every other column: a count of a table never made."""
    import json

    from tests.materializer._flowkit import write_project

    path = write_project(project_dir)
    assert run_cli("flow", "register", "--quick", str(path))[0] == 0
    code, out, err = run_cli("flow", "status", "testflow")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "flow testflow (version 1): never run"
    column = lines[1].index("quarantined")
    cells = [line[column : column + len("quarantined")].strip() for line in lines[3:]]
    assert cells and set(cells) == {"-"}, out
    code, out, _ = run_cli("flow", "status", "testflow", "--format", "json")
    assert {t["quarantined"] for t in json.loads(out)["tables"]} == {None}
