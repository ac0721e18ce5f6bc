"""Functions run in separate processes by the concurrency tests (importable by spawned children)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def register_texts(url: str, gate: str, texts: list[str]) -> tuple[list[tuple[str, int, bool]], float]:
    """Open the registry, say ready, wait for the gate to open, register each action text.

    Returns what each registration answered and the seconds the registrations took.
    """
    from registry.service import Registry

    registry = Registry.open(url)
    try:
        Path(gate, f"ready-{os.getpid()}").touch()
        while not Path(gate, "go").exists():
            time.sleep(0.002)
        began = time.perf_counter()
        out = []
        for text in texts:
            version = registry.register_action(text)
            out.append((version.content_hash, version.version, version.unchanged))
        return out, time.perf_counter() - began
    finally:
        registry.close()


def race(url: str, gate: Path, jobs: list[list[str]]) -> list[tuple[list, float]]:
    """Run one process per job; open the gate once all are ready, so registrations overlap."""
    import multiprocessing

    gate.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        pending = pool.starmap_async(register_texts, [(url, str(gate), texts) for texts in jobs])
        deadline = time.time() + 60
        while len(list(gate.glob("ready-*"))) < len(jobs) and time.time() < deadline and not pending.ready():
            time.sleep(0.01)
        (gate / "go").touch()
        return pending.get(timeout=120)
