"""Datasets, per-document results and aggregations of the lm-eval tasks in this folder
(`lm_eval --include_path finlib/harness/lm_eval_tasks ...`).

lm-eval passes `--metadata` (JSON) to `custom_dataset`: `data_dir` (Fin-Bias: a run's processed
folder), `bizfin_dir` (BizFinBench: the published files, default the format samples shipped with the package),
`supports_system` (false: the system text joins the user turn, the authors' rule for models
without a system role) and `prompt_version`. Each document carries its `system` text (the task's
`description`, which lm-eval sends as the system message under `--apply_chat_template`) and its
`user` turn. Results go through the project's reader and statistics
(`finlib.harness.finbias_rows`, `finlib.harness.bizfin_rows`); lm-eval only sends and collects.
"""

from __future__ import annotations

import datasets

from finlib.bizfin.tasks import TASKS
from finlib.finbias.conditions import names as condition_names
from finlib.finbias.prompts import PROMPT_VERSION, build_messages
from finlib.harness.bizfin_rows import family_scores, item_record, load_items, rule_row
from finlib.harness.finbias_rows import herding_statistics, read_run, report_samples

MODEL = "lm-eval"  # the model column of the statistics (one model per lm-eval run)


def _turns(messages: list[dict[str, str]]) -> dict[str, str]:
    """(system, user) of a one-turn prompt; a prompt with more turns is refused (lm-eval sends one)."""
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    users = [m["content"] for m in messages if m["role"] != "system"]
    if len(users) != 1:
        raise ValueError(f"lm-eval sends one user turn; this prompt has {len(users)} non-system turns")
    return {"system": system, "user": users[0]}


def finbias_dataset(
    data_dir: str, supports_system: bool = True, prompt_version: str = PROMPT_VERSION, **_: object
) -> dict:
    """Every sent condition item of the run as one document (the report's record rides along for
    the statistics); skipped items are not documents, as stage 03 never sends them."""
    docs = []
    for s in report_samples(*read_run(data_dir)):
        sample = {**s, "items": [{k: v for k, v in it.items() if k != "text"} for it in s["items"]]}
        for it in s["items"]:
            if it["status"] == "ok":
                docs.append(
                    {
                        "item_id": it["item_id"],
                        "sample": sample,
                        **_turns(build_messages(it["text"], supports_system, prompt_version)),
                    }
                )
    return {"test": datasets.Dataset.from_list(docs)}


def finbias_result(doc: dict, results: list[str]) -> dict:
    """One item's reply as a stage 03 record, under every statistic's name (each aggregation
    reads all of them)."""
    rec = {"item_id": doc["item_id"], "sample": doc["sample"], "raw_text": results[0]}
    return {name: rec for name in FINBIAS_METRICS}


def _finbias_stat(name: str):
    def aggregate(records: list[dict]) -> float:
        samples = {r["sample"]["report_id"]: r["sample"] for r in records}
        replies = {
            r["item_id"]: {"status": "ok", "raw_text": r["raw_text"], "error": None, "truncated_output": None}
            for r in records
        }
        return herding_statistics(list(samples.values()), replies, MODEL).get(name, float("nan"))

    aggregate.__name__ = f"finbias_{name.replace('/', '_')}"
    return aggregate


CONDITIONS = condition_names(paper_only=True)  # the paper's four, in the condition table's order
FINBIAS_METRICS = (
    *(f"herding/{c}" for c in CONDITIONS),
    *(f"accuracy/{c}" for c in CONDITIONS),
    "unparsed",
    "scored_rows",
    "herding_with_vs_without/pvalue",
    "fake_herding_fake_vs_original/pvalue",
    "herding_no_opinion_vs_no_rating/pvalue",
    "accuracy_with_vs_without/pvalue",
)
FINBIAS_AGGREGATIONS = {name: _finbias_stat(name) for name in FINBIAS_METRICS}
# the names the YAML's metric_list points at (`!function utils.<name>`)
globals().update({f.__name__: f for f in FINBIAS_AGGREGATIONS.values()})


def bizfin_dataset(family: str, bizfin_dir: str | None = None, supports_system: bool = True, **_: object) -> dict:
    """A rule-scored family's items as documents (the item's record rides along for its score):
    the published files of `bizfin_dir` (its own key, so one run can take both papers' folders),
    else the format samples shipped with the package."""
    if TASKS[family].kind != "accuracy":
        raise ValueError(f"{family} is judge-scored: lm-eval tasks here cover the rule-scored families")
    items = load_items(family, bizfin_dir)
    if not items:
        raise ValueError(f"{bizfin_dir}: no {family} items (the folder holds the published BizFinBench JSONL files)")
    docs = [{"item": item_record(it), **_turns(it.chat_messages(supports_system))} for it in items]
    return {"test": datasets.Dataset.from_list(docs)}


def bizfin_result(doc: dict, results: list[str]) -> dict:
    """Stage 07's item row of the reply, under both rules' names."""
    row = rule_row(doc["item"], results[0])
    return {"official": row, "tolerant": row}


def _bizfin_rule(rule: str):
    def aggregate(rows: list[dict]) -> float:
        return family_scores(rows, MODEL).get(rule, float("nan"))

    aggregate.__name__ = f"bizfin_{rule}"
    return aggregate


bizfin_official, bizfin_tolerant = _bizfin_rule("official"), _bizfin_rule("tolerant")


def _family_dataset(family: str):
    def load(**kwargs) -> dict:
        return bizfin_dataset(family, **kwargs)

    load.__name__ = f"bizfin_{family.lower()}_dataset"
    return load


globals().update({f"bizfin_{f.lower()}_dataset": _family_dataset(f) for f, t in TASKS.items() if t.kind == "accuracy"})
