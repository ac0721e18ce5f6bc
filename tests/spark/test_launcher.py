"""``tidehouse-python`` (runtime/spark/launcher.py): Spark's Python workers import PySpark from the installed
package, not from the ``pyspark.zip`` Spark puts first on their path — and only when both are one version."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from runtime.spark import launcher
from runtime.spark.launcher import (
    LAUNCHER,
    installed_pyspark_first,
    pythonpath_without_spark_zip,
    spark_python,
    worker_python,
)

SPARK_LIB = Path(pyspark.__file__).parent / "python" / "lib"
INSTALLED = str(Path(pyspark.__file__).parent.parent)  # the site-packages that holds pip's pyspark


def _fake_pyspark(where: Path, version: str, *, zipped: bool = False) -> str:
    text = f'__version__: str = "{version}"\n'
    if zipped:
        where.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(where, "w") as archive:
            archive.writestr("pyspark/__init__.py", "")
            archive.writestr("pyspark/version.py", text)
    else:
        (where / "pyspark").mkdir(parents=True)
        (where / "pyspark" / "version.py").write_text(text)
    return str(where)


def test_sparks_pyspark_zip_goes_behind_an_installed_pyspark_of_the_same_version_only(tmp_path):
    same = _fake_pyspark(tmp_path / "site", "4.3.0")
    other = _fake_pyspark(tmp_path / "other", "3.5.1")
    zipped = _fake_pyspark(tmp_path / "spark" / "pyspark.zip", "4.3.0", zipped=True)
    py4j = str(tmp_path / "spark" / "py4j-src.zip")
    path = [zipped, py4j, other, same, "/elsewhere"]
    assert installed_pyspark_first(path) == [py4j, other, same, zipped, "/elsewhere"]
    assert installed_pyspark_first([zipped, py4j, other]) == [zipped, py4j, other]  # no same version
    assert installed_pyspark_first([same, "/elsewhere"]) == [same, "/elsewhere"]  # no zip
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_text("not a zip")
    assert installed_pyspark_first([str(broken), same]) == [str(broken), same]


def test_the_zip_leaves_pythonpath_only_for_the_same_version_later_on_the_path(tmp_path):
    same = _fake_pyspark(tmp_path / "site", "4.3.0")
    other = _fake_pyspark(tmp_path / "other", "3.5.1")
    zipped = _fake_pyspark(tmp_path / "spark" / "pyspark.zip", "4.3.0", zipped=True)
    py4j = str(tmp_path / "spark" / "py4j-src.zip")
    joined = os.pathsep.join
    assert pythonpath_without_spark_zip(joined([zipped, py4j]), [other, same]) == py4j
    assert pythonpath_without_spark_zip(joined([zipped, py4j]), [other]) == joined([zipped, py4j])
    assert pythonpath_without_spark_zip(joined([zipped, py4j, same]), []) == joined([py4j, same])
    assert pythonpath_without_spark_zip(py4j, [same]) == py4j  # no zip
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_text("not a zip")
    assert pythonpath_without_spark_zip(str(broken), [same]) == str(broken)  # unreadable: Spark's path


def test_sparks_own_jars_leave_pythonpath_with_its_zip_only(tmp_path):
    """Spark adds the jar of its ``PythonUtils`` (``$SPARK_HOME/jars``) to the path: it goes with the zip."""
    same = _fake_pyspark(tmp_path / "site", "4.3.0")
    other = _fake_pyspark(tmp_path / "other", "3.5.1")
    home = tmp_path / "spark"
    zipped = _fake_pyspark(home / "python" / "lib" / "pyspark.zip", "4.3.0", zipped=True)
    py4j = str(home / "python" / "lib" / "py4j-src.zip")
    core = str(home / "jars" / "spark-core_2.13-4.3.0.jar")
    user_jar = str(tmp_path / "mine" / "tools.jar")  # not one of Spark's: kept
    joined = os.pathsep.join
    assert pythonpath_without_spark_zip(joined([zipped, py4j, core, user_jar]), [same]) == joined(
        [py4j, user_jar]
    )
    # the zip stays (another version later on the path): Spark's path as it is, jar included
    assert pythonpath_without_spark_zip(joined([zipped, py4j, core]), [other]) == joined([zipped, py4j, core])
    assert pythonpath_without_spark_zip(joined([py4j, core]), [same]) == joined([py4j, core])  # no zip


def test_pyspark_python_names_the_launcher_only_when_it_runs_that_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher.sysconfig, "get_path", lambda name: str(tmp_path / "nowhere"))
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("")
    assert worker_python(str(python)) == str(python)  # none installed
    script = python.parent / LAUNCHER
    script.write_text("#!/some/other/python\nimport sys\n")
    script.chmod(0o755)
    assert worker_python(str(python)) == str(python)  # another interpreter's
    script.write_text(f"#!{python}\nimport sys\n")
    assert worker_python(str(python)) == str(script)
    alias = python.parent / "python3"  # the interpreter by another name in its folder
    alias.symlink_to(python)
    assert worker_python(str(alias)) == str(script)
    elsewhere = tmp_path / "other" / "python"  # the same file in another folder (another venv)
    elsewhere.parent.mkdir()
    elsewhere.symlink_to(python)
    script.write_text(f"#!{elsewhere}\nimport sys\n")
    assert worker_python(str(python)) == str(python)
    script.write_text(f"#!{python}\nimport sys\n")
    script.chmod(0o644)
    assert worker_python(str(python)) == str(python)  # not executable


def test_a_pyspark_python_naming_this_interpreter_by_another_name_gets_the_launcher(tmp_path, monkeypatch):
    """A ``tidehouse`` console script runs ``.venv/bin/python3``; PYSPARK_PYTHON set to ``.venv/bin/python``
    (the README's test command, scripts that export the running interpreter) is the same interpreter and
    gets the launcher (and so the driver's fork server) as unset does; another venv's is the user's choice."""
    monkeypatch.setattr(launcher.sysconfig, "get_path", lambda name: str(tmp_path / "nowhere"))
    python3 = tmp_path / "venv" / "bin" / "python3"
    python3.parent.mkdir(parents=True)
    python3.write_text("")
    (python3.parent / "python").symlink_to(python3)
    script = python3.parent / LAUNCHER
    script.write_text(f"#!{python3}\nimport sys\n")
    script.chmod(0o755)
    other = tmp_path / "other-venv" / "bin" / "python"  # the same file in another venv: not this one
    other.parent.mkdir(parents=True)
    other.symlink_to(python3)
    assert spark_python(None, str(python3)) == str(script)
    assert spark_python(str(python3), str(python3)) == str(script)
    assert spark_python(str(python3.parent / "python"), str(python3)) == str(script)
    assert spark_python(str(other), str(python3)) == str(other)
    assert spark_python("/usr/bin/python3.12", str(python3)) == "/usr/bin/python3.12"
    assert spark_python(str(script), str(python3)) == str(script)  # already the launcher (a child process)


def _installed_launcher() -> str:
    found = worker_python(sys.executable)
    if found == sys.executable:
        pytest.fail(f"{LAUNCHER} is not installed for {sys.executable}: pip install -e . installs it")
    return found


def test_the_installed_launcher_runs_this_interpreter_with_the_installed_pyspark():
    """As Spark starts a driver-side worker: its pyspark.zip and py4j zip first on PYTHONPATH, ``-m``."""
    zips = [str(SPARK_LIB / "pyspark.zip"), *map(str, sorted(SPARK_LIB.glob("py4j-*.zip")))]
    probe = (
        "import os, sys, pyspark; print(sys.executable); print(sys.prefix); print(pyspark.__file__); "
        "print(os.getcwd())"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(zips))
    out = subprocess.run(
        [_installed_launcher(), "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    executable, prefix, where, cwd = out.stdout.split()
    # this interpreter, maybe by another of its names in its folder (pip writes `python3` into the shebang
    # when it runs as .venv/bin/pip, `python` as .venv/bin/python -m pip)
    assert prefix == sys.prefix and Path(executable).parent == Path(sys.executable).parent
    assert os.path.samefile(executable, sys.executable)
    assert where == pyspark.__file__ and "pyspark.zip" not in where
    assert cwd == os.getcwd()
    # a module run as Spark runs its workers (-m), its arguments passed on
    out = subprocess.run(
        [_installed_launcher(), "-m", "json.tool", "--compact"],
        input='{"a": [1, 2]}',
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == '{"a":[1,2]}'


def test_a_zip_of_another_version_keeps_sparks_path(tmp_path):
    zipped = _fake_pyspark(tmp_path / "spark" / "pyspark.zip", "0.0.1", zipped=True)
    probe = "import pyspark.version; print(pyspark.version.__version__)"
    env = dict(os.environ, PYTHONPATH=zipped)
    out = subprocess.run(
        [_installed_launcher(), "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0.0.1"


@pytest.mark.spark
def test_the_sessions_python_workers_run_the_installed_pyspark(spark):
    """The shared session (get_spark) names the launcher; a task's worker imports no PySpark from the zip."""
    assert spark.sparkContext.pythonExec == _installed_launcher()

    def where(batches):
        import pyarrow as pa
        import pyspark as task_pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"file": task_pyspark.__file__}])

    rows = spark.range(1, numPartitions=1).mapInArrow(where, "file string").collect()
    assert rows[0].file == pyspark.__file__, rows

    def jars(batches):
        import sys as task_sys

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"jars": [e for e in task_sys.path if e.endswith(".jar")]}])

    # Spark put its spark-core jar on the worker's PYTHONPATH; the launcher took it off with the zip
    assert spark.range(1, numPartitions=1).mapInArrow(jars, "jars array<string>").collect()[0].jars == []
