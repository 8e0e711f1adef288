"""The reward margin by token (`train.margin_by_token`) against transformers' own loss: the summed
implicit reward of an answer is beta x (log pi - log pi_ref) over its tokens, and the sequence
log-probability is -(mean cross-entropy) x tokens from the model's `labels` loss (a path that shares
no code with ours). A tiny Llama with a random LoRA adapter; tolerance 1e-4 (float32 sums)."""
from __future__ import annotations

import pytest
from tiny_lm import write_tiny_lm

pytestmark = pytest.mark.slow   # a tiny model, PEFT and two dozen forward passes


def seq_logp_by_hf_loss(model, tok, rec, side) -> float:
    import torch

    prompt = tok.apply_chat_template(rec["prompt"], add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template(rec["prompt"] + rec[side], tokenize=False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    start = next(i for i, (a, _) in enumerate(enc["offset_mapping"]) if a >= len(prompt))
    ids = torch.tensor([enc["input_ids"]])
    labels = ids.clone()
    labels[0, :start] = -100
    with torch.no_grad():
        loss = model(input_ids=ids, labels=labels).loss
    return -float(loss) * (ids.shape[1] - start)


def test_margin_by_token_matches_the_models_own_loss(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finlib.finbias.dpo import train as tr

    path = write_tiny_lm(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    recs = [{"report_id": "a", "prompt": [{"role": "user", "content": "Sales fell 20 percent."}],
             "chosen": [{"role": "assistant", "content": '{"answer": "bearish", "reason": "sales fell"}'}],
             "rejected": [{"role": "assistant", "content": '{"answer": "bullish", "reason": "sales fell"}'}]}]
    m = tr.margin_by_token(model, tok, recs, beta=0.1).iloc[0]
    reward = {}
    for side in ("chosen", "rejected"):
        pol = seq_logp_by_hf_loss(model, tok, recs[0], side)
        with model.disable_adapter():
            ref = seq_logp_by_hf_loss(model, tok, recs[0], side)
        reward[side] = 0.1 * (pol - ref)
    assert m["chosen_reward"] == pytest.approx(reward["chosen"], abs=1e-4)
    assert m["margin"] == pytest.approx(reward["chosen"] - reward["rejected"], abs=1e-4)
    assert abs(m["margin"]) > 1e-4                                   # the adapter does move the answers
    # the sides differ only in the rating word: every token after it differs by context alone
    rating, rest = m["rating_margin"], m["margin"] - m["rating_margin"]
    assert rating != 0 and tr.rating_margin_share(tr.margin_by_token(model, tok, recs, 0.1)).share == \
        pytest.approx(abs(rating) / (abs(rating) + abs(rest)))
