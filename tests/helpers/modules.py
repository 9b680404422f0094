"""Every module of the package, imported (for tests that inspect what the modules define)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import knowledge

#: Modules that act when run, not when imported — still importable — are all included; these
#: are process entry points whose import would run them.
ENTRY_POINTS = {"knowledge.__main__"}


def all_modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.walk_packages(knowledge.__path__, "knowledge.")]
    return [importlib.import_module(name) for name in sorted(names) if name not in ENTRY_POINTS]
