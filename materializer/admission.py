"""How much one micro-batch takes (docs/operations.md, "Backlogs"): a backlog is worked off in several
batches, which the next layers start on while the rest is read, and the driver holds one batch at a time."""

from __future__ import annotations

from materializer.plan import SourcePlan
from registry.specs.flow import FILE_FORMATS


def rows_per_batch(config, data_path: str) -> int:
    """The rows one micro-batch of an append or changelog query takes from a hot input: a cap per data path
    (the driver holds its batch; on the executors each task holds one bucket's range)."""
    key = "executor_rows_per_batch" if data_path == "executors" else "max_rows_per_batch"
    return config.get(f"materializer.{key}")


def source_options(src: SourcePlan, config, data_path: str = "driver") -> dict[str, str]:
    """A source's options, with the cap of a file source's micro-batch as Spark's ``maxBytesPerTrigger``
    (``materializer.source_bytes_per_batch``; on the executor path
    ``materializer.executor_source_bytes_per_batch``) unless the flow caps it."""
    options = dict(src.options)
    key = "executor_source_bytes_per_batch" if data_path == "executors" else "source_bytes_per_batch"
    cap = config.get(f"materializer.{key}")
    own = {k.lower() for k in options}
    if cap and src.format in FILE_FORMATS and not own & {"maxfilespertrigger", "maxbytespertrigger"}:
        options["maxBytesPerTrigger"] = str(cap)
    return options
