"""The hot-storage benchmark's object-store figures (benchmarks/storage.py), measured on tiny sizes against
the real servers (the session's SeaweedFS and PostgreSQL): every row it prints holds a measured, positive
figure."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.storage import make_batch, s3_figures


@pytest.mark.slow
def test_the_s3_figures_are_measured_and_positive(seaweedfs, postgres):
    rng = np.random.default_rng(1)
    batches = [make_batch(rng, 100, i * 100) for i in range(2)]
    small = [make_batch(rng, 10, i * 10) for i in range(3)]
    probe = [pa.table({"id": pa.array(rng.integers(0, 300, 50), pa.int64())}) for _ in range(20)]
    rows, note = s3_figures(seaweedfs, postgres, batches, small, 300, probe)
    labels = [r[0] for r in rows]
    lookups = [r for r in rows if r[0].startswith("S3 PK lookup")]
    assert [("changelog" in r[0], "snapshot" in r[0]) for r in lookups] == [(True, False), (False, True)]
    for row in lookups:
        assert "300 rows, 50 keys per call" in row[0] and row[1] > 0
        first_ms = float(row[0].rsplit(": ", 1)[1].split(" ms")[0].replace(",", ""))
        assert first_ms > 0
    assert labels[0] == "S3 append" and all(r[1] == "" or r[1] > 0 for r in rows)
    assert note.startswith("First put on a new S3 connection")
