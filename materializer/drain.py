"""Waiting for streaming queries to process all their input (``--until-idle``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor


def drain(queries: Mapping[str, object], names: Sequence[str]) -> dict[str, BaseException | None]:
    """``processAllAvailable()`` of each query of ``names``, side by side: an idle query's wait lasts about
    one trigger, so N independent queries are drained in one wait, not N. Returns each name's
    ``StreamingQueryException`` (None: drained)."""
    from pyspark.errors import StreamingQueryException

    def wait(name: str) -> StreamingQueryException | None:
        try:
            queries[name].processAllAvailable()
        except StreamingQueryException as exc:
            return exc
        return None

    if len(names) == 1:
        return {names[0]: wait(names[0])}
    pool = ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="drain")
    try:
        return dict(zip(names, pool.map(wait, names)))
    finally:  # an interrupt leaves at once: the waits end when the caller stops the queries
        pool.shutdown(wait=False, cancel_futures=True)
