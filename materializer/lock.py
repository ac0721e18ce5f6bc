"""The run lock of a flow: one running trigger per flow and home, released when its process dies."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from runtime.core.errors import ErrorCode, TidehouseError


class RunLock:
    """An exclusive, non-blocking lock on ``home/run/<flow>.lock`` (``flock``: released if the process dies).

    The file holds the holder's pid, for the message that refuses a second trigger.
    """

    def __init__(self, run_dir: Path, flow: str) -> None:
        self.path = Path(run_dir) / f"{flow}.lock"
        self._fh = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fh is not None

    def acquire(self) -> None:
        if self.held:  # taken early by `trigger`, before planning
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - kept open while the lock is held
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise TidehouseError(
                ErrorCode.FLOW_RUNNING,
                f"flow {self.path.stem} is already running (pid {holder})",
                hint="stop it first (Ctrl-C or kill -TERM), or watch it "
                f"with `tidehouse flow status {self.path.stem}`",
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def taken_elsewhere(self) -> bool:
        """Whether another process (or another lock object) holds the lock now: the flow is running."""
        if self.held:
            return True
        if not self.path.is_file():
            return False
        with open(self.path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False
