/*---
name: ingest
description: >
  Land a source as-is in the ODS layer (a pass-through). Source columns keep their names and types; the
  source's schema comes from the flow's `sources:` entry, and records that do not parse go to the table's
  quarantine (`<layer>.<table>__quarantine`), not here.
inputs: [raw]
---*/
SELECT * FROM raw
