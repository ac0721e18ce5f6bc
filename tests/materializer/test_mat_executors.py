"""The executor data path refuses to start on executors that cannot run it, with one clear message."""

from __future__ import annotations

import sys

import pytest

from runtime.core.errors import ErrorCode, TidehouseError

pytestmark = [pytest.mark.spark]


def test_executors_that_run_the_same_tidehouse_pass(spark):
    from materializer.executors import check_executors

    check_executors(spark)


def test_executors_with_another_tidehouse_version_are_refused(spark, monkeypatch):
    import runtime
    from materializer.executors import check_executors

    monkeypatch.setattr(runtime, "__version__", "9.9.9")  # this driver only: the workers import their own
    with pytest.raises(TidehouseError) as err:
        check_executors(spark)
    assert err.value.code is ErrorCode.SPARK_START
    assert "executors run tidehouse 0." in str(err.value) and "this driver tidehouse 9.9.9" in str(err.value)
    assert "pip install tidehouse==9.9.9" in err.value.render()


def test_executors_without_tidehouse_are_refused_before_any_query(spark, tmp_path, monkeypatch):
    """A probe from a module only the driver can import stands for tidehouse missing on the workers."""
    from materializer.executors import check_executors

    (tmp_path / "driver_only_module.py").write_text("def probe(batches):\n    yield from ()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import driver_only_module

    try:
        with pytest.raises(TidehouseError) as err:
            check_executors(spark, driver_only_module.probe)
    finally:
        sys.modules.pop("driver_only_module", None)
    assert err.value.code is ErrorCode.SPARK_START
    assert "cannot run tidehouse's data path" in str(err.value)
    assert "driver_only_module" in str(err.value)  # the worker's ModuleNotFoundError, named
    assert "Traceback" not in err.value.render()
