"""Pure: what decides, never what does — normalize, scan, chunk, prepare, rank, relevance, render,
budget, the trace and the turn's assembly. No database, event loop, process or clock is imported
here (the `core-is-pure` import contract in pyproject.toml holds it); hypothesis tests it."""
