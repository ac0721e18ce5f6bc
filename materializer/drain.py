"""Waiting for streaming queries to process all their input (``--until-idle``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path


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


class Awake:
    """The awake files of a run's queries (:mod:`runtime.spark.idlewait`): while a query's file exists, its
    source answers a trigger at once instead of waiting for rows. A drain and a stop set them first."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str) -> Path:
        return self.folder / name

    def set(self, names: Iterable[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.path(name).touch()

    def clear(self, names: Iterable[str]) -> None:
        for name in names:
            self.path(name).unlink(missing_ok=True)

    @contextmanager
    def during(self, names: Sequence[str]) -> Iterator[None]:
        self.set(names)
        try:
            yield
        finally:
            self.clear(names)
