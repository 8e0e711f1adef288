"""The reduced rehearsal (params/rehearsal_small.yaml): 19 simulated models x 4 conditions on a few
hundred whole ~3,000-word reports, BizFinBench's grid and Table 4's judges on a few items, run
through the runner like a real run. Oracle for every Table 4-7 cell: the closed form of each simulated
model's planted propensities over the generator's own records (finlib.finbias.data.synth_planted), not stage 04.
The check's power against wrong tables: tests/rehearsal/test_rehearsal_faults.py."""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.finbias.vocab import POOLED

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome():
    """The reduced rehearsal from an empty response store of its own (params/rehearsal_small.yaml):
    a store kept from an earlier run would answer every call and the servers would see none."""
    from finlib.core.config import load_run
    from finlib.rehearsal.rehearse import rehearse

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


def test_every_table_cell_matches_the_planted_truth_and_models_differ(outcome):
    cells = pd.DataFrame(outcome["checks"]["cells"])
    # 19 models x (T4: 2 + T5: 1 + T6: 2 + T7: 1 conditions) x (9 sectors + Average), and the two Analyst rows
    assert len(cells) == 19 * 6 * 10 + 2 * 10
    assert cells["ok"].all(), cells.loc[~cells["ok"], ["table", "model", "condition", "sector", "value", "expected"]]
    readings = outcome["checks"]["readings"]
    assert readings.get("rewritten", 0) > 0 and not readings.get("unknown") and not readings.get("unreadable")
    fake = cells[(cells["condition"] == "fake_rating") & (cells["sector"] == POOLED)]
    assert fake["value"].max() - fake["value"].min() > 0.3  # the planted following spreads the models


def test_the_rehearsal_passes_as_a_whole(outcome):
    assert outcome["checks"]["ok"], outcome["checks"]["problems"]
