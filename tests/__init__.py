"""The tests mirror the package (one folder per subpackage), plus ``gates/`` (the spec's twelve hard
gates) and ``stress/``; the package-level tests (service, host loop, exports, import contracts,
wheel, README) sit at the top."""
