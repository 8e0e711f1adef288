"""Evaluation keeps the adapter as trained: the local backend attaches the LoRA adapter unmerged
(float32 adapter weights), so the tuned model's log-probabilities are those of the unmerged model
in float32 -- also when the base runs in bfloat16, where merging would round a small update away.

The reference is PEFT's own unmerged model in float32, built here without the backend's code; the
adapter is small (its update is ~1e-3 of the weights it touches, below bfloat16's resolution).
Tolerance: float32 evaluation vs the float32 reference, 1e-5 in log-probability (float32 rounding
of a 2-layer model; the adapter moves them by more than 1e-4). In a bfloat16 evaluation the adapter
stays unmerged with its float32 weights bit for bit as saved (a bfloat16 merge, the seeded fault,
would round an update this small away); its log-probabilities then carry bfloat16's own rounding,
the same as the base model's.
"""
from __future__ import annotations

import pytest
from tiny_lm import write_tiny_lm

from finlib.finbias.prompts import FINBIAS_LABELS

pytestmark = pytest.mark.slow   # three tiny-model loads, ~10-30 s on 2 shared cores

PROMPT = [{"role": "user", "content": "We rate Acme a Buy. Sales fell 20 percent."}]
UPDATE_SCALE = 1e-3   # ||BA|| relative to ||W|| on the adapted modules: a "small adapter"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(spec, cache root, adapter folder): a tiny Llama and a small random LoRA adapter on disk."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from finlib.llm.spec import ModelSpec

    root = tmp_path_factory.mktemp("tiny")
    path = write_tiny_lm(root / "model")
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))
    with torch.no_grad():
        for mod in peft.modules():
            if hasattr(mod, "lora_B") and "default" in getattr(mod, "lora_B", {}):
                w = mod.base_layer.weight
                delta = mod.lora_B["default"].weight @ mod.lora_A["default"].weight * mod.scaling["default"]
                mod.lora_B["default"].weight.mul_(UPDATE_SCALE * w.norm() / delta.norm())
    peft.save_pretrained(root / "adapter")
    spec = ModelSpec(name="tiny", backend="local", model_id="tiny", supports_system=True, context_length=2048,
                     price_input_per_m=0.0, price_output_per_m=0.0, hf_path=str(path))
    return spec, root, root / "adapter"


def reference_label_logprobs(spec, adapter, label_ids, seq):
    """PEFT's unmerged model in float32 (no code of the backend): next-token log-probs of the labels."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(spec.hf_path, dtype=torch.float32)
    model = base if adapter is None else PeftModel.from_pretrained(base, str(adapter))
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
    return torch.log_softmax(logits, -1)[label_ids]


def backend_label_logprobs(spec, root, dtype, adapter):
    from finlib.llm.local_backend import LocalModel

    m = LocalModel(spec, root, dtype=dtype, adapter=adapter, labels=FINBIAS_LABELS)
    seq = m.tok(m.prompt_text(PROMPT, "score"), add_special_tokens=False)["input_ids"]
    return m.label_logprobs([seq])[0], m.label_ids, seq


def adapter_as_trained(spec, root, adapter) -> bool:
    """In a bfloat16 evaluation: every LoRA module present, unmerged, its weights float32 and equal to
    the saved file (a bfloat16 merge would round an update below bfloat16's resolution away)."""
    import torch
    from safetensors.torch import load_file

    from finlib.llm.local_backend import LocalModel

    saved = load_file(str(adapter / "adapter_model.safetensors"))
    m = LocalModel(spec, root, dtype="bfloat16", adapter=adapter, labels=FINBIAS_LABELS)
    loaded = {n: p for n, p in m.model.named_parameters() if "lora_" in n}
    if len(loaded) != len(saved) or any(getattr(mod, "merged", False) for mod in m.model.modules()):
        return False
    by_suffix = {n.replace(".default", ""): p for n, p in loaded.items()}
    return all(any(k.endswith(s.removeprefix("base_model.model.")) and p.dtype == torch.float32
                   and torch.equal(p.detach(), w) for k, p in by_suffix.items()) for s, w in saved.items())


def test_float32_evaluation_equals_the_unmerged_float32_model(tiny):
    spec, root, adapter = tiny
    got, ids, seq = backend_label_logprobs(spec, root, "float32", adapter)
    ref = reference_label_logprobs(spec, adapter, ids, seq)
    base = reference_label_logprobs(spec, None, ids, seq)
    assert (ref - base).abs().max() > 1e-4          # the adapter does change the answer's probabilities
    assert (got - ref).abs().max() < 1e-5


def test_bfloat16_evaluation_keeps_the_adapter_unmerged_in_float32(tiny):
    spec, root, adapter = tiny
    assert adapter_as_trained(spec, root, adapter)


def test_a_bfloat16_merge_would_be_caught(tiny, monkeypatch):
    """Seeded fault: the backend merges the adapter into the bfloat16 weights."""
    from finlib.llm import local_backend

    spec, root, adapter = tiny
    real = local_backend.attach_adapter
    monkeypatch.setattr(local_backend, "attach_adapter", lambda model, a: real(model, a).merge_and_unload())
    assert not adapter_as_trained(spec, root, adapter)


def test_generation_from_a_prefilled_answer_stops_at_the_stop_string(tiny):
    """Stage 05's named JSON-prefix option in the local backend: the prompt ends with the answer's
    start, the reply is that start + the continuation, cut after the first stop string (not marked
    truncated), and without the stop string it runs to max_new_tokens (truncated)."""
    from finlib.llm.local_backend import LocalModel
    from finlib.llm.store import Request

    spec, root, _ = tiny
    m = LocalModel(spec, root, dtype="float32", labels=FINBIAS_LABELS)

    def reply(params):
        req = Request(key="k", backend="local", model="tiny", messages=PROMPT, params=params, mode="generate")
        return next(iter(m.generate([req])))[0]

    free = reply({"max_new_tokens": 40, "temperature": 0, "answer_prefix": '{"answer": "'})
    assert free.raw_text.startswith('{"answer": "') and free.truncated_output
    stop = free.raw_text[len('{"answer": "'):][5]          # a character the greedy reply writes (6th)
    cut = reply({"max_new_tokens": 40, "temperature": 0, "answer_prefix": '{"answer": "', "stop": [stop]})
    assert cut.raw_text.endswith(stop) and not cut.truncated_output
    assert free.raw_text.startswith(cut.raw_text) and len(cut.raw_text) < len(free.raw_text)
    first = reply({"max_new_tokens": 2, "temperature": 0, "answer_prefix": '{"answer": "', "label_first": True})
    assert any(first.raw_text[len('{"answer": "'):].startswith(m.tok.decode([i])) for i in m.label_ids)
