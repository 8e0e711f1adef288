"""finlib: the library behind the numbered notebooks (Fin-Bias and BizFinBench).

Each notebook `notebooks/NN_<stage>.ipynb` has one home module here (00 data, 01 labels,
02 perturb, 03 llm, 04 scoring); shared names live in `finlib.core.vocab`, run paths and
knobs in `finlib.core.config`, on-disk artifacts in `finlib.core.artifacts`, tables in `finlib.core.tables`.
"""
from finlib.core.vocab import CONDITIONS, RATINGS, SECTORS, Condition, Rating

__all__ = ["CONDITIONS", "RATINGS", "SECTORS", "Condition", "Rating"]
__version__ = "0.1.0"
