"""Project scaffolding: the templates ``tidehouse init`` writes and the sample data generator."""
