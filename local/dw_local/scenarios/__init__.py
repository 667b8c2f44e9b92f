"""Scenario replay and the detection benchmark (``docs/scenarios.md``): worlds written as data, nights of
faults and benign events, played through the real machinery and scored against an Elementary baseline."""
