"""The safetensors model cache under concurrent use: the ranks of `accelerate launch` each ask for it
at start-up, and one process's conversion must not remove or half-replace the folder another reads."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

from finlib.llm import local_backend as lb
from finlib.llm.spec import ModelSpec

FILES = ("config.json", "model.safetensors", "tokenizer.json")


def _spec() -> ModelSpec:
    return ModelSpec(name="tiny", backend="local", model_id="tiny", supports_system=True, context_length=2048,
                     price_input_per_m=0.0, price_output_per_m=0.0, gguf_package="none", gguf_file="none.gguf")


def _slow_convert(spec, out: Path) -> None:
    """Writes the cache's files slowly and logs each conversion, standing in for the GGUF one."""
    out.mkdir(parents=True)
    with open(out.parent / "conversions.log", "a") as log:
        log.write(f"{os.getpid()}\n")
    for name in FILES:
        (out / name).write_text(name)
        time.sleep(0.2)


def _ask(cache_root: str, results) -> None:
    spec = _spec()
    path = Path(lb.ensure_cache(spec, Path(cache_root)))
    time.sleep(0.5)  # still reading while any other process finishes its call
    results.put(sorted(p.name for p in path.iterdir()))


def test_processes_asking_at_once_convert_once_and_each_reads_a_whole_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(lb, "_convert_gguf", _slow_convert)
    ctx = mp.get_context("fork")   # the children inherit the stand-in converter
    results = ctx.Queue()
    procs = [ctx.Process(target=_ask, args=(str(tmp_path), results)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    seen = [results.get(timeout=5) for _ in procs]
    assert seen == [sorted(FILES)] * 3
    assert len((tmp_path / "conversions.log").read_text().split()) == 1
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == sorted(FILES)
    assert not list(tmp_path.glob(".tiny.tmp-*"))


def test_a_complete_cache_is_used_as_it_is(tmp_path, monkeypatch):
    def refuse(spec, out):
        raise AssertionError("a complete cache was converted again")

    monkeypatch.setattr(lb, "_convert_gguf", refuse)
    (tmp_path / "tiny").mkdir()
    for name in FILES:
        (tmp_path / "tiny" / name).write_text(name)
    spec = _spec()
    assert lb.ensure_cache(spec, tmp_path) == tmp_path / "tiny"
