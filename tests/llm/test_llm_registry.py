"""params/models.yaml: the shipped registry, and validation errors that name record and field."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from finlib.llm.registry import RegistryError, load_registry, select_models
from finlib.llm.spec import MissingKeyError

ROOT = Path(__file__).resolve().parents[2]
PAPER_MODELS = 19  # Fin-Bias Section 4.1 / Tables 4-7
TABLE4 = ROOT / "finlib" / "reference" / "paper_tables" / "finbias_table4_herding_with_without.csv"


def finbias_models(registry) -> list:
    """Records whose paper_name is a row of Fin-Bias Table 4 (the registry also holds BizFinBench's grid)."""
    import pandas as pd

    rows = {m.lower() for m in pd.read_csv(TABLE4, comment="#")["model"]}
    return [s for s in registry.values() if s.paper_name and s.paper_name.lower() in rows]


@pytest.fixture(scope="module")
def registry():
    return load_registry(ROOT / "params" / "models.yaml")


def test_shipped_registry_has_paper_models_and_embedded(registry):
    assert "smollm2-135m" in registry and registry["smollm2-135m"].backend == "local"
    paper = finbias_models(registry)
    assert len(paper) == PAPER_MODELS and all(s.backend == "openai" for s in paper)
    for s in paper:  # the authors' decoding (their run_api.py / run_vllm.py)
        assert s.sampling["temperature"] == 1.0 and s.sampling["top_p"] == 1.0 and s.max_new_tokens == 4096
    nosys = {s.name for s in paper if not s.supports_system}
    assert {s.name for s in paper if s.name.startswith(("gemma", "mistral"))} == nosys


def test_shipped_registry_holds_no_secret_values():
    text = (ROOT / "params" / "models.yaml").read_text()
    assert "sk-" not in text
    raw = yaml.safe_load(text)
    for rec in raw["models"]:
        env = rec.get("api_key_env")
        assert env is None or env.isupper(), rec["name"]


def write(tmp_path: Path, models: list[dict], defaults: dict | None = None) -> Path:
    p = tmp_path / "models.yaml"
    p.write_text(yaml.safe_dump({"defaults": defaults or {"sampling": {"temperature": 1.0, "top_p": 1.0}},
                                 "models": models}))
    return p


GOOD = {"name": "m1", "backend": "openai", "model_id": "x/y", "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": "M1_KEY", "supports_system": True, "context_length": 4096,
        "price_input_per_m": 1.0, "price_output_per_m": 2.0}


def test_good_record_loads(tmp_path):
    spec = load_registry(write(tmp_path, [GOOD]))["m1"]
    assert spec.cost(1_000_000, 500_000) == pytest.approx(2.0)
    assert spec.cost(1_000_000, 0, discount=0.5) == pytest.approx(0.5)


@pytest.mark.parametrize("change, field", [
    ({"backend": "grpc"}, "backend"),
    ({"context_length": "4k"}, "context_length"),
    ({"context_length": 0}, "context_length"),
    ({"supports_system": "yes"}, "supports_system"),
    ({"price_input_per_m": -1}, "price_input_per_m"),
    ({"base_url": "localhost:8000"}, "base_url"),
    ({"api_key_env": "sk-abc123456"}, "api_key_env"),
    ({"api_key": "sk-abc123456"}, "api_key"),
    ({"temprature": 0.5}, "temprature"),
    ({"sampling": {"top_p": 1.0}}, "sampling.temperature"),
    ({"sampling": {"temperature": 1.0, "top_p": 1.5}}, "sampling.top_p"),
    ({"concurrency": 0}, "concurrency"),
    ({"max_tokens_param": "max_len"}, "max_tokens_param"),
])
def test_bad_record_names_record_and_field(tmp_path, change, field):
    with pytest.raises(RegistryError) as err:
        load_registry(write(tmp_path, [{**GOOD, **change}]))
    msg = str(err.value)
    assert "'m1'" in msg and f"'{field}'" in msg and "models.yaml" in msg


def test_missing_field_and_duplicates(tmp_path):
    rec = dict(GOOD)
    del rec["model_id"]
    with pytest.raises(RegistryError, match="'model_id': missing"):
        load_registry(write(tmp_path, [rec]))
    with pytest.raises(RegistryError, match="duplicate"):
        load_registry(write(tmp_path, [GOOD, GOOD]))
    local = {k: v for k, v in GOOD.items() if k not in ("base_url", "api_key_env")} | {"backend": "local"}
    with pytest.raises(RegistryError, match="gguf_package"):
        load_registry(write(tmp_path, [local]))


def test_unknown_model_name_lists_known(registry):
    with pytest.raises(RegistryError, match="unknown model.*gpt-9"):
        select_models(registry, ["gpt-9"])


def test_missing_key_names_the_variable(tmp_path, monkeypatch):
    spec = load_registry(write(tmp_path, [GOOD]))["m1"]
    monkeypatch.delenv("M1_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="M1_KEY"):
        spec.api_key()
    monkeypatch.setenv("M1_KEY", "dummy")
    assert spec.api_key() == "dummy"
    assert os.environ["M1_KEY"] == "dummy"


def test_inference_params_are_checked(tmp_run):
    from finlib.core.config import ConfigError
    from finlib.finbias.inference.stage import inference_params

    inf = inference_params(tmp_run)
    assert inf["mode"] in ("score", "generate") and inf["score_batch_size"] >= 1
    for key, bad in (("mode", "vote"), ("batch_size", 0), ("max_input_tokens", "2k"), ("budget_usd", -1)):
        saved = tmp_run.params["inference"].get(key)
        tmp_run.params["inference"][key] = bad
        with pytest.raises(ConfigError, match=f"inference.{key}"):
            inference_params(tmp_run)
        tmp_run.params["inference"][key] = saved


def test_every_paper_model_has_a_paper_name_and_only_embedded_models_are_plumbing(registry):
    named = {s.name: s.paper_name for s in finbias_models(registry)}
    assert len(named) == PAPER_MODELS
    assert named["gpt-5.1"] == "GPT-5" and named["llama-3.1-8b-it"] == "Meta-Llama-3.1-8B-it"
    assert {s.name for s in registry.values() if s.plumbing} == {"smollm2-135m", "qwen2.5-coder-0.5b"}


def test_vllm_records_run_against_a_keyless_server(registry, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    vllm = [s for s in finbias_models(registry) if "localhost" in (s.base_url or "")]
    assert len(vllm) == 15
    vllm += [s for s in registry.values() if s.backend == "openai" and "localhost" in (s.base_url or "")]
    for s in vllm:
        assert s.api_key_env is None and s.api_key() == "EMPTY", s.name


@pytest.mark.parametrize("change, field", [({"paper_name": 5}, "paper_name"), ({"paper_name": " "}, "paper_name"),
                                           ({"plumbing": "yes"}, "plumbing")])
def test_bad_paper_name_or_plumbing_flag(tmp_path, change, field):
    with pytest.raises(RegistryError, match=f"'m1', field '{field}'"):
        load_registry(write(tmp_path, [{**GOOD, **change}]))
