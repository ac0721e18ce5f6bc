"""The reader options a Spark file source takes, so a misspelt one is an error instead of a no-op.

Spark ignores an option its reader does not know (``maxFilesPerTriger: 1`` caps nothing, ``recursive: true``
reads no subfolder), so for the file formats Spark ships (json, csv, parquet, orc, text) an option must be
one of that format's, one every file source takes, or a key with a dot (``parquet.*``, ``fs.s3a.*``: Spark
passes those to the Hadoop configuration of the read). Names match in any case, as Spark's do. The lists
are Spark 4's: ``getAllOptions`` of the formats' option objects (``JSONOptions``, ``CSVOptions``, ...) and
``FileIndexOptions``, and the options of ``FileSourceOptions`` and of the streaming file source
(``FileStreamOptions``); ``tests/registry/test_reg_source_options.py`` checks them against the installed
Spark's. Other formats (``rate``, ``kafka``, a connector's) keep whatever options they are given.

Two options of the JSON and CSV readers are Tidehouse's: ``mode`` and ``columnNameOfCorruptRecord``. A
record that does not parse goes to the ODS table's quarantine (never dropped, never failing the flow), so a
source that sets either is refused rather than overridden. So is ``path``: a source's folder is its own key.
"""

from __future__ import annotations

from collections.abc import Mapping

from registry.specs.base import did_you_mean
from runtime.core.errors import ErrorCode

# FileIndexOptions, FileSourceOptions and FileStreamOptions: every file source
_FILES = (
    "basePath",
    "ignoreCorruptFiles",
    "ignoreInvalidPartitionPaths",
    "ignoreMissingFiles",
    "ignoredPathSegmentRegex",
    "modifiedAfter",
    "modifiedBefore",
    "pathGlobFilter",
    "recursiveFileLookup",
    "timeZone",
    "cleanSource",
    "discardCachedInputRatio",
    "fileNameOnly",
    "latestFirst",
    "maxBytesPerTrigger",
    "maxCachedFiles",
    "maxFileAge",
    "maxFilesPerTrigger",
    "sourceArchiveDir",
)
_JSON = (
    "allowBackslashEscapingAnyCharacter",
    "allowComments",
    "allowNonNumericNumbers",
    "allowNumericLeadingZeros",
    "allowSingleQuotes",
    "allowUnquotedControlChars",
    "allowUnquotedFieldNames",
    "charset",
    "columnNameOfCorruptRecord",
    "compression",
    "dateFormat",
    "dropFieldIfAllNull",
    "enableDateTimeParsingFallback",
    "encoding",
    "explodeEmbeddedArray",
    "ignoreNullFields",
    "inferTimestamp",
    "lineSep",
    "locale",
    "mode",
    "multiLine",
    "prefersDecimal",
    "pretty",
    "primitivesAsString",
    "samplingRatio",
    "singleVariantColumn",
    "sortKeys",
    "timeFormat",
    "timeZone",
    "timestampFormat",
    "timestampNTZFormat",
    "useUnsafeRow",
    "writeNonAsciiCharacterAsCodePoint",
)
_CSV = (
    "charToEscapeQuoteEscaping",
    "charset",
    "codec",
    "columnNameOfCorruptRecord",
    "columnPruning",
    "comment",
    "compression",
    "dateFormat",
    "delimiter",
    "emptyValue",
    "enableDateTimeParsingFallback",
    "encoding",
    "enforceSchema",
    "escape",
    "escapeQuotes",
    "extension",
    "header",
    "ignoreLeadingWhiteSpace",
    "ignoreTrailingWhiteSpace",
    "inferSchema",
    "inputBufferSize",
    "lineSep",
    "locale",
    "maxCharsPerColumn",
    "maxColumns",
    "mode",
    "multiLine",
    "nanValue",
    "negativeInf",
    "nullValue",
    "positiveInf",
    "preferDate",
    "quote",
    "quoteAll",
    "samplingRatio",
    "sep",
    "singleVariantColumn",
    "timeFormat",
    "timeZone",
    "timestampFormat",
    "timestampNTZFormat",
    "unescapedQuoteHandling",
)
_PARQUET = ("compression", "datetimeRebaseMode", "int96RebaseMode", "mergeSchema")
_ORC = ("compression", "mergeSchema")
_TEXT = ("compression", "encoding", "lineSep", "wholetext")
OPTIONS: dict[str, tuple[str, ...]] = {
    "json": _JSON + _FILES,
    "csv": _CSV + _FILES,
    "parquet": _PARQUET + _FILES,
    "orc": _ORC + _FILES,
    "text": _TEXT + _FILES,
}
# set by Tidehouse on a JSON or CSV source: its malformed records go to the quarantine table
OWN = ("mode", "columnNameOfCorruptRecord")


def option_problems(fmt: str, options: Mapping[str, str]) -> list[tuple[str, ErrorCode, str, str]]:
    """Each option of a ``fmt`` source that cannot apply, as ``(option, code, message, hint)``."""
    known = OPTIONS.get(fmt)
    if known is None:
        return []
    spelled = {k.lower() for k in known}
    own = {o.lower() for o in OWN} if fmt in ("json", "csv") else set()
    out = []
    for key in options:
        if key.lower() in own:
            out.append(
                (
                    key,
                    ErrorCode.SPEC_BAD_VALUE,
                    f"the option {key} is set by Tidehouse on a {fmt} source: a record that does not parse "
                    "goes to the quarantine of the ODS table that reads it (ods.<table>__quarantine), it is "
                    "neither dropped nor failing the flow",
                    "remove the option; `tidehouse query` reads the quarantined records",
                )
            )
        elif key.lower() == "path":
            out.append(
                (
                    key,
                    ErrorCode.SPEC_BAD_VALUE,
                    f"the option {key}: a source's folder is its key 'path'",
                    "move it there",
                )
            )
        elif "." not in key and key.lower() not in spelled:
            out.append(
                (
                    key,
                    ErrorCode.SPEC_UNKNOWN_KEY,
                    f"unknown option '{key}' of a {fmt} source: Spark's {fmt} reader would ignore it",
                    did_you_mean(key, known) or f"see Spark's {fmt} data source options",
                )
            )
    return out
