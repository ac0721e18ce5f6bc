"""The settings a project's SparkSession starts with: the project file's ``spark.conf``, and the defaults
Tidehouse adds to it where the project does not set them itself (:func:`spark_conf`)."""

from __future__ import annotations

from runtime.core.config import Config

# Spark's setting that adds SPARK_SIMPLIFIED_TRACEBACK to its UDF workers' environment (spark_conf)
SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"
WAREHOUSE = "spark.sql.warehouse.dir"


def spark_conf(config: Config) -> dict:
    """The project's ``spark.conf``, with these defaults unless the project sets them itself:

    * ``spark.sql.warehouse.dir: <home>/spark-warehouse``: Spark's own catalog makes its folder when a
      session first uses it, by default ``spark-warehouse/`` in the current directory, so every command that
      started Spark left an empty folder wherever it ran (the project's folder, or a subfolder of it). Not
      over Spark Connect, where it is the server's setting.

    and wherever tasks run in executors (a cluster master: ``spark://``, ``yarn``, ``k8s://``; or
    ``spark.remote``):

    * ``spark.python.daemon.module: materializer.daemon``: the executors' task workers start with the tasks'
      modules loaded (:mod:`materializer.daemon`). Not over Spark Connect, where it is the server's own
      ``--conf`` (docs/operations.md).
    * ``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled: false``: Spark keys its Python daemons
      by the workers' environment, and only its UDF runners (``mapInArrow``) add
      ``SPARK_SIMPLIFIED_TRACEBACK``, so each executor ran two daemons (and two pools of workers), one for
      the writes and one for the ``tidehouse`` source's reads. Off, they share one. A task's traceback then
      shows PySpark's own frames as well; the TidehouseError it raised is read from its last lines either
      way (materializer/failures.py).
    """
    from materializer.daemon import TASK_DAEMON

    conf = dict(config.get("spark.conf") or {})
    remote = bool(config.get("spark.remote"))
    if not remote:
        conf.setdefault(WAREHOUSE, str(config.home / "spark-warehouse"))
    if remote or not str(config.get("spark.master")).startswith("local"):
        conf.setdefault(SIMPLIFIED_TRACEBACK, "false")
        if not remote:
            conf.setdefault("spark.python.daemon.module", TASK_DAEMON)
    return conf
