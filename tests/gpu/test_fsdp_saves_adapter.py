"""FSDP saves the LoRA adapter through the Trainer (params/accelerate/fsdp.yaml, FULL_STATE_DICT): one
DPO step of a tiny Llama with stage 05's `train_dpo` under `accelerate launch`, on every GPU of the
machine. Skipped without a GPU (the CPU machines cannot run FSDP's CUDA path). The command, from the
repository root (docs/dpo.md):

    PYTHONPATH=$PWD python -m pytest tests/gpu -q -p no:cacheprovider
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: FSDP runs on GPUs only")]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("state_dict, saves", [("FULL_STATE_DICT", True), ("SHARDED_STATE_DICT", False)])
def test_fsdp_saves_the_adapter_through_the_trainer(tmp_path, state_dict, saves):
    """FULL_STATE_DICT (the config as shipped) writes the adapter; SHARDED_STATE_DICT (the seeded
    fault) writes none and the stage says so, naming the key."""
    config = (ROOT / "params" / "accelerate" / "fsdp.yaml").read_text()
    cfg = tmp_path / "fsdp.yaml"
    cfg.write_text(config.replace("fsdp_state_dict_type: FULL_STATE_DICT", f"fsdp_state_dict_type: {state_dict}"))
    n = max(torch.cuda.device_count(), 1)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), "--num_processes", str(n),
           str(ROOT / "tests" / "gpu" / "fsdp_adapter_job.py"), str(tmp_path / "out")]
    out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=900)
    text = out.stdout + out.stderr
    adapter = tmp_path / "out" / "dpo" / "adapter" / "adapter_model.safetensors"
    if saves:
        assert out.returncode == 0 and "FSDP adapter saved" in text and adapter.is_file(), text[-3000:]
    else:
        assert out.returncode != 0 and "FULL_STATE_DICT" in text and not adapter.is_file(), text[-3000:]
