"""Stage 07 (notebooks/07_bizfinbench.ipynb): BizFinBench's nine task families, answered and scored.

Reads: the BizFinBench JSONL files (`bizfin.source`: a local folder or the Hugging Face dataset).
Writes: `bizfin_items`, `bizfin_report`; BizFinBench Table 3 and Table 6 (`results`). `plan` prices a
run before any call.
"""
