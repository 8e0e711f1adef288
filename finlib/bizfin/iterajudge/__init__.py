"""Stage 08 (notebooks/08_iterajudge.ipynb): IteraJudge and the judge-calibration study.

Reads: `bizfin_items` (stage 07: the judge tasks' answers).
Writes: `iterajudge_trajectories`, `iterajudge_results`, `judge_calibration_scores`, `judge_calibration`,
`iterajudge_report`; BizFinBench Table 4. `judge` holds the vanilla and contrastive judges, `rubrics`
which rubric a run uses, `calibration` the study on the constructed `reference_set`.
"""
