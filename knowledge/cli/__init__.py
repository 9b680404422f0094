"""The operator's command line (`knowledge.cli.app`), and the console script in front of it
(`knowledge.cli.console`). Shell: it drives the service or reads the catalog; it holds no rule of
its own. This file imports nothing, so the console installs its signal handlers before the
command line (and everything it imports) loads."""
