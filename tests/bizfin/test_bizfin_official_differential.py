"""Differential test: the offline official column (finlib.bizfin.official, our re-implementation of the
published rules at commit 6d2a4a6) against the authors' scripts run verbatim from
../shared/reference/bizfinbench-eval, reply by reply, on every item of the five published task files.

The authors' scripts are the check; they share nothing with the re-implementation (they are imported
from the reference folder, fed JSONL files and read back as their own `evaluation` writes them).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from official_replies import answer_replies, fdd_verdicts, fner_replies, fqa_verdicts

from finlib.bizfin import official
from finlib.bizfin.authors_code import AuthorsCode, ScriptScore
from finlib.bizfin.tasks import task_info

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / ".." / "shared" / "reference" / "bizfinbench-eval").resolve()
DATA = (ROOT / ".." / "shared" / "data" / "bizfinbench").resolve()
FILES = {"FNC": "Financial_Numerical_Computation", "FTR": "Financial_Time_Reasoning",
         "FNER": "Financial_Named_Entity_Recognition", "FDD": "Financial_Data_Description",
         "FQA": "Financial_Knowledge_QA"}


@pytest.fixture(scope="module")
def authors() -> AuthorsCode:
    if not (REFERENCE / "benchmark_code").is_dir() or not DATA.is_dir():
        pytest.skip(f"the published evaluation code ({REFERENCE}) or the task files ({DATA}) are absent: the "
                    f"differential test runs the authors' scripts verbatim beside ours and needs both")
    return AuthorsCode(REFERENCE)


def golds(task: str) -> list[str]:
    lines = (DATA / f"{FILES[task]}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(x)["choices"][0]["message"]["content"][0]["text"] for x in lines if x.strip()]


def ours(task: str, gold: str, reply: str, script: str | None = None) -> tuple:
    try:
        fn = official.ftr if script == "eval_financial_timereason.py" else task_info(task).official_rule
        return ("score", fn(gold, reply))
    except official.PublishedScriptError:
        return ("raises",)


def theirs(s: ScriptScore) -> tuple:
    return ("raises",) if s.error and "raises" in s.error else ("score", s.score)


def compare_rules(authors: AuthorsCode, task: str, make, script: str | None = None) -> tuple[int, list]:
    cases = [(g, shape, reply) for i, g in enumerate(golds(task))
             for shape, reply in make(g, long_reply=i % 20 == 0)]
    got = authors.score_rules(task, [c[0] for c in cases], [c[2] for c in cases], script=script)
    bad = [(shape, reply[:120], ours(task, g, reply, script), theirs(s))
           for (g, shape, reply), s in zip(cases, got, strict=True) if ours(task, g, reply, script) != theirs(s)]
    return len(cases), bad


@pytest.mark.slow
def test_rule_tasks_agree_with_the_authors_scripts_on_every_reply(authors):
    total, shapes = 0, set()
    for task, make in (("FNC", answer_replies), ("FTR", answer_replies), ("FNER", fner_replies)):
        n, bad = compare_rules(authors, task, make)
        assert not bad, f"{task}: {len(bad)} of {n} replies differ, e.g. {bad[:3]}"
        total += n
        shapes |= {s.split("/")[-1] for g in golds(task)[:1] for s, _ in make(g, True)}
    assert total >= 3000 and {"one_line_json", "multi_line_cot", "fenced", "think_first", "prose", "python_dict",
                              "bare_list", "two_objects", "30k_reply"} <= shapes


@pytest.mark.slow
def test_fner_under_the_configured_ftr_script_agrees(authors):
    n, bad = compare_rules(authors, "FNER", fner_replies, script="eval_financial_timereason.py")
    assert n > 400 and not bad, bad[:3]


@pytest.mark.slow
@pytest.mark.parametrize("task,make", [("FDD", fdd_verdicts), ("FQA", fqa_verdicts)])
def test_judge_verdicts_agree_with_the_authors_scripts(authors, task, make):
    n_items = len(golds(task))
    cases = [v for i in range(n_items) for _, v in make(i)]
    unique = sorted(set(cases))                      # one script run per distinct verdict text
    got = dict(zip(unique, authors.score_verdicts(task, unique), strict=True))
    reader = task_info(task).verdict_reader
    count = task_info(task).verdict_n
    # the score and how many times the script counts the verdict in N (FDD: twice for a JSON verdict without a score)
    bad = [(v[:80], reader(v), count(v), got[v].score, got[v].n) for v in unique
           if (reader(v), count(v) if got[v].score is not None else 0) != (got[v].score, got[v].n)]
    assert len(cases) >= 2 * 5 * n_items and not bad, bad[:3]


def test_rules_not_in_the_five_files_agree(authors):
    """AEA, ER and SP have no published file here: hand-written replies in the same shapes."""
    cases = {"AEA": ("1,3", ['{"相关新闻序号": [1, 3]}', '{"相关新闻序号": [3, 1, 1]}', '```json\n{"相关新闻序号": [1,3]}\n```',
                             '理由 {"相关新闻序号": [1, "3"], "x": 1}', '{"相关新闻序号": [1.9, 3]}', "[1, 3]",
                             '{"相关新闻序号": [1, 3x]}', '说明 "相关新闻序号": [1, 3] 完', "{'相关新闻序号': [1, 3]}"]),
             "ER": ('["乐观", "期待"]', ['{"result": ["乐观", "期待"]}', '```json\n["期待", "乐观"]\n```', "看不懂",
                                      '{"result": "乐观"}', '{"result": [["乐观"]]}', '{"answer": ["乐观"]}']),
             "SP": ("上涨", ['{"涨跌情况": "上涨"}', '```json\n["上涨"]\n```', '{"涨跌情况": "下跌"}', "上涨",
                           '<think>{"涨跌情况": "下跌"}</think>{"涨跌情况": "上涨"}', '```json\n"上涨"\n```'])}
    for task, (gold, replies) in cases.items():
        got = authors.score_rules(task, [gold] * len(replies), replies)
        for reply, s in zip(replies, got, strict=True):
            mine = ours(task, gold, reply)
            want = ("raises",) if "raises" in s.error else ("score", s.score)
            assert mine == want, (task, reply, mine, s)


def test_ftu_judge_input_matches_the_published_preprocessing(authors):
    """The FTU judge sees the user segment and the Actions list exactly as data_preprocess extracts them."""
    query = "系统说明\n下面是用户的输入和历史对话信息：\n用户：查一下茅台的市盈率\n请按照输出格式要求，输出你的Thought和Actions!"
    replies = ['{"Thought": "查数据", "Actions": [{"Action": "FinQuery", "ActionInput": {"indicators": ["市盈率"]}}]}',
               '<think>想想</think>```json\n{"Actions": [{"Action": "Search", "Action Input": ["茅台"]}]}\n```',
               "无法回答", '{"Actions": {"Action": "Search"}}']
    prompts = authors.judge_prompts("FTU", [query] * len(replies), replies)
    for reply, prompt in zip(replies, prompts, strict=True):
        question, answer = official.ftu_judge_input(query, reply)
        assert f"#### 用户问题及历史对话：\n{question}\n#### 被评测模型的输出：\n{answer}\n" in prompt


@pytest.mark.slow
def test_a_seeded_fault_in_the_reimplementation_is_caught(authors, monkeypatch):
    """Strip <think> before the FNC rule (as an earlier version of this column did): the comparison fails."""
    real = official.fnc_answer
    monkeypatch.setattr(official, "fnc_answer", lambda reply: real(reply.split("</think>")[-1]))
    n, bad = compare_rules(authors, "FNC", lambda g, long_reply: answer_replies(g, False))
    assert bad and n > 1000


def test_the_paper_grid_judge_cap_holds_the_longest_published_verdict(authors, repo_root):
    """The published FQA verdict example (the longest published format) must fit the judge cap at a
    pessimistic 1.5 tokens per character (a cut verdict loses its total and scores as unreadable)."""
    import yaml

    from finlib.bizfin.iterajudge.rubrics import load_published

    fqa = load_published(REFERENCE)["FQA"]["vanilla"]
    example = fqa[fqa.index('{"评分结果"'):fqa.index("### 各维度得分情况如下")].strip()
    grid = yaml.safe_load((repo_root / "params" / "bizfinbench.yaml").read_text(encoding="utf-8"))["bizfin"]
    assert len(example) > 400 and grid["judge_max_new_tokens"] >= 1.5 * len(example)
    assert grid["iterajudge"]["judge_max_new_tokens"] >= 1.5 * len(example)


@pytest.mark.parametrize("task", ["FDD", "FQA"])
def test_published_judge_prompts_equal_the_scripts_data_preprocess(authors, task):
    """With the published rubric, the judge sees exactly what the authors' data_preprocess writes (the
    reply as written, <think> included), on real items."""
    from finlib.bizfin import judge_input
    from finlib.bizfin.data import load_local
    from finlib.bizfin.iterajudge.rubrics import Rubrics

    items = load_local(DATA, [task])[task][:25]
    replies = ["数据显示整体上涨。", "<think>先看表格</think>\n整体下跌，{answer} 与 {question} 字样保留。", "```json\n{}\n```"]
    rubrics = Rubrics.from_dir(REFERENCE)
    pairs = [(it, r) for it in items for r in replies]
    theirs = authors.judge_prompts(task, [it.question for it, _ in pairs], [r for _, r in pairs])
    for (it, r), want in zip(pairs, theirs, strict=True):
        messages, _, _ = rubrics.vanilla(judge_input(it, r, verbatim=True), (0, 100))
        assert messages == [{"role": "user", "content": want}]


def test_gpt4o_stand_in_routes_the_published_revisions_through_the_engine(tmp_path):
    """The published FDD IteraJudge script runs verbatim; its GPT4OClient calls go through the engine to a
    local server and into the response store (a rerun sends nothing)."""
    if not (REFERENCE / "benchmark_code").is_dir():
        pytest.skip(f"the published evaluation code is absent ({REFERENCE})")
    from finlib.bizfin.authors_code import engine_judge
    from finlib.llm.store import ResponseStore
    from finlib.rehearsal.stub_server import ThreadedStub, stub_spec

    with ThreadedStub() as stub, ResponseStore(tmp_path / "store.sqlite") as store:
        route = engine_judge(stub_spec(stub.base_url, api_key_env=None), store, max_new_tokens=32,
                             version="published-revise-test")
        code = AuthorsCode(REFERENCE, judge=route)
        out = code.iterajudge_prompts(["描述这支股票：涨跌幅 1.2%", "描述：涨跌幅 -0.5%"], ["上涨1.2%", "下跌0.5%"])
        sent = stub.stub.n_requests
        assert len(out) == 2 and sent == 4                         # two revision rounds per reply
        assert "上涨1.2%" in out[0] and "{ref_answer}" not in out[0]
        again = AuthorsCode(REFERENCE, judge=route).iterajudge_prompts(["描述这支股票：涨跌幅 1.2%", "描述：涨跌幅 -0.5%"],
                                                                       ["上涨1.2%", "下跌0.5%"])
        assert again == out and stub.stub.n_requests == sent        # answered from the store
