"""``tidehouse-python``: the interpreter Spark starts its Python workers with, running PySpark's byte code.

Spark puts its ``pyspark.zip`` first on every Python worker's ``PYTHONPATH``
(``$SPARK_HOME/python/lib``; pip's ``pyspark`` package ships that zip inside itself). A zip holds no byte
code, so each process that imports PySpark from it compiles every module again: 0.42 CPU s for a streaming
source runner here (``python -m pyspark.sql.streaming.python_streaming_source_runner``: 0.69 s from the zip,
0.27 s without). Spark starts one such process for every streaming query that reads a ``tidehouse`` table,
one for every data-source planning call, and the driver path's task workers: ``tidehouse test``'s 65
queries spent 165 CPU s with the zip, 125 s without it (on 2 cores: 92 s -> 71 s).

This launcher is installed next to the interpreter (``[project.scripts]``). It removes the zip from
``PYTHONPATH`` when the interpreter's own ``pyspark`` (the installed package, found on the path that
follows) is the same version as the zip's, then ``exec`` s the interpreter with the arguments Spark gave: the
same program, with PySpark from the installed package and its cached byte code (and without Spark's own
jars on the path, :func:`spark_jar`). Any other case — no zip, a
zip of another version, an unreadable one — keeps Spark's path, so the zip's PySpark runs as Spark meant.

:func:`runtime.spark.session.get_spark` makes it ``PYSPARK_PYTHON`` when that is unset or names the running
interpreter (:func:`worker_python`). It imports nothing outside the standard library: it runs before every
Python worker.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

LAUNCHER = "tidehouse-python"  # the console script of main()
SPARK_ZIP = "pyspark.zip"


def pyspark_version(entry: str) -> str | None:
    """The PySpark version a ``sys.path`` entry (a directory or Spark's ``pyspark.zip``) holds, else None."""
    try:
        if entry.endswith(".zip"):
            with zipfile.ZipFile(entry) as archive:
                text = archive.read("pyspark/version.py").decode("utf-8")
        else:
            with open(os.path.join(entry, "pyspark", "version.py"), encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    found = re.search(r"""__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""", text)
    return found.group(1) if found else None


def installed_pyspark_first(path: list[str]) -> list[str]:
    """``path`` with Spark's ``pyspark.zip`` moved right behind the first later entry that holds the same
    PySpark version; ``path`` unchanged when no entry does (then the zip's PySpark is the one that runs)."""
    zips = [i for i, entry in enumerate(path) if os.path.basename(entry) == SPARK_ZIP]
    if not zips:
        return path
    z = zips[0]
    version = pyspark_version(path[z])
    if version is None:
        return path
    for i in range(z + 1, len(path)):
        if not path[i].endswith(".zip") and pyspark_version(path[i]) == version:
            return [*path[:z], *path[z + 1 : i + 1], path[z], *path[i + 1 :]]
    return path


def pythonpath_without_spark_zip(pythonpath: str, rest: list[str]) -> str:
    """``PYTHONPATH`` without Spark's ``pyspark.zip`` — and without Spark's own jars, which Spark adds too
    (:func:`spark_jar`) — when the same PySpark version comes later on the whole path (``pythonpath``'s
    entries, then ``rest``: what the interpreter adds, site-packages among it); else ``pythonpath`` as it
    is."""
    entries = pythonpath.split(os.pathsep)
    moved = installed_pyspark_first([*entries, *rest])
    if moved[: len(entries)] == entries:
        return pythonpath
    zips = [e for e in entries if os.path.basename(e) == SPARK_ZIP]
    return os.pathsep.join(e for e in entries if e not in zips and not spark_jar(e, zips[0]))


def spark_jar(entry: str, spark_zip: str) -> bool:
    """Whether a ``PYTHONPATH`` entry is one of Spark's own jars (``$SPARK_HOME/jars/*.jar``, beside the
    ``python/lib`` folder of ``spark_zip``). Spark adds the jar that holds its ``PythonUtils``
    (``spark-core``, 6,000 entries, no Python module) for packagings that ship PySpark inside it; Python then
    reads that jar's directory at start-up and again at every task, whose ``importlib.invalidate_caches()``
    makes each zip importer re-read it: 15 ms a time here."""
    if not entry.endswith(".jar"):
        return False
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(spark_zip))))
    return os.path.dirname(os.path.abspath(entry)) == os.path.join(home, "jars")


def worker_python(executable: str = sys.executable) -> str:
    """What ``PYSPARK_PYTHON`` should name for ``executable``: the launcher installed next to it when there is
    one and it runs that very interpreter (its ``#!`` line names ``executable``, or another name for it in
    the same folder: ``python3`` for ``python``), else ``executable`` itself."""
    for folder in dict.fromkeys([Path(executable).parent, Path(sysconfig.get_path("scripts"))]):
        launcher = folder / LAUNCHER
        try:
            with open(launcher, "rb") as fh:
                first = fh.readline().decode("utf-8", "replace").strip()
        except OSError:
            continue
        if _runs(first, executable) and os.access(launcher, os.X_OK):
            return str(launcher)
    return executable


def spark_python(current: str | None, executable: str = sys.executable) -> str:
    """``PYSPARK_PYTHON`` for a driver running ``executable`` where it is ``current`` now: unset or naming
    this interpreter (by any of its names, :func:`same_interpreter`), :func:`worker_python`'s choice; else
    the interpreter the user chose, as it is."""
    if current is None or same_interpreter(current, executable):
        return worker_python(executable)
    return current


def _runs(shebang: str, executable: str) -> bool:
    return shebang.startswith("#!") and same_interpreter(shebang[2:].strip(), executable)


def same_interpreter(named: str, executable: str) -> bool:
    """Whether ``named`` is ``executable`` or another name for it in the same folder (a venv's ``python``
    for its ``python3``); the same file in another folder is another venv's interpreter, not this one."""
    if named == executable:
        return True
    same_folder = os.path.dirname(named) == os.path.dirname(executable)
    return same_folder and os.path.exists(named) and os.path.realpath(named) == os.path.realpath(executable)


def forked_module(args: list[str], pythonpath: str | None, server: str | None) -> str | None:
    """The module the driver's fork server is to run for Spark's command line ``args``
    (``-m pyspark.sql.streaming.python_streaming_source_runner``): one of :data:`runtime.spark.prefork.FORKED`
    when a server is named and the installed PySpark is the one to run (no ``pyspark.zip`` left on
    ``pythonpath``), else None."""
    if not server or len(args) != 2 or args[0] != "-m":
        return None
    if any(os.path.basename(e) == SPARK_ZIP for e in (pythonpath or "").split(os.pathsep)):
        return None
    from runtime.spark.prefork import FORKED

    return args[1] if args[1] in FORKED else None


def main() -> None:
    """The launcher: ``PYTHONPATH`` without a zip the installed PySpark replaces; then one of the driver's
    runners forked by the driver's fork server (:mod:`runtime.spark.prefork`) when it runs and the installed
    PySpark is the one to run, else this interpreter."""
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath:
        own = set(pythonpath.split(os.pathsep))
        rest = [e for e in sys.path[1:] if e not in own]  # [0] is this script's folder, not a worker's
        os.environ["PYTHONPATH"] = pythonpath = pythonpath_without_spark_zip(pythonpath, rest)
    args = sys.argv[1:]
    module = forked_module(args, pythonpath, os.environ.get("TIDEHOUSE_PREFORK"))
    if module is not None:
        from runtime.spark import prefork

        code = prefork.run_forked(os.environ["TIDEHOUSE_PREFORK"], module)
        if code is not None:
            prefork.exit_as(code)
    os.execv(sys.executable, [sys.executable, *args])
