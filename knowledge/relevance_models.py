"""The shipped relevance models: written by ``scripts/fit_relevance.py --write`` from
``scripts/collect_relevance.py``'s training data (docs-train and SciFact train; never docs-dev
or SciFact test). Do not edit by hand: refit."""

from knowledge.relevance import RelevanceModel

LEXICAL = RelevanceModel(
    name='lexical',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'doc_bm25', 'doc_coverage', 'doc_hits',
    ),
    weights=(
        -1.68414, 0.133025, -0.0363077, 0.522103, -2.78688, 0.144384, -0.24543, 0.941565, 1.24473, 1.15504,
        -0.111286,
    ),
    bias=-6.83908,
    means=(
        0.288483, 0.442976, 0.101387, 0.355609, 0.293442, 0.382413, 0.00346632, 1.80891, 0.315403, 0.475775,
        0.0459821,
    ),
    scales=(
        0.188135, 0.273983, 0.181292, 0.24854, 0.156601, 0.240514, 0.0513618, 0.515925, 0.214477, 0.297989,
        0.0648483,
    ),
)

FUSED = RelevanceModel(
    name='fused',
    features=(
        'bm25', 'coverage', 'heading', 'proximity', 'bm25_gap', 'coverage_gap', 'penalty', 'terms',
        'doc_bm25', 'doc_coverage', 'doc_hits', 'cosine', 'cosine_gap', 'doc_cosine',
    ),
    weights=(
        -1.56146, 0.33112, -0.149012, 0.44894, -2.21123, 0.122036, -0.333427, 0.316178, 0.77556, 0.878111,
        -0.271017, 0.182029, -1.62339, 0.182932,
    ),
    bias=-7.97317,
    means=(
        0.212003, 0.327071, 0.0803434, 0.26835, 0.365837, 0.495325, 0.00638926, 1.80367, 0.25058, 0.380043,
        0.0318465, 0.327751, 0.268008, 0.352024,
    ),
    scales=(
        0.188293, 0.279632, 0.160337, 0.243978, 0.188942, 0.277715, 0.0742716, 0.516229, 0.218646, 0.311834,
        0.0474862, 0.1493, 0.147977, 0.157034,
    ),
)

#: The relevance floor: the largest threshold that empties at most 1% of the training
#: questions whose top 10 holds an answer.
MIN_RELEVANCE = 0.04
#: The floor of the second and third passage: the highest that costs at most 1% of
#: the training questions' recall@3.
MIN_RELEVANCE_MORE = 0.04
