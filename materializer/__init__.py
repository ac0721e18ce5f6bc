"""Tidehouse materializer: flow -> networkx DAG -> plan -> PySpark Structured Streaming queries per layer."""
