"""The Spark SQL type grammar, once: type strings (``bigint``, ``array<string>``, ``map<string,int>``,
``decimal(10,2)``, ``struct<a: int NOT NULL>``) and column lists (``user_id string NOT NULL COMMENT 'x',
ts timestamp``), parsed without a JVM into a small tree of :class:`SparkType` and :class:`Column`.

Everyone who reads Spark DDL parses it here: the registry (parameter types, output contracts, source
schemas; it checks YAML values against the tree) and the Spark bridge (``runtime.spark.types`` maps the tree
to pyspark and Arrow types). What one accepts the other accepts.

Grammar (keywords and type names are case-insensitive; a name is an identifier or a backquoted name with
````` doubled inside)::

    columns := column ("," column)*
    column  := name [":"] type ["NOT" "NULL"] ["COMMENT" 'text']      (a column list may allow a name alone)
    type    := primitive | "decimal" ["(" p ["," s] ")"] | ("varchar" | "char") "(" n ")"
             | "array" "<" type ">" | "map" "<" type "," type ">" | "struct" "<" [columns] ">"

Primitive spellings: see :data:`PRIMITIVES`. ``dec`` and ``numeric`` are ``decimal`` (default ``(10,0)``;
precision 1..38, scale <= precision). Column and struct field names must be unique (case-insensitive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# canonical name -> spellings Spark accepts
PRIMITIVES: dict[str, tuple[str, ...]] = {
    "string": ("string",),
    "tinyint": ("tinyint", "byte"),
    "smallint": ("smallint", "short"),
    "int": ("int", "integer"),
    "bigint": ("bigint", "long"),
    "float": ("float", "real"),
    "double": ("double",),
    "boolean": ("boolean", "bool"),
    "date": ("date",),
    "timestamp": ("timestamp", "timestamp_ltz"),
    "timestamp_ntz": ("timestamp_ntz",),
    "binary": ("binary",),
}
_ALIASES = {spelling: name for name, spellings in PRIMITIVES.items() for spelling in spellings}
_DECIMALS = ("decimal", "dec", "numeric")
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')|([<>(),:]))")
_KINDS = ("quoted", "word", "number", "string", "punct")


class SparkTypeError(ValueError):
    """A type string or column list that does not parse; the message says where.

    ``unknown_type`` is set (with ``column``, the path of the column: ``a``, ``a.b``, ``a[]``, ``a.key``) when
    the text is well-formed but names a type Spark does not have (or Tidehouse does not support)."""

    def __init__(self, message: str, *, unknown_type: str | None = None, column: str | None = None) -> None:
        super().__init__(message)
        self.unknown_type = unknown_type
        self.column = column


@dataclass(frozen=True)
class SparkType:
    """A parsed Spark SQL type: ``name`` is canonical (``bigint``, ``array``, ``map``, ``struct``,
    ``decimal``...).

    ``args``: ``(element,)`` of an array, ``(key, value)`` of a map, the :class:`Column` s of a struct,
    ``(precision, scale)`` of a decimal, ``(length,)`` of a varchar or char."""

    name: str
    args: tuple = ()

    def __str__(self) -> str:
        if self.name == "array":
            return f"array<{self.args[0]}>"
        if self.name == "map":
            return f"map<{self.args[0]},{self.args[1]}>"
        if self.name == "struct":
            return (
                "struct<"
                + ",".join(f"{c.name}:{c.type}" + ("" if c.nullable else " NOT NULL") for c in self.args)
                + ">"
            )
        if self.args:
            return f"{self.name}({','.join(str(a) for a in self.args)})"
        return self.name


@dataclass(frozen=True)
class Column:
    """One column of a column list (or field of a struct). ``type`` is ``None`` for a name alone (an output
    contract may list names only)."""

    name: str
    type: SparkType | None
    nullable: bool = True
    comment: str | None = None


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                start = len(text) - len(text[pos:].lstrip())
                raise SparkTypeError(f"unexpected {text[start:][:10]!r} at character {start + 1} of {text!r}")
            self.items.append((_KINDS[m.lastindex - 1], m.group(m.lastindex), m.start(m.lastindex)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def at(self, *words: str) -> bool:
        """Whether the next tokens are ``words`` (punctuation, or keywords in any case)."""
        ahead = self.items[self.i : self.i + len(words)]
        return len(ahead) == len(words) and all(
            value.upper() == word.upper() and kind in ("word", "punct")
            for (kind, value, _), word in zip(ahead, words)
        )

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        item = self.peek()
        if item is None:
            raise SparkTypeError(
                f"unexpected end of {self.text!r}" + (f", expected '{expected}'" if expected else "")
            )
        if expected is not None and item[1].upper() != expected.upper():
            raise SparkTypeError(
                f"expected '{expected}' at character {item[2] + 1} of {self.text!r}, got {item[1]!r}"
            )
        self.i += 1
        return item

    def done(self) -> bool:
        return self.i >= len(self.items)

    def error(self, message: str, pos: int) -> SparkTypeError:
        return SparkTypeError(f"{message} at character {pos + 1} of {self.text!r}")


def _type(tokens: _Tokens, column: str) -> SparkType:
    kind, word, pos = tokens.take()
    low = word.lower()
    if kind != "word":
        raise tokens.error(f"expected a type name, got {word!r}", pos)
    if low == "array":
        tokens.take("<")
        element = _type(tokens, f"{column}[]")
        tokens.take(">")
        return SparkType("array", (element,))
    if low == "map":
        tokens.take("<")
        key = _type(tokens, f"{column}.key")
        tokens.take(",")
        value = _type(tokens, f"{column}.value")
        tokens.take(">")
        return SparkType("map", (key, value))
    if low == "struct":
        tokens.take("<")
        fields = () if tokens.at(">") else _columns(tokens, prefix=f"{column}.", closing=">")
        tokens.take(">")
        return SparkType("struct", fields)
    if low in _DECIMALS:
        precision, scale = 10, 0
        if tokens.at("("):
            tokens.take("(")
            precision = _number(tokens)
            if tokens.at(","):
                tokens.take(",")
                scale = _number(tokens)
            tokens.take(")")
        if not (1 <= precision <= 38 and 0 <= scale <= precision):
            raise SparkTypeError(
                f"decimal({precision},{scale}) is out of range (precision 1..38, scale <= "
                "precision)" + (f" for column {column!r}" if column else "")
            )
        return SparkType("decimal", (precision, scale))
    if low in ("varchar", "char"):
        tokens.take("(")
        length = _number(tokens)
        tokens.take(")")
        return SparkType(low, (length,))
    if low in _ALIASES:
        return SparkType(_ALIASES[low])
    raise SparkTypeError(f"unknown type {word!r}", unknown_type=word, column=column)


def _number(tokens: _Tokens) -> int:
    kind, value, pos = tokens.take()
    if kind != "number":
        raise tokens.error(f"expected a number, got {value!r}", pos)
    return int(value)


def _name(token: tuple[str, str, int], tokens: _Tokens, what: str) -> str:
    kind, name, pos = token
    if kind == "quoted":
        return name[1:-1].replace("``", "`")
    if kind != "word":
        raise tokens.error(f"expected a {what} name, got {name!r}", pos)
    return name


def _columns(
    tokens: _Tokens, *, prefix: str = "", closing: str | None = None, untyped: bool = False
) -> tuple[Column, ...]:
    """Columns up to the end of the text (``closing`` None) or up to ``closing`` (a struct's fields)."""
    what = "column" if closing is None else "field"
    out: list[Column] = []
    seen: set[str] = set()
    while True:
        token = tokens.take()
        name = _name(token, tokens, what)
        if name.lower() in seen:
            raise tokens.error(f"duplicate {what} {prefix + name!r}", token[2])
        seen.add(name.lower())
        col_type, nullable, comment = None, True, None
        if tokens.done() or tokens.at(",") or tokens.at(closing or ","):
            if not untyped or closing is not None:
                raise tokens.error(f"{what} {prefix + name!r} has no type (write 'name type, ...')", token[2])
        else:
            if tokens.at(":"):
                tokens.take(":")
            col_type = _type(tokens, prefix + name)
            if tokens.at("NOT", "NULL"):
                tokens.take("NOT")
                tokens.take("NULL")
                nullable = False
            if tokens.at("COMMENT"):
                tokens.take()
                kind, text, pos = tokens.take()
                if kind != "string":
                    raise tokens.error("expected a quoted comment", pos)
                comment = re.sub(r"\\(.)", r"\1", text[1:-1])
        out.append(Column(name, col_type, nullable, comment))
        if tokens.at(","):
            tokens.take(",")
            continue
        if closing is None and not tokens.done():
            kind, value, pos = tokens.peek()
            raise tokens.error(f"unexpected {value!r} after the type of column {prefix + name!r}", pos)
        return tuple(out)


def parse_type(text: str) -> SparkType:
    """Parse one Spark SQL type string. Raises :class:`SparkTypeError`."""
    if not isinstance(text, str) or not text.strip():
        raise SparkTypeError("a type must be a non-empty string like 'bigint' or 'array<string>'")
    tokens = _Tokens(text)
    result = _type(tokens, "")
    if not tokens.done():
        _, value, pos = tokens.peek()
        raise tokens.error(f"unexpected {value!r}", pos)
    return result


def parse_columns(text: str, *, untyped: bool = False) -> tuple[Column, ...]:
    """A column list: ``"a string NOT NULL, b bigint"`` -> ``(Column(a, string, False), Column(b, bigint))``.

    ``untyped`` also accepts a name alone (``"a, b bigint"``: ``a`` has the type ``None``), as output
    contracts may. Raises :class:`SparkTypeError`."""
    if not isinstance(text, str) or not text.strip():
        raise SparkTypeError("expected columns like 'user_id string, cnt bigint'")
    return _columns(_Tokens(text), untyped=untyped)
