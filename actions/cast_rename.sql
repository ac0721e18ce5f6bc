/*---
name: cast_rename
description: >
  Convert one column to another type and give it a new name (it moves to the end of the row). The target
  type is a Spark type string such as "decimal(10,2)", "timestamp" or "int"; it is bound as a parameter
  and parsed as a type, never as SQL. Values that do not convert become NULL (like `try_cast`). To keep
  the name, set `rename_to` to the column's own name.
inputs: [rows]
params:
  column:
    type: string
    description: The column to convert.
  to_type:
    type: string
    default: string
    description: The Spark type to convert to (e.g. "double", "decimal(10,2)", "timestamp").
  rename_to:
    type: string
    description: The converted column's name.
---*/
SELECT * EXCEPT (IDENTIFIER(:column)),
       try_variant_get(CAST(IDENTIFIER(:column) AS VARIANT), '$', :to_type) AS IDENTIFIER(:rename_to)
FROM rows
