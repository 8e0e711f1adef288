"""One DPO step of a tiny Llama through stage 05's own `train.train_dpo` under the launcher it is run
with (FSDP in `test_fsdp_saves_adapter.py`), then: rank 0 finds the LoRA adapter written by the
Trainer, with trained (non-zero) B matrices. Usage: accelerate launch ... tests/gpu/fsdp_adapter_job.py OUT_DIR"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "finbias"))  # tiny_lm


def main(out: Path) -> int:
    import torch
    from safetensors.torch import load_file
    from tiny_lm import write_tiny_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finlib.finbias.dpo import train as tr

    path = write_tiny_lm(out / "model") if not (out / "model" / "config.json").is_file() else out / "model"
    trip = pd.DataFrame({"report_id": ["a", "b"], "prompt_text": ["We rate Acme a Buy. Sales fell 20 percent."] * 2,
                         "chosen": ['{"answer": "bearish", "reason": "sales fell"}'] * 2,
                         "rejected": ['{"answer": "bullish", "reason": "sales fell"}'] * 2})
    records = tr.to_records(trip, lambda text: [{"role": "user", "content": text}])
    dp = {"max_length_cap": 512, "beta": 0.1, "learning_rate": 1e-2, "max_steps": 1, "batch_size": 1,
          "grad_accum": 1, "gradient_checkpointing": False,
          "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}}
    res = tr.train_dpo(AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16), AutoTokenizer.from_pretrained(path),
                       records, out / "dpo", dp, seed=0, dtype="bfloat16")
    if not res.is_main:
        return 0
    weights = load_file(str(res.adapter_dir / "adapter_model.safetensors"))
    b = [w for k, w in weights.items() if "lora_B" in k]
    assert b and all(float(w.abs().sum()) > 0 for w in b), "adapter saved without trained lora_B weights"
    print(f"FSDP adapter saved: {len(weights)} tensors, sha256 {res.adapter_sha256}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
