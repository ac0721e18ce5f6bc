"""Places given as a path or a URI: which scheme they use, and the local path of a local one.

``Path("s3a://bucket/x")`` is ``s3a:/bucket/x`` — a relative local path — so a URI handed to code that
expects a local path would silently create a folder named ``s3a:``. Every setting or option that names a
place goes through :func:`local_path` (or, for stores that support remote file systems, :func:`scheme_of`)
first, and an unsupported scheme is an error naming it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def scheme_of(value: str) -> str:
    """``"s3"`` for ``s3://b/p``, ``"file"`` for ``file:///x``, ``""`` for a plain path."""
    match = _SCHEME.match(value)
    return match.group(1).lower() if match else ""


def local_path(value: str, *, base: Path | None = None) -> Path:
    """The local path a path or ``file://`` URI names (relative paths against ``base`` when given).

    Raises ``ValueError`` naming the scheme for any other URI.
    """
    scheme = scheme_of(value)
    if scheme == "file":
        parsed = urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(
                f"{value!r}: a file:// URI names a path on this machine (file:///path), not on "
                f"host {parsed.netloc!r}"
            )
        path = Path(unquote(parsed.path))
    elif scheme:
        raise ValueError(
            f"{value!r} uses the URI scheme '{scheme}', which is not supported here: give a local "
            "(or mounted) path or a file:// URI"
        )
    else:
        path = Path(value).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return path
