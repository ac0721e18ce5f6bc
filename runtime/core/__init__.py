"""The core layer: errors with stable codes, settings, configuration, durations, places (URIs), strict YAML.

Every other part of Tidehouse may import the core; the core imports nothing of Tidehouse outside itself
(the layer order is in docs/architecture.md and enforced by tests/test_layers.py).
"""
