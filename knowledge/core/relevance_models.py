"""The shipped relevance models: written by ``scripts/fit_relevance.py --write`` from
``scripts/collect_relevance.py``'s training data (docs-train and SciFact train; never docs-dev
or SciFact test). Do not edit by hand: refit."""

from knowledge.core.relevance import RelevanceModel

LEXICAL = RelevanceModel(
    name='lexical',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'doc_bm25', 'doc_coverage',
    ),
    weights=(
        -1.07306, 0.534353, 0.0398404, -0.157869, -2.70984, 0.284821, 0.866585, 0.769799,
    ),
    bias=-6.55586,
    means=(
        0.268694, 0.417091, 0.0914798, 0.339803, 0.267728, 0.360942, 0.295442, 0.450432,
    ),
    scales=(
        0.183171, 0.268845, 0.1728, 0.239233, 0.158441, 0.238746, 0.20738, 0.29175,
    ),
)

FUSED = RelevanceModel(
    name='fused',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'doc_bm25', 'doc_coverage',
        'cosine', 'cosine_gap', 'doc_cosine',
    ),
    weights=(
        -1.48223, 0.78934, -0.171894, 0.273932, -2.28396, 0.256458, 0.480652, 0.679003, 1.33244, -1.01354,
        -0.492123,
    ),
    bias=-7.73358,
    means=(
        0.191122, 0.298051, 0.0702249, 0.247668, 0.334713, 0.468604, 0.231192, 0.355268, 0.295555, 0.245484,
        0.322801,
    ),
    scales=(
        0.182195, 0.273185, 0.150717, 0.236544, 0.191714, 0.277727, 0.209438, 0.30243, 0.152402, 0.144405,
        0.157058,
    ),
)

#: The relevance floor (the fused model's): the largest
#: threshold that empties at most 1.5% of the answerable
#: training questions (docs-train).
MIN_RELEVANCE = 0.025
#: The floor of the passages after the first: the highest that costs at most 0.01 of
#: recall@3 on docs-train and of nDCG@10 on SciFact train against none (the first floor
#: only empties a search whose best passage is under it).
MIN_RELEVANCE_MORE = 0.010
