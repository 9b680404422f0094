"""The load, fault and signal engine behind ``scripts/stress_*.py`` and ``tests/stress``: it takes the
corpus it loads as an argument and ships no path into a checkout."""
