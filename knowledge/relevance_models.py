"""The shipped relevance models: written by ``scripts/fit_relevance.py --write`` from
``scripts/collect_relevance.py``'s training data (docs-train and SciFact train; never docs-dev
or SciFact test). Do not edit by hand: refit."""

from knowledge.relevance import RelevanceModel

LEXICAL = RelevanceModel(
    name='lexical',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'missing', 'doc_bm25', 'doc_coverage',
    ),
    weights=(
        -1.07069, 0.108666, -0.0158661, 0.552623, -2.41443, 0.00931101, -0.708808, 1.2554, -0.261252,
        0.828225, 1.05346,
    ),
    bias=-6.85437,
    means=(
        0.268694, 0.417091, 0.0914798, 0.339803, 0.267728, 0.360942, 0.00357909, 1.74563, 0.0764353,
        0.295442, 0.450432,
    ),
    scales=(
        0.183171, 0.268845, 0.1728, 0.239233, 0.158441, 0.238746, 0.0530229, 0.502955, 0.175851, 0.20738,
        0.29175,
    ),
)

FUSED = RelevanceModel(
    name='fused',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'missing', 'doc_bm25', 'doc_coverage', 'cosine', 'cosine_gap', 'doc_cosine',
    ),
    weights=(
        -1.20768, 0.347264, -0.169857, 0.485366, -1.95813, -0.0330507, -0.761011, 0.5505, -0.341532,
        0.490304, 0.75088, 0.918003, -1.26066, -0.3964,
    ),
    bias=-7.82284,
    means=(
        0.191122, 0.298051, 0.0702249, 0.247668, 0.334713, 0.468604, 0.00700376, 1.7327, 0.0862282,
        0.231192, 0.355268, 0.295555, 0.245484, 0.322801,
    ),
    scales=(
        0.182195, 0.273185, 0.150717, 0.236544, 0.191714, 0.277727, 0.0785623, 0.502556, 0.190586, 0.209438,
        0.30243, 0.152402, 0.144405, 0.157058,
    ),
)

#: The relevance floor (the fused model's; the lexical one's is within a hundredth): the largest
#: threshold that empties at most 1.5% of the answerable
#: training questions (docs-train).
MIN_RELEVANCE = 0.020
#: The floor of the second and third passage: the highest that costs at most 1% of
#: the training questions' recall@3.
MIN_RELEVANCE_MORE = 0.03
