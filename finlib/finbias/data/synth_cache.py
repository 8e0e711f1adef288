"""The synthetic market written once per (generator params, seed, generator code) and reused.

Generating the rehearsal-sized market takes minutes; stage 00 reads it back from
`data/raw/synthetic/<run>/`, so the files are kept and reused while nothing they depend on has
changed. Kept apart from `synth_corpus` (the report text building blocks that `synth` imports)
so the generator and its text blocks import one way only.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from finlib.finbias.data import messy_corpus, provider_layouts, synth, synth_corpus, synth_planted
from finlib.finbias.data.synth import RAW_FILES, SynthParams, generate_market, write_market


def market_fingerprint(section: Mapping[str, Any] | None, seed: int) -> str:
    """SHA-256 of the resolved generator params, the seed and the generator's source code (what the
    written files depend on: an edited generator never reuses files an older one wrote)."""
    p = SynthParams.from_section(section)
    code = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in (synth, synth_corpus, messy_corpus,
                                                                             provider_layouts, synth_planted))).hexdigest()
    blob = json.dumps({"params": p.model_dump(), "seed": int(seed), "code": code}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_market(section: Mapping[str, Any] | None, seed: int, out_dir: Path) -> dict[str, Path]:
    """Write the market for (params, seed) under `out_dir` once; later calls reuse the files.

    The fingerprint file is written last, so an interrupted write is regenerated, never reused.
    """
    out_dir = Path(out_dir)
    stamp = out_dir / "fingerprint.txt"
    fp = market_fingerprint(section, seed)
    paths = {name: out_dir / f"{name}.parquet" for name in RAW_FILES}
    if stamp.is_file() and stamp.read_text().strip() == fp and all(p.is_file() for p in paths.values()):
        return paths
    stamp.unlink(missing_ok=True)
    paths = write_market(generate_market(section, seed), out_dir)
    stamp.write_text(fp + "\n")
    return paths
