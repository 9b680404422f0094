"""``python -m knowledge``: the one process entry point, the same as the ``knowledge`` console script
(`knowledge.cli.console`): ``python -m knowledge worker`` runs the maintenance worker,
``python -m knowledge --help`` lists the rest."""

import sys

from knowledge.cli.console import main

sys.exit(main())
