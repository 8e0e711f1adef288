"""finlib: the helper library behind the numbered notebooks (Fin-Bias and BizFinBench).

Each notebook `notebooks/NN_<stage>.ipynb` has one home module here (00 data, 01 labels,
02 perturb, 03 llm, 04 scoring); shared names live in `finlib.schema`, run paths and
knobs in `finlib.config`, on-disk artifacts in `finlib.artifacts`, tables in `finlib.tables`.
"""
from finlib.schema import CONDITIONS, RATINGS, SECTORS, Condition, Rating

__all__ = ["CONDITIONS", "RATINGS", "SECTORS", "Condition", "Rating"]
__version__ = "0.1.0"
