"""finlib: the library behind the numbered notebooks (Fin-Bias and BizFinBench).

Layers, each importing only the ones below it (`tests/repository/test_import_graph.py` holds this):

- `finlib.core`      params and their schema, run configuration, artifacts, tables, statistics
- `finlib.llm`       the models both papers call: registry, engine, response store, backends, reply reading
- `finlib.finbias`   Fin-Bias, one folder per stage (00 data, 01 labels, 02 perturb, 03 inference,
                     04 scoring, 05 dpo, 06 figures, 09 beyond); `finlib.bizfin` BizFinBench (07 benchmark,
                     08 iterajudge). Each paper owns its prompts, parsers, vocabulary and artifact list.
- `finlib.pipeline`  the runner and its manifest, the plan and preflight, the HTML report
- `finlib.rehearsal` `make rehearse` and the simulated and stub servers

Each notebook `notebooks/NN_<stage>.ipynb` calls its stage module (`finlib.<paper>.<stage>.stage`).
"""
__version__ = "0.1.0"
