"""The lake: Iceberg catalog, exactly-once tiering of hot tables, its scheduler and maintenance, union
reads."""
