"""The shipped relevance models: written by ``scripts/fit_relevance.py --write`` from
``scripts/collect_relevance.py``'s training data (docs-train and SciFact train; never docs-dev
or SciFact test). Do not edit by hand: refit."""

from knowledge.relevance import RelevanceModel

LEXICAL = RelevanceModel(
    name='lexical',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'missing', 'doc_bm25', 'doc_coverage', 'doc_hits',
    ),
    weights=(
        -1.38115, 0.149286, -0.0247539, 0.586928, -2.52933, 0.0741299, -0.250562, 1.22464, -0.22749,
        1.14345, 1.04968, -0.162154,
    ),
    bias=-6.86319,
    means=(
        0.268694, 0.417091, 0.0914798, 0.339803, 0.267728, 0.360942, 0.00357909, 1.74563, 0.0764353,
        0.295442, 0.450432, 0.0518048,
    ),
    scales=(
        0.183171, 0.268845, 0.1728, 0.239233, 0.158441, 0.238746, 0.0530229, 0.502955, 0.175851, 0.20738,
        0.29175, 0.0723105,
    ),
)

FUSED = RelevanceModel(
    name='fused',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'missing', 'doc_bm25', 'doc_coverage', 'doc_hits', 'cosine', 'cosine_gap', 'doc_cosine',
    ),
    weights=(
        -1.39758, 0.280457, -0.144143, 0.503522, -2.03854, 0.035624, -0.343911, 0.500025, -0.296653,
        0.803062, 0.764205, -0.359778, 0.442079, -1.36354, 0.109065,
    ),
    bias=-7.86214,
    means=(
        0.191122, 0.298051, 0.0702249, 0.247668, 0.334713, 0.468604, 0.00700376, 1.7327, 0.0862282,
        0.231192, 0.355268, 0.0369384, 0.295555, 0.245484, 0.322801,
    ),
    scales=(
        0.182195, 0.273185, 0.150717, 0.236544, 0.191714, 0.277727, 0.0785623, 0.502556, 0.190586, 0.209438,
        0.30243, 0.0520597, 0.152402, 0.144405, 0.157058,
    ),
)

#: The relevance floor (the fused model's; the lexical one's is within a hundredth): the largest
#: threshold that empties at most 1.5% of the answerable
#: training questions (docs-train).
MIN_RELEVANCE = 0.025
#: The floor of the second and third passage: the highest that costs at most 1% of
#: the training questions' recall@3.
MIN_RELEVANCE_MORE = 0.04
