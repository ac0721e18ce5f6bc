"""Secret masking lives in one place (runtime/core/config.py): by shape (``_mask``: secret-looking keys, URL
passwords) and by value (``redact``: what came from ``${ENV}``), both writing ``MASK``."""

from __future__ import annotations

from runtime.core.config import MASK, load_config, mask_catalog, redact


def test_redact_hides_env_values_anywhere_in_a_report(tmp_path, monkeypatch):
    monkeypatch.setenv("TH_TEST_SECRET", "s3cr3t-value-42")
    (tmp_path / "tidehouse.yaml").write_text(
        "lake:\n  catalog: {type: rest, uri: 'http://h', x: '${TH_TEST_SECRET}'}\n"
    )
    load_config(project_dir=tmp_path)
    report = {
        "a": "user:s3cr3t-value-42@host",
        "b": ["s3cr3t-value-42", 7, None],
        "c": ("x s3cr3t-value-42",),
    }
    assert redact(report) == {"a": f"user:{MASK}@host", "b": [MASK, 7, None], "c": [f"x {MASK}"]}
    assert redact("nothing secret") == "nothing secret"


def test_mask_by_shape_uses_the_same_mask():
    shown = mask_catalog({"token": "t", "uri": "postgresql://u:pw@h/db", "warehouse": "s3://b"})
    assert shown == {"token": MASK, "uri": f"postgresql://u:{MASK}@h/db", "warehouse": "s3://b"}
