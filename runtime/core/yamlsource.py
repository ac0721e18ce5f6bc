"""Strict YAML that remembers where every node came from: flows, action headers and ``tidehouse.yaml``.

PyYAML's ``safe_load`` silently keeps the last of two duplicate keys, turns ``2024-01-01`` into a date,
``no`` into ``False`` and ``1:30`` into ``90``. Specs and the project file need none of that, and every later
error must point at a line and column. This module is part of the core (it imports nothing but
:mod:`runtime.core.errors`), so the configuration can use it as well as the registry. So we let PyYAML
*compose* the node graph (which keeps marks) and build plain Python values ourselves:

* duplicate keys are errors (all of them are reported, each naming the first definition);
* scalars resolve with the YAML 1.2 core schema: ``true``/``false``, ``null``/``~``, decimal, ``0x``, ``0o``
  integers and floats; no timestamps, no sexagesimal numbers; everything else is a string;
* the YAML 1.1 booleans ``yes``/``no``/``on``/``off`` stay strings but are remembered as *ambiguous*, so the
  spec layer and the configuration can refuse them with a clear "quote it or write true/false";
* empty documents, undecodable bytes, NUL bytes, files over a size limit, several documents, nesting deeper
  than :data:`MAX_DEPTH` and alias bombs are refused with their own error codes.

The result is a :class:`Document`: the data plus the mark of every value and key by path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from runtime.core.errors import ErrorCode, Location, TidehouseError

MAX_BYTES = 1 << 20  # 1 MiB: far beyond any hand-written flow or action
MAX_DEPTH = 64
MAX_NODES = 200_000  # built values, counting alias expansions (stops "billion laughs")

Path_ = tuple  # a path into the data: str keys and int list indices

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_AMBIGUOUS = "tag:tidehouse:yaml11-bool"

_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


@dataclass(frozen=True)
class Mark:
    line: int  # 1-based
    col: int  # 1-based


def format_path(path: Iterable[Any]) -> str | None:
    """``("layers", "dwd", "t", "expect", 0, "name")`` -> ``layers.dwd.t.expect[0].name``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


@dataclass
class Document:
    """Plain data loaded from YAML plus the source position of every value and mapping key."""

    data: Any
    file: str
    values: dict[tuple, Mark] = field(default_factory=dict)
    keys: dict[tuple, Mark] = field(default_factory=dict)
    ambiguous: dict[tuple, str] = field(default_factory=dict)  # path -> 'no', 'on', ... (YAML 1.1 booleans)

    def resolve(self, path: Iterable[Any]) -> tuple:
        """The longest prefix of ``path`` that exists in the data (parts that do not match are skipped)."""
        node, found = self.data, []
        for part in path:
            if (isinstance(node, dict) and part in node) or (
                isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
            ):
                node = node[part]
            else:
                continue
            found.append(part)
        return tuple(found)

    def value_at(self, path: Iterable[Any]) -> Any:
        """The value at ``path`` (which must exist)."""
        node = self.data
        for part in path:
            node = node[part]
        return node

    def location(
        self, path: Iterable[Any], *, key: bool = False, shown: Iterable[Any] | None = None
    ) -> Location:
        """Where ``path`` is (its key when ``key``), showing ``shown`` (default: ``path``) as the YAML
        path."""
        path = tuple(path)
        real = self.resolve(path)
        mark = (self.keys.get(real) if key else None) or self.values.get(real) or self.values.get(())
        return Location(
            self.file,
            mark.line if mark else None,
            mark.col if mark else None,
            format_path(path if shown is None else shown),
        )

    def location_of(self, dotted: str) -> Location:
        """Location of a dotted YAML path as errors print it (``layers.dwd.t.expect[0].name``)."""
        return self.location(self.parse_path(dotted), shown=None)

    def parse_path(self, dotted: str) -> tuple:
        """Split a dotted path greedily against the data, so keys that contain dots still match."""
        tokens = [t for t in re.split(r"(\[\d+\])|\.", dotted or "") if t]
        out, node, i = [], self.data, 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith("[") and tok.endswith("]"):
                out.append(int(tok[1:-1]))
                node = node[out[-1]] if isinstance(node, list) and out[-1] < len(node) else None
                i += 1
                continue
            for j in range(len(tokens), i, -1):  # longest dotted key first
                cand = ".".join(t for t in tokens[i:j])
                if (
                    isinstance(node, dict)
                    and cand in node
                    and not any(t.startswith("[") for t in tokens[i:j])
                ):
                    out.append(cand)
                    node, i = node[cand], j
                    break
            else:
                out.append(tok)
                node, i = None, i + 1
        return tuple(out)


class _TooDeep(Exception):
    def __init__(self, mark) -> None:
        self.mark = mark


class _Loader(Reader, Scanner, Parser, Composer, BaseResolver):
    """Composes nodes (with marks) using only our own implicit resolvers; refuses deep nesting early."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        BaseResolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    _AMBIGUOUS, re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)$"), list("yYnNoO")
)
_Loader.add_implicit_resolver(_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_Loader.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))
_Loader.add_implicit_resolver(_MERGE, re.compile(r"^<<$"), ["<"])


def _mark(node: Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Builds plain values from composed nodes, recording marks and collecting duplicate-key errors."""

    def __init__(self, doc: Document, line_offset: int) -> None:
        self.doc = doc
        self.line_offset = line_offset
        self.errors: list[TidehouseError] = []
        self.count = 0

    def mark(self, node: Node) -> Mark:
        m = _mark(node)
        return Mark(m.line + self.line_offset, m.col)

    def loc(self, node: Node, path: tuple) -> Location:
        m = self.mark(node)
        return Location(self.doc.file, m.line, m.col, format_path(path))

    def build(self, node: Node, path: tuple, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            mark = self.mark(node)
            raise TidehouseError(
                ErrorCode.YAML_TOO_LARGE,
                f"more than {MAX_NODES:,} values (alias expansion?)",
                location=Location(self.doc.file, mark.line, mark.col),
                hint="do not nest anchors and aliases this deep",
            )
        if depth > MAX_DEPTH:
            raise TidehouseError(
                ErrorCode.YAML_TOO_DEEP,
                f"nested deeper than {MAX_DEPTH} levels",
                location=self.loc(node, path),
            )
        self.doc.values.setdefault(path, self.mark(node))
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                raise self.bad_tag(node, path)
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                raise self.bad_tag(node, path)
            return self.mapping(node, path, depth)
        raise self.bad_tag(node, path)  # pragma: no cover - PyYAML has no other node kinds

    def bad_tag(self, node: Node, path: tuple) -> TidehouseError:
        return TidehouseError(
            ErrorCode.YAML_SYNTAX,
            f"unsupported YAML tag {node.tag!r}",
            location=self.loc(node, path),
            hint="remove the tag",
        )

    def scalar(self, node: ScalarNode, path: tuple) -> Any:
        tag, value = node.tag, node.value
        try:
            if tag == _STR:
                return value
            if tag == _AMBIGUOUS:
                self.doc.ambiguous[path] = value
                return value
            if tag == _BOOL:
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.lower() == "true"
            if tag == _NULL:
                if value not in ("", "~", "null", "Null", "NULL"):
                    raise ValueError(value)
                return None
            if tag == _INT:
                text = value
                if text.startswith("0x"):
                    return int(text, 16)
                if text.startswith("0o"):
                    return int(text, 8)
                return int(text)
            if tag == _FLOAT:
                low = value.lower()
                if low.endswith(".inf"):
                    return float("-inf") if low.startswith("-") else float("inf")
                if low == ".nan":
                    return float("nan")
                return float(value)
        except ValueError:
            raise TidehouseError(
                ErrorCode.YAML_SYNTAX,
                f"{value!r} is not a valid {tag.rsplit(':', 1)[-1]}",
                location=self.loc(node, path),
            ) from None
        if tag == _MERGE:
            raise TidehouseError(
                ErrorCode.YAML_SYNTAX, "'<<' is only allowed as a mapping key", location=self.loc(node, path)
            )
        raise self.bad_tag(node, path)

    def key(self, node: Node, path: tuple) -> Any:
        if not isinstance(node, ScalarNode):
            raise TidehouseError(
                ErrorCode.YAML_SYNTAX, "mapping keys must be plain scalars", location=self.loc(node, path)
            )
        if node.tag in (_AMBIGUOUS, _BOOL, _NULL):
            return node.value  # `on:` as a key is the word "on", never a boolean
        return self.scalar(node, path)

    def mapping(self, node: MappingNode, path: tuple, depth: int) -> dict:
        out: dict[Any, Any] = {}
        explicit: dict[Any, Mark] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == _MERGE:
                merges.append(value_node)
                continue
            key = self.key(key_node, path)
            kpath = path + (key,)
            if key in explicit:
                first = explicit[key]
                self.errors.append(
                    TidehouseError(
                        ErrorCode.YAML_DUPLICATE_KEY,
                        f"duplicate key '{key}' (first defined at line {first.line})",
                        location=self.loc(key_node, kpath),
                        hint="remove one of them",
                    )
                )
                continue
            explicit[key] = self.mark(key_node)
            self.doc.keys[kpath] = explicit[key]
            out[key] = self.build(value_node, kpath, depth + 1)
        for merge in merges:  # `<<: *defaults` - explicit keys win, earlier merges win over later ones
            sources = merge.value if isinstance(merge, SequenceNode) else [merge]
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise TidehouseError(
                        ErrorCode.YAML_SYNTAX, "'<<' merges mappings only", location=self.loc(source, path)
                    )
                merged = _Builder(self.doc, self.line_offset)
                merged.count = self.count
                for key_node, value_node in source.value:
                    key = merged.key(key_node, path)
                    if key in out:
                        continue
                    self.doc.keys.setdefault(path + (key,), self.mark(key_node))
                    out[key] = merged.build(value_node, path + (key,), depth + 1)
                self.count = merged.count
                self.errors.extend(merged.errors)
        return out


def _error_location(file: str, mark, line_offset: int) -> Location:
    if mark is None:
        return Location(file)
    return Location(file, mark.line + 1 + line_offset, mark.column + 1)


def decode(raw: bytes, file: str, *, max_bytes: int = MAX_BYTES) -> str:
    """Bytes of a spec file -> text, refusing oversized, binary and undecodable input."""
    if len(raw) > max_bytes:
        raise TidehouseError(
            ErrorCode.YAML_TOO_LARGE,
            f"file is {len(raw):,} bytes; specs are limited to {max_bytes:,} bytes",
            location=Location(file),
            hint="split it, or check you passed the right file",
        )
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise TidehouseError(
            ErrorCode.YAML_NOT_TEXT,
            "file contains NUL bytes (binary data?)",
            location=Location(file, line),
            hint="specs are UTF-8 text",
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TidehouseError(
            ErrorCode.YAML_NOT_TEXT,
            f"file is not UTF-8 text (byte {exc.start})",
            location=Location(file, line),
            hint="save it as UTF-8",
        ) from exc


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES) -> str:
    """Read a spec file, checking its size before reading it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TidehouseError(
                ErrorCode.YAML_TOO_LARGE,
                f"file is {size:,} bytes; specs are limited to {max_bytes:,} bytes",
                location=Location(str(path)),
                hint="split it, or check you passed the right file",
            )
        with open(path, "rb") as fh:  # bounded: /dev/zero or a pipe reports size 0 and never ends
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise TidehouseError(
            ErrorCode.SPEC_BAD_VALUE, f"cannot read file: {exc.strerror or exc}", location=Location(str(path))
        ) from exc
    return decode(raw, str(path), max_bytes=max_bytes)


def load_yaml(
    text: str,
    file: str = "<string>",
    *,
    line_offset: int = 0,
    max_bytes: int = MAX_BYTES,
    allow_empty: bool = False,
) -> Document:
    """Parse one YAML document strictly. Raises :class:`TidehouseError` (or ``TidehouseErrors``).

    An empty document (nothing, only comments, or ``null``) is an error, unless ``allow_empty``: then the
    document's data is ``None``.
    """
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise TidehouseError(
            ErrorCode.YAML_TOO_LARGE, f"text is over {max_bytes:,} bytes", location=Location(file)
        )
    if "\x00" in text:
        raise TidehouseError(
            ErrorCode.YAML_NOT_TEXT,
            "text contains NUL characters (binary data?)",
            location=Location(file, text[: text.index("\x00")].count("\n") + 1 + line_offset),
        )
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except _TooDeep as exc:
        raise TidehouseError(
            ErrorCode.YAML_TOO_DEEP,
            f"nested deeper than {MAX_DEPTH} levels",
            location=_error_location(file, exc.mark, line_offset),
        ) from None
    except yaml.composer.ComposerError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise TidehouseError(
            ErrorCode.YAML_SYNTAX, _yaml_message(exc), location=_error_location(file, mark, line_offset)
        ) from exc
    except yaml.MarkedYAMLError as exc:
        raise TidehouseError(
            ErrorCode.YAML_SYNTAX,
            _yaml_message(exc),
            location=_error_location(file, exc.problem_mark or exc.context_mark, line_offset),
        ) from exc
    except yaml.YAMLError as exc:  # reader errors (control characters)
        raise TidehouseError(
            ErrorCode.YAML_NOT_TEXT, str(exc).splitlines()[0], location=Location(file)
        ) from exc
    except RecursionError:  # pragma: no cover - MAX_DEPTH stops composition first
        raise TidehouseError(ErrorCode.YAML_TOO_DEEP, "nested too deeply", location=Location(file)) from None
    finally:
        loader.dispose()
    if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL):
        if allow_empty:
            return Document(data=None, file=file)
        raise TidehouseError(
            ErrorCode.YAML_EMPTY, "the document is empty", location=Location(file, 1 + line_offset)
        )
    doc = Document(data=None, file=file)
    builder = _Builder(doc, line_offset)
    doc.data = builder.build(root, ())
    from runtime.core.errors import TidehouseErrors

    TidehouseErrors.raise_if_any(builder.errors)
    return doc


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    if isinstance(exc, yaml.composer.ComposerError) and "expected a single document" in str(exc.context):
        return "expected a single YAML document, found several ('---')"
    parts = [p for p in (exc.context, exc.problem) if p]
    return "invalid YAML: " + ", ".join(parts) if parts else "invalid YAML"
