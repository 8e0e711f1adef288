"""Stage 05: DPO against herding (Fin-Bias §5.2, Table 8).

- `triplets`: leakage-safe split, teachers (template / any registry model), (x, y_w, y_l) triplets.
- `train`: TRL DPOTrainer + PEFT LoRA, the max-length guard, per-step log, adapter hash.
- `evaluate`: base vs tuned on the test split through stages 03/04's code; Table 8.
- `stage`: params, the entry point (`run`, `summary`), used by notebook 05, `make dpo`, `python -m finlib.finbias.dpo`.
"""
