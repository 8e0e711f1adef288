"""dtype auto: the choice rule with injected timings, fixed dtypes winning, the manifest record."""
from __future__ import annotations

import json

import pytest

from finlib.llm import precision
from finlib.llm.precision import pick, record_choice, resolve_dtype, trainer_flags


def fake(timings: dict[str, float | None]):
    calls: list[str] = []

    def measure(dtype: str, device: str) -> float | None:
        calls.append(dtype)
        return timings[dtype]
    return measure, calls


def test_the_choice_is_kept_on_disk_per_machine(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(precision, "_CACHE", {})
    monkeypatch.setattr(precision, "measure_gflops", lambda d, dev: {"float32": 10.0, "bfloat16": 30.0,
                                                                      "float16": None}[d])
    cache = tmp_path / "precision.json"
    # the default measure is looked up at call time, so patching the module attribute is not enough:
    name, _ = precision.resolve_dtype("auto", "cpu", measure=precision.measure_gflops, cache_file=cache,
                                      candidates=("float32", "bfloat16"))
    assert name == "bfloat16"
    saved = json.loads(cache.read_text())
    assert list(saved.values())[0]["chosen"] == "bfloat16"


def test_a_saved_choice_is_reused_not_remeasured(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(precision, "_CACHE", {})
    cache = tmp_path / "precision.json"
    cache.write_text(json.dumps({precision.machine_key("cpu"): {"chosen": "float16", "gflops": {}}}))
    name, report = resolve_dtype("auto", "cpu", cache_file=cache)
    assert name == "float16" and "earlier" in report["source"]


def test_avx2_only_cpu_keeps_float32():
    # measured on an AVX2-only CPU: bf16 57x slower than fp32
    assert pick({"float32": 51.8, "bfloat16": 0.9, "float16": 1.1}) == "float32"


def test_bf16_cpu_picks_bfloat16_when_clearly_faster():
    assert pick({"float32": 50.0, "bfloat16": 110.0, "float16": 2.0}) == "bfloat16"


def test_a_near_tie_goes_to_float32():
    assert pick({"float32": 50.0, "bfloat16": 60.0, "float16": None}) == "float32"  # < 25 % faster


def test_fastest_of_two_faster_precisions():
    assert pick({"float32": 10.0, "bfloat16": 30.0, "float16": 40.0}) == "float16"


def test_unmeasurable_float32_is_an_error():
    with pytest.raises(ValueError, match="float32"):
        pick({"float32": None, "bfloat16": 3.0})


def test_auto_measures_every_candidate_and_reports_gflops():
    measure, calls = fake({"float32": 40.0, "bfloat16": 0.8, "float16": None})
    name, report = resolve_dtype("auto", "cpu", measure=measure, candidates=precision.CANDIDATES)
    assert name == "float32"
    assert set(calls) == set(precision.CANDIDATES)
    assert report["gflops"] == {"float32": 40.0, "bfloat16": 0.8, "float16": None}
    assert report["chosen"] == "float32" and report["requested"] == "auto"


def test_fixed_dtype_wins_without_measuring():
    measure, calls = fake({"float32": 1.0, "bfloat16": 100.0, "float16": 100.0})
    name, report = resolve_dtype("float32", "cpu", measure=measure)
    assert name == "float32" and calls == [] and report["source"].startswith("params")


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="auto"):
        resolve_dtype("fp8")


@pytest.mark.slow
def test_real_measurement_is_positive_and_cached():
    pytest.importorskip("torch")
    g = precision.measure_gflops("float32", "cpu", shape=(16, 36, 32), min_time_s=0.001)
    assert g is not None and g > 0
    first = resolve_dtype("auto", cache_file=False)
    second = resolve_dtype("auto", cache_file=False)
    assert first == second  # measured once per process


def test_trainer_flags_are_explicit():
    assert trainer_flags("float32") == {"bf16": False, "fp16": False}
    assert trainer_flags("bfloat16") == {"bf16": True, "fp16": False}
    assert trainer_flags("float16") == {"bf16": False, "fp16": True}


def test_record_choice_merges_per_stage(tmp_path):
    record_choice(tmp_path, "03", {"chosen": "float32"})
    record_choice(tmp_path, "05", {"chosen": "bfloat16"})
    data = json.loads((tmp_path / "precision.json").read_text())
    assert data == {"03": {"chosen": "float32"}, "05": {"chosen": "bfloat16"}}


def test_cpu_features_reads_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor: 0\nflags\t: fpu sse avx2 fma\n")
    assert precision.cpu_features(info) == ["avx2"]
    assert precision.cpu_features(tmp_path / "missing") == []


def test_runner_copies_the_recorded_choice_into_the_manifest(tmp_path):
    from types import SimpleNamespace

    from finlib.pipeline.runner import read_precision

    cfg = SimpleNamespace(run_dir=tmp_path)
    assert read_precision(cfg) == {}
    record_choice(tmp_path, "03", {"chosen": "float32", "gflops": {"float32": 50.0}})
    assert read_precision(cfg)["03"]["chosen"] == "float32"


def test_emulated_precisions_are_never_candidates_on_cpu():
    # AVX2-only CPU, or torch forced to AVX2 kernels: float32 only, whatever a noisy timing says
    assert precision.cpu_candidates(["avx2"], "AVX2") == ("float32",)
    assert precision.cpu_candidates(["avx2", "avx512f", "avx512_bf16"], "AVX2") == ("float32",)
    assert precision.cpu_candidates(["avx2", "avx512f", "avx512_bf16"], "AVX512") == ("float32", "bfloat16")
    assert precision.cpu_candidates(["avx512f", "amx_bf16", "amx_fp16"], "AVX512") == (
        "float32", "bfloat16", "float16")


def test_auto_on_an_avx2_cpu_does_not_even_measure_bf16(monkeypatch):
    monkeypatch.setattr(precision, "_CACHE", {})
    monkeypatch.setattr(precision, "cpu_candidates", lambda: ("float32",))
    measure, calls = fake({"float32": 1.0, "bfloat16": 1000.0, "float16": 1000.0})
    name, report = resolve_dtype("auto", "cpu", measure=measure)
    assert name == "float32" and set(calls) == {"float32"} and report["gflops"]["bfloat16"] is None


def _local_spec():
    from finlib.core.config import repo_root
    from finlib.llm.registry import load_registry

    return load_registry(repo_root() / "params" / "models.yaml")["smollm2-135m"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_store_keys_name_the_cpu_threads(dtype):
    from finlib.llm.engine import engine_key
    from finlib.llm.store import make_key

    spec = _local_spec()
    one, two = engine_key(spec, dtype, threads=1), engine_key(spec, dtype, threads=2)
    assert (one["cpu_threads"], two["cpu_threads"]) == (1, 2)
    messages = [{"role": "user", "content": "Rate it."}]
    keys = {make_key(spec.backend, spec.model_id, messages, {}, "v1", "score", e) for e in (one, two)}
    assert len(keys) == 2


def test_float32_store_keys_do_not_depend_on_threads():
    from finlib.llm.engine import engine_key

    spec = _local_spec()
    assert engine_key(spec, "float32", threads=1) == engine_key(spec, "float32", threads=4)
    assert "cpu_threads" not in engine_key(spec, "float32", threads=1)


def test_unset_threads_are_torchs_own_count():
    import torch

    assert precision.compute_threads(None) == torch.get_num_threads() and precision.compute_threads(3) == 3
    from finlib.llm.engine import engine_key

    assert engine_key(_local_spec(), "bfloat16")["cpu_threads"] == torch.get_num_threads()
