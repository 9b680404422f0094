"""The semantic arm (issue 11): passage windows embedded by a packaged MiniLM in a supervised child
process, stored in pgvector beside the chunks, searched under the lexical arm's isolation predicates
and fused with it by reciprocal-rank fusion.

Whether it is on by default is a measurement, not a preference: `MEASURED_DEFAULT` follows
``scripts/eval_retrieval.py --semantic`` (on only if it lifts docs-dev recall@3 by at least 5 points
without lowering SciFact nDCG@10; the numbers are in docs/retrieval.md).
"""

from __future__ import annotations

from knowledge.errors import ConfigurationError
from knowledge.semantic.encoder import available

#: Decided by scripts/eval_retrieval.py (see docs/retrieval.md, "The semantic arm").
MEASURED_DEFAULT = True


def enabled(setting: bool | None) -> bool:
    """Whether a service with this ``semantic_arm`` setting runs the arm. True without the extra
    installed is a `ConfigurationError`; None follows `MEASURED_DEFAULT` where the extra is installed."""
    if setting is None:
        return MEASURED_DEFAULT and available()
    if setting and not available():
        raise ConfigurationError(message="semantic_arm is on but the semantic extra is not installed "
                                         "(pip install '.[semantic]')")
    return setting
