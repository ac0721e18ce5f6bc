"""The Spark bridge: session factory, the ``tidehouse`` Python data source, exactly-once writers."""
