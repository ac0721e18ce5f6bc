"""Tidehouse registry: strict flow and action specs, parsing with located errors, the versioned store."""
