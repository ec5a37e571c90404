"""Black-box contract tests: derived only from the external interface (docs/interface.md), run against the real product.

The product is driven as users drive it: the `kuberhealthy` console script (testbed/daemons/process.py), its HTTP
endpoints and the Kubernetes API. Neither these tests nor the test bed modules they use import
`kuberhealthy` (tests/unit/test_layout.py checks it).
"""
