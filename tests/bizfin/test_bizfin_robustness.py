"""One bad reply costs its own item only: hostile replies scored under both rules beside the authors'
scripts run verbatim, the tolerant reader on whole replies, the official FDD denominator, one status for
a reply that ran out of budget while reasoning, task files split as the authors read them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest

from finlib.bizfin import official, scorers
from finlib.bizfin.authors_code import AuthorsCode
from finlib.bizfin.benchmark import stage
from finlib.bizfin.data import load_format_samples
from finlib.bizfin.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]
# ../shared beside the clone (or beside the folder holding a git worktree of it)
SHARED = next(
    (p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()), ROOT.parent / "shared"
)
REFERENCE = (SHARED / "reference" / "bizfinbench-eval").resolve()
NESTED_1000 = "[" * 1000 + "]" * 1000


@pytest.fixture(scope="module")
def authors() -> AuthorsCode:
    if not (REFERENCE / "benchmark_code").is_dir():
        pytest.skip(f"the published evaluation code ({REFERENCE}) is absent: these checks run it verbatim")
    return AuthorsCode(REFERENCE)


def _answers(asked: dict, texts: list) -> pd.DataFrame:
    ids = [it.id for its in asked.values() for it in its]
    return pd.DataFrame(
        {
            "id": ids,
            "status": "ok",
            "raw_text": texts,
            "error": None,
            "input_tokens": 1,
            "output_tokens": 1,
            "cost_usd": 0.0,
            "cached": False,
        }
    )


def test_er_reply_of_1000_nested_brackets_is_scored_not_raised():
    gold = '["乐观"]'
    s = scorers.score_er(gold, NESTED_1000)
    assert (s.ours, s.parsed) == (0.0, False)
    assert s.official == 1.0  # the published rule: any failure to read the labels scores 1


def test_er_nested_brackets_official_equals_the_authors_script(authors):
    got = authors.score_rules("ER", ['["乐观"]'], [NESTED_1000])[0]
    assert got.score == scorers.score_er('["乐观"]', NESTED_1000).official


def test_a_reply_whose_scoring_raises_costs_its_item_only(monkeypatch):
    """Seeded: the FNC reader raises on one reply. The other items are scored, the failing one is NaN
    under both rules with the error kept, counted per model, and named in the caption."""
    from finlib.bizfin.benchmark.results import scoring_error_note

    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:2]}
    real = TASKS["FNC"].scorer

    def flaky(gold, text, question=""):
        if "boom" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(gold, text, question)

    monkeypatch.setitem(TASKS, "FNC", dataclasses.replace(TASKS["FNC"], scorer=flaky))
    gold = asked["FNC"][1].gold
    rows = pd.DataFrame(
        stage.score_model("m", asked, _answers(asked, ["boom", f'{{"answer": "{gold}"}}']), None, (0, 100)),
        columns=stage.ITEM_COLUMNS,
    )
    bad, good = rows.iloc[0], rows.iloc[1]
    assert math.isnan(bad["official"]) and math.isnan(bad["ours"]) and "RecursionError" in bad["scoring_error"]
    assert good["ours"] == 1.0 and pd.isna(good["scoring_error"])
    counts = stage.scoring_error_counts(rows)
    assert counts == {"m": 1}
    assert "m 1" in scoring_error_note({"scoring_errors": counts})


def test_stage_scores_a_stored_er_reply_of_nested_brackets():
    asked = {"ER": load_format_samples(["ER"])["ER"][:1]}
    rows = pd.DataFrame(
        stage.score_model("m", asked, _answers(asked, [NESTED_1000]), None, (0, 100)), columns=stage.ITEM_COLUMNS
    )
    assert rows["ours"].iat[0] == 0.0 and rows["scoring_error"].isna().all()


# ---------------------------------------------------------------- the tolerant reader reads the whole reply

LATEX = "".join(f"第{k}步：$\\frac{{{k}}}{{{k + 1}}}$ 约等于 {k / (k + 1):.3f}；\n" for k in range(1, 301))


def test_answer_after_300_latex_fractions_is_read():
    """Reasoning written as the world writes it (LaTeX fractions, each a `{` that is no JSON) before the answer."""
    s = scorers.score_fnc("12.5", LATEX + '最终答案：\n```json\n{"answer": "12.5"}\n```')
    assert (s.ours, s.parsed, s.answer) == (1.0, True, "12.5")


def test_a_python_dict_answer_longer_than_20000_characters_is_read():
    reason = "营收增长，毛利率提升。" * 2500  # 27,500 characters of single-quoted reason
    s = scorers.score_fnc("12.5", f"{{'reason': '{reason}', 'answer': '12.5',}}")
    assert (s.ours, s.parsed) == (1.0, True)


@pytest.mark.parametrize(
    "gold,pred,want",
    [
        ("1500", 1.5e3, True),
        ("0.00000012", 1.2e-07, True),
        ("1500", "1.5E3", True),
        ("1500", "1.4e3", False),
        ("2.5亿", "2.5e8元", True),
        ("0.00125", "1.25e-3", True),
        ("0.00125", "1.26e-3", False),
    ],
)
def test_scientific_notation_is_a_number(gold, pred, want):
    assert scorers.answers_match(gold, pred) is want


def test_json_number_in_scientific_notation_scores():
    assert scorers.score_fnc("0.00000012", '{"answer": 1.2e-7}').ours == 1.0


def test_hostile_braces_read_as_nothing():
    from finlib.llm.replies import read_json_objects

    assert read_json_objects("{" * 1_000_000, max_chars=None) == []
    assert read_json_objects('{"a": ' * 100_000, max_chars=None) == []
    assert read_json_objects('{"a": ' * 50_000 + "}" * 50_000, max_chars=None) == []  # nesting: bounded work
    tail = '{"answer": "x"}'
    assert read_json_objects("{" * 100_000 + tail, max_chars=None) == [{"answer": "x"}]


def test_judge_verdict_longer_than_20000_characters_is_read():
    from finlib.bizfin.iterajudge.judge import parse_judge_score

    verdict = "评语：" + "数据描述准确。" * 3000 + '\n{"score": 80}'
    assert parse_judge_score(verdict, (0, 100)) == (80, "json")


# ---------------------------------------------------------------- the official FDD denominator

FDD_VERDICTS = [
    '```json\n{"评分分数": "100", "描述": "完全正确"}\n```',
    '{"评分分数": 60, "描述": "数据值描述错误"}',
    '{"描述": "趋势描述错误，不得分"}',  # JSON without the score: the published script counts it twice in N
    '```json\n{"评分分数": "满分", "描述": "x"}\n```',  # int() refuses: twice
    '["评分分数", 0]',  # JSON, not an object: twice
    "评分：60分，描述基本正确。",  # no JSON: once
    '{"评分分数": "0", "描述": "趋势错误"}',
]


def test_fdd_n_counts_are_the_published_scripts_by_hand():
    from finlib.bizfin.official import fdd_verdict, fdd_verdict_n

    assert [fdd_verdict_n(v) for v in FDD_VERDICTS] == [1, 1, 2, 2, 2, 1, 1]
    # the script's mean: (100 + 60) / (1 + 1 + 2 + 2 + 2 + 1 + 1) / 100 = 0.16 (each verdict once: 0.2286)
    assert sum(fdd_verdict(v) * fdd_verdict_n(v) for v in FDD_VERDICTS) / 10 == pytest.approx(0.16)


def test_table3_official_fdd_uses_the_published_n():
    from finlib.bizfin.benchmark.results import task_scores
    from finlib.bizfin.official import fdd_verdict, fdd_verdict_n

    rows = [
        {
            "model": "m",
            "task": "FDD",
            "source": "benchmark",
            "parsed": True,
            "judge_status": "ok",
            "status": "ok",
            "official": fdd_verdict(v),
            "official_n": fdd_verdict_n(v),
            "ours": 0.5,
        }
        for v in FDD_VERDICTS
    ]
    long = task_scores(pd.DataFrame(rows), reps=50, seed=1).set_index(["rule", "task"])
    assert long.loc[("official", "FDD"), "score"] == pytest.approx(16.0)
    assert long.loc[("ours", "FDD"), "score"] == pytest.approx(50.0)


def test_stage_records_the_published_n_of_each_verdict():
    from finlib.bizfin.iterajudge.judge import JudgeResult

    asked = {"FDD": load_format_samples(["FDD"])["FDD"][:2]}
    verdicts = iter(FDD_VERDICTS[1:3])

    def judge(inputs):
        return [JudgeResult(i.id, None, "invalid", raw_text=next(verdicts), note="x") for i in inputs]

    rows = stage.score_model("m", asked, _answers(asked, ["答一", "答二"]), judge, (0, 100), published_rubric=True)
    assert [(r["official"], r["official_n"]) for r in rows] == [(0.6, 1), (0.0, 2)]


def test_fdd_official_column_equals_the_authors_batch_mean(authors):
    """The verbatim path: per-item scores with their N counts, checked against one run of the whole batch."""
    from finlib.bizfin.official import fdd_verdict, fdd_verdict_n

    got = authors.score_verdicts("FDD", FDD_VERDICTS)
    assert [(g.score, g.n) for g in got] == [(fdd_verdict(v), fdd_verdict_n(v)) for v in FDD_VERDICTS]
    assert authors._verdict_acc("FDD", FDD_VERDICTS) == pytest.approx(0.16)


def test_a_wrong_n_count_fails_the_batch_check(authors, monkeypatch):
    from finlib.bizfin.authors_code import AuthorsCodeError, ScriptScore

    real = authors._one_verdict
    monkeypatch.setattr(authors, "_one_verdict", lambda task, v: ScriptScore(real(task, v).score))  # every n = 1
    with pytest.raises(AuthorsCodeError, match="batch mean"):
        authors.score_verdicts("FDD", FDD_VERDICTS)


# ---------------------------------------------------------------- task files split as the authors read them

SEPARATORS_INSIDE_STRINGS = ["\u2028", "\u2029", "\u0085"]  # JSON allows these raw inside a string


def test_task_file_splits_only_on_newlines_like_the_authors_reader(tmp_path):
    """The authors iterate a text-mode file (`for line in f`): U+2028 / U+2029 / U+0085 inside a query
    stay inside the record. Checked against that reading itself."""
    import json

    from finlib.bizfin.data import load_local
    from finlib.bizfin.tasks import task_info

    sample = (ROOT / "finlib" / "bizfin" / "format_samples" / "sample_FNC.jsonl").read_text(encoding="utf-8")
    rec = json.loads(sample.splitlines()[0])
    text = rec["messages"][0]["content"][0]["text"]
    rec["messages"][0]["content"][0]["text"] = text.replace("\n", "\u2028", 1) + "".join(SEPARATORS_INSIDE_STRINGS)
    line = json.dumps(rec, ensure_ascii=False)
    path = tmp_path / f"{task_info('FNC').file_stem}.jsonl"
    path.write_text(line + "\r\n" + line.replace("示例", "样例", 1) + "\n", encoding="utf-8")
    with open(path, encoding="utf8") as f:  # the authors' reading
        theirs = [json.loads(x) for x in f]
    items = load_local(tmp_path, ["FNC"])["FNC"]
    assert len(items) == len(theirs) == 2
    assert all(sep in items[0].question for sep in SEPARATORS_INSIDE_STRINGS)


# ---------------------------------------------------------------- out of budget while reasoning; reasoning tokens

FNC_GOLD_REPLY = '{"answer": "0"}'


def _completion(content, finish_reason="length", reasoning_tokens=None) -> dict:
    usage = {"prompt_tokens": 10, "completion_tokens": 64}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    message = {"role": "assistant", "content": content, "reasoning_content": "先算营收，再算利润……"}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}], "usage": usage}


def _stored(body: dict, tmp_path) -> pd.DataFrame:
    """A completion body through the backend's reading and the response store, as `chat` returns it."""
    from llm_helpers import STUB_SPEC, make_request

    from finlib.llm.openai_backend import malformed_reason, result_from_completion
    from finlib.llm.store import ResponseStore

    assert malformed_reason(body) is None
    req = make_request("q")
    with ResponseStore(tmp_path / "s.sqlite") as store:
        store.put_many([result_from_completion(req, STUB_SPEC, body)])
        row = store.get([req.key])[req.key]
    return row


@pytest.mark.parametrize(
    "content,finish",
    [
        ("", "length"),
        (None, "length"),
        ("<think>先算营收，再", "length"),
        ("<think>先算营收，再", "stop"),
        ("<think>想完了</think>", "length"),
    ],
)
def test_running_out_of_budget_while_reasoning_is_one_status(content, finish, tmp_path):
    """Empty content, null content and an unclosed <think> are one status: not answered under ours
    (outside N, counted), the returned text scored by the published rule under the official column."""
    from finlib.bizfin.benchmark.results import task_scores

    row = _stored(_completion(content, finish), tmp_path)
    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:2]}
    answers = _answers(asked, [row["raw_text"], FNC_GOLD_REPLY])
    answers["truncated_output"] = [bool(row["truncated_output"]), False]
    items = pd.DataFrame(stage.score_model("m", asked, answers, None, (0, 100)), columns=stage.ITEM_COLUMNS)
    spent = items.iloc[0]
    assert spent["status"] == stage.OUT_OF_BUDGET and math.isnan(spent["ours"]) and not spent["parsed"]
    assert spent["official"] == scorers.official_value(official.fnc, asked["FNC"][0].gold, row["raw_text"])[0]
    assert stage.out_of_budget_counts(items) == {"m": 1}
    assert stage.answer_status(items) == {"answered": 1, "not_answered": 1}
    long = task_scores(items, reps=20, seed=1).set_index(["rule", "task"])
    assert long.loc[("ours", "FNC"), "not_answered"] == 1 and long.loc[("ours", "FNC"), "n_scored"] == 1


def test_an_empty_reply_inside_the_budget_stays_an_answer():
    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:1]}
    answers = _answers(asked, [""])
    answers["truncated_output"] = [False]
    row = stage.score_model("m", asked, answers, None, (0, 100))[0]
    assert row["status"] == "ok" and row["ours"] == 0.0


def test_a_null_content_that_did_not_hit_the_limit_is_still_malformed():
    from finlib.llm.openai_backend import malformed_reason

    assert malformed_reason(_completion(None, "stop")) == "choice without message content"


def test_reasoning_tokens_are_recorded_per_answer(tmp_path):
    row = _stored(_completion('{"answer": "1"}', "stop", reasoning_tokens=812), tmp_path)
    assert row["reasoning_tokens"] == 812 and row["output_tokens"] == 64
    assert _stored(_completion('{"answer": "1"}', "stop"), tmp_path / "b")["reasoning_tokens"] is None
    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:1]}
    answers = _answers(asked, ['{"answer": "1"}'])
    answers["reasoning_tokens"] = [row["reasoning_tokens"]]
    assert stage.score_model("m", asked, answers, None, (0, 100))[0]["reasoning_tokens"] == 812


HOSTILE = {
    "nested_lists": NESTED_1000,
    "nested_objects": '{"result": ' * 1000 + "1" + "}" * 1000,
    "nested_fence": "```json\n" + "[" * 1000 + "]" * 1000 + "\n```",
    "open_braces": "{" * 5000,
    "latex_then_json": LATEX + '{"answer": "1", "result": ["乐观"], "涨跌情况": "上涨", "results": []}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("task", ["AEA", "FNC", "FTR", "ER", "SP", "FNER"])
def test_hostile_replies_score_under_both_rules_as_the_authors_scripts_do(authors, task, name):
    """Every rule task on hostile replies: our tolerant reading returns a score (never raises), and the
    official column equals the authors' script run verbatim on the same reply (or both raise)."""
    item = load_format_samples([task])[task][0]
    reply = HOSTILE[name]
    s = TASKS[task].scorer(item.gold, reply, item.question)
    assert s.ours in (0.0, 1.0) or 0.0 <= s.ours <= 1.0
    theirs = authors.score_rules(task, [item.gold], [reply])[0]
    if "raises" in theirs.error:
        assert math.isnan(s.official) and "raises" in s.note
    else:
        assert (math.isnan(s.official) and theirs.score is None) or s.official == theirs.score, (s, theirs)
