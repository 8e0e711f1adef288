"""finlib: the library behind the numbered notebooks (Fin-Bias and BizFinBench).

Each notebook `notebooks/NN_<stage>.ipynb` has a home module (the README's pipeline table):
`finlib.finbias` for Fin-Bias (00 data, 01 labels, 02 perturb, 03 inference, 04 scoring, 05 dpo,
06 figures, 09 beyond the paper), `finlib.bizfin` for BizFinBench (07 stage, 08 judge_stage);
`finlib.llm` holds the models both papers call, `finlib.core` params, runner, artifacts, tables,
statistics and the report. Shared names live in `finlib.core.vocab`.
"""
from finlib.core.vocab import CONDITIONS, RATINGS, SECTORS, Condition, Rating

__all__ = ["CONDITIONS", "RATINGS", "SECTORS", "Condition", "Rating"]
__version__ = "0.1.0"
