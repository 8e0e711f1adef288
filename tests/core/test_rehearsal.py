"""The reduced rehearsal (params/rehearsal_small.yaml): 19 simulated models x 4 conditions on a few
hundred whole ~3,000-word reports, BizFinBench's grid and Table 4's judges on a few items, run
through the runner like a real run. Oracle for herding: the planted propensities of each simulated
model (finlib.llm.simulated_servers.answer_distribution over the prompts' texts), not stage 04."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome():
    """The reduced rehearsal from an empty response store of its own (params/rehearsal_small.yaml):
    a store kept from an earlier run would answer every call and the servers would see none."""
    from finlib.core.config import load_run
    from finlib.core.rehearse import rehearse

    cfg = load_run("rehearsal_small")
    store = cfg.path(cfg.params["inference"]["store"])
    assert store.name == "rehearsal-small-responses.sqlite", store  # never the full rehearsal's store
    for path in (store, store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        path.unlink(missing_ok=True)
    return rehearse("rehearsal_small")


def test_every_table_has_every_row_filled(outcome):
    tables = {t["table"]: t for t in outcome["checks"]["tables"]}
    for name in ("table4_herding_with_without.csv", "table5_herding_fake.csv", "table6_accuracy_with_without.csv",
                 "table7_accuracy_no_opinion.csv", "table2_sectors.csv", "bizfin_table3.csv",
                 "bizfin_table4_judge.csv", "bizfin_table6.csv"):
        assert tables[name]["exists"], name
        assert not tables[name]["missing_rows"] and not tables[name]["empty_cells"], tables[name]
    assert outcome["checks"]["report"] and outcome["checks"]["plan"] and outcome["checks"]["figures"]


def test_no_report_was_cut_and_long_reports_got_the_context_left(outcome):
    inputs = outcome["checks"]["inputs"]
    assert inputs["reports_cut"] == 0 and not any(inputs["not_sent_context"].values())
    # the 8k-context models answer ~4-6k-token reports: their answers get less than the 4,096 cap
    assert inputs["output_room_below_cap"]["gemma-7b-it"] > 0
    assert inputs["output_room_below_cap"]["gpt-4.1"] == 0
    servers = outcome["servers"]
    # the simulated tokenizers count more than the client's estimate for some 8k prompts: vLLM's 400, then the
    # retry with the room the server states -- and every row was answered
    assert sum(s["context_400"] for s in servers.values()) > 0
    assert inputs["answers"] == inputs["rows"]


def test_planted_herding_is_recovered_and_models_differ(outcome):
    herd = pd.DataFrame(outcome["checks"]["herding"])
    assert len(herd) == 19 * 4
    assert herd["recovered"].all(), herd.loc[~herd["recovered"], ["model", "condition", "planted", "estimate"]]
    assert outcome["checks"]["herding_inside_95ci_share"] >= 0.8
    fake = herd[herd["condition"] == "fake_rating"].set_index("model")
    assert np.corrcoef(fake["follow"], fake["estimate"])[0, 1] > 0.8  # stronger followers herd more
    assert fake["estimate"].max() - fake["estimate"].min() > 0.3


def test_the_rehearsal_passes_as_a_whole(outcome):
    assert outcome["checks"]["ok"], outcome["checks"]["problems"]
