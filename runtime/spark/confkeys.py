"""A misspelt key under the project's ``spark.conf`` is an error, not a setting Spark silently ignores.

Spark takes any ``spark.*`` key and ignores the ones it does not define (``spark.sql.shufle.partitions: 4``
changed nothing), and connectors define their own keys in its name space (``spark.cassandra.*``,
``spark.sql.catalog.<name>.*``), so an unknown key cannot be refused as such. A key Spark does not define
that is within two edits (or a change of case) of one it does is a typo: refused at its line in the project
file, naming the key it is close to. Spark's keys are read from its JVM once per session: the SQL settings
(``SQLConf``'s registry) and the core ones (``ConfigEntry``'s), through reflection on their private maps,
since Spark exposes no list of them; a Spark whose maps are named otherwise yields no keys, and nothing is
refused (``tests/spark/test_confkeys.py`` checks the installed Spark's). Over Spark Connect the settings are
the server's, and nothing is checked.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator

from runtime.core.errors import ErrorCode, TidehouseError, TidehouseErrors

# Scala objects and the names their key maps have had (Scala mangles a private[pkg] field's name)
_REGISTRIES = (
    (
        "org.apache.spark.sql.internal.SQLConf$",
        ("org$apache$spark$sql$internal$SQLConf$$sqlConfEntries", "sqlConfEntries"),
    ),
    ("org.apache.spark.internal.config.ConfigEntry$", ("knownConfigs",)),
)
_KNOWN: dict[int, frozenset[str]] = {}
# families whose keys are someone else's: Hadoop's settings, environment variables, catalogs' own settings
_OPEN = ("spark.hadoop.", "spark.executorEnv.", "spark.yarn.appMasterEnv.", "spark.sql.catalog.")


def known_keys(spark) -> frozenset[str]:
    """Every setting key the session's Spark defines (empty when its registries cannot be read)."""
    jvm = spark.sparkContext._jvm
    if id(jvm) not in _KNOWN:
        _KNOWN[id(jvm)] = frozenset(k for cls, names in _REGISTRIES for k in _registry_keys(jvm, cls, names))
    return _KNOWN[id(jvm)]


def _registry_keys(jvm, cls: str, names: Iterable[str]) -> list[str]:
    try:
        klass = jvm.java.lang.Class.forName(cls)
        module = klass.getField("MODULE$").get(None)
    except Exception:  # noqa: BLE001 - another Spark: nothing is known, nothing refused
        return []
    field = next((f for f in (_declared(klass, n) for n in names) if f is not None), None)
    if field is None:
        return []
    field.setAccessible(True)
    joined = jvm.java.lang.String.join("\n", field.get(module).keySet())  # one call, not one per key
    return str(joined).split("\n")


def _declared(klass, name: str):
    """``klass``'s field ``name``, or None when this Spark has no field of that name."""
    try:
        return klass.getDeclaredField(name)
    except Exception:  # noqa: BLE001 - Py4J's NoSuchFieldException
        return None


def typo_of(key: str, known: frozenset[str]) -> str | None:
    """The key Spark defines that ``key`` misspells (within two edits, or another case), else None."""
    if key in known or not key.startswith("spark.") or key.startswith(_OPEN):
        return None
    lowered = {k.lower(): k for k in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    close = difflib.get_close_matches(key, known, n=5, cutoff=0.8)
    return next((c for c in close if _edits(key, c) <= 2), None)


def _edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def refuse_typos(spark, config) -> None:
    """A key of the project's ``spark.conf`` that misspells one of Spark's is an error at its line."""
    from runtime.core.config import setting_key_location

    known = known_keys(spark)
    errors = [
        TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"Spark has no setting {key}, so it would ignore it",
            location=setting_key_location(config, "spark.conf", key),
            hint=f"did you mean {typo}?",
        )
        for key in config.get("spark.conf") or {}
        if (typo := typo_of(key, known))
    ]
    if errors:
        raise TidehouseErrors(errors) if len(errors) > 1 else errors[0]


@contextlib.contextmanager
def at_its_line(config) -> Iterator[None]:
    """A setting Spark refuses when it starts is reported at its key's line in the project file, when its
    message names one key of ``spark.conf`` (:func:`refused_key`)."""
    from runtime.core.config import setting_key_location

    try:
        yield
    except TidehouseError as exc:
        key = refused_key(exc.message, config.get("spark.conf") or {})
        if exc.location is not None or key is None:
            raise
        where = setting_key_location(config, "spark.conf", key)
        raise TidehouseError(exc.code, exc.message, location=where, hint=exc.hint) from exc.__cause__


def refused_key(message: str, conf: dict) -> str | None:
    """The one key of ``conf`` that Spark's refusal ``message`` is about, or None. By the first rule that
    names exactly one: the key itself, in quotes (``The value 'abc' in the config
    "spark.sql.shuffle.partitions" is invalid``); its words after ``spark.``, two or more (spark-submit's
    ``Executor memory must be a positive number`` for ``spark.executor.memory``); its value, when it is not
    a number or a boolean (the JVM's ``Invalid maximum heap size: -Xmxlots`` for ``spark.driver.memory:
    lots``)."""
    text = message.lower()

    def value(key: str) -> str:
        v = str(conf[key]).strip().lower()
        return "" if len(v) < 3 or v in ("true", "false") or v.replace(".", "", 1).isdigit() else v

    rules = (
        lambda key: f'"{key.lower()}"' in text,
        lambda key: len(key.split(".")) > 2 and " ".join(key.lower().split(".")[1:]) in text,
        lambda key: bool(value(key)) and value(key) in text,
    )
    for rule in rules:
        named = [key for key in conf if rule(key)]
        if len(named) == 1:
            return named[0]
        if named:  # several keys: none can be told from the others
            return None
    return None
