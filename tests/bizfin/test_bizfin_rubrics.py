"""Judge rubrics: ours by default, the authors' prompt files verbatim from a local checkout
(`bizfin.rubrics_dir`), tested on a fixture folder written here in the published layout (variable
names and placeholders as in the published scripts; the texts are ours), and the published
verdict formats read strictly."""
from __future__ import annotations

import pytest

from finlib.bizfin.iterajudge import judge as J
from finlib.bizfin.iterajudge.rubrics import PUBLISHED, RubricError, Rubrics, check_rubrics_dir, read_template
from finlib.bizfin.prompts import JUDGE_VANILLA_VERSION
from finlib.bizfin.tasks import JUDGE_TASKS, judge_rubric
from finlib.llm import engine
from finlib.llm.store import ResponseStore, Result
from finlib.rehearsal.stub_server import stub_spec

FIXTURE = {  # file -> source text; each template marks itself so a test can see which one was sent
    "eval_financial_description.py": 'def data_preprocess(a, b):\n    prompt = """FDD-VANILLA q={question} '
                                     'a={predict_result} 输出 {"评分分数":"xx"}""".strip()\n',
    "eval_financial_description_revise.py": ("prompt_1 = '''FDD-REVISE-1 q={question} a={answer}'''\n"
                                             "prompt_2 = '''FDD-REVISE-2 q={question} a={answer}'''\n"
                                             "prompt_judge = '''FDD-JUDGE q={question} a={answer} "
                                             "ref={ref_answer}'''.strip()\n"),
    "eval_multi_tools_use.py": "from tools.ExternalApi import X\nprompt_judge = '''FTU-VANILLA q={question} a={answer}'''\n",
    "eval_financial_encyclopedia.py": "def f():\n    prompt = '''FQA-VANILLA q={question} a={predict_result}'''.strip()\n",
}


@pytest.fixture()
def rubrics_dir(tmp_path):
    code = tmp_path / "BizFinBench" / "benchmark_code" / "BizFinBench"
    code.mkdir(parents=True)
    for name, text in FIXTURE.items():
        (code / name).write_text(text, encoding="utf-8")
    return tmp_path / "BizFinBench"


class Echo:
    """Fake model: refiners return the prompt's first word, judges a verdict in the format asked."""

    def __init__(self):
        self.sent = []

    def __call__(self, spec, pending, store, **kw):
        out = []
        for req in pending:
            text = req.messages[-1]["content"]
            self.sent.append(text)
            if text.startswith("FDD-REVISE"):
                reply = text.split()[0] + " revised"
            elif text.startswith(("FDD-VANILLA", "FDD-JUDGE")):
                reply = '```json\n{"评分分数": "60", "描述": "数值有误"}\n```'
            elif text.startswith("FTU-VANILLA"):
                reply = "评价证据：工具选择合理。\n\n评分：[[85]]"
            elif text.startswith("FQA-VANILLA"):
                reply = '{"评分结果": {}, "总评分": {"最终评分": 21.8, "总分": 87.2}}'
            else:
                reply = '{"score": 70, "reason": "ours"}'
            out.append(Result.for_request(req, status="ok", raw_text=reply, truncated_output=False))
        store.put_many(out)


def test_templates_are_read_by_parsing_never_by_running(rubrics_dir):
    code = rubrics_dir / "benchmark_code" / "BizFinBench"
    assert read_template(code / "eval_financial_description.py", "prompt").startswith("FDD-VANILLA")
    assert read_template(code / "eval_financial_description_revise.py", "prompt_judge").endswith("ref={ref_answer}")
    # eval_multi_tools_use.py imports a module that does not exist: parsing it must not import anything
    assert read_template(code / "eval_multi_tools_use.py", "prompt_judge").startswith("FTU-VANILLA")
    with pytest.raises(RubricError, match="prompt_9"):
        read_template(code / "eval_financial_description.py", "prompt_9")


def test_missing_folder_or_file_is_a_clear_error(rubrics_dir, tmp_path):
    check_rubrics_dir(rubrics_dir, "bizfin.rubrics_dir")
    with pytest.raises(RubricError, match="not a folder"):
        check_rubrics_dir(tmp_path / "nowhere", "bizfin.rubrics_dir")
    (rubrics_dir / "benchmark_code" / "BizFinBench" / "eval_financial_encyclopedia.py").unlink()
    with pytest.raises(RubricError, match="eval_financial_encyclopedia.py: missing"):
        check_rubrics_dir(rubrics_dir, "bizfin.rubrics_dir")


def test_published_prompts_used_verbatim_and_their_verdicts_read(rubrics_dir, tmp_path, monkeypatch):
    fake = Echo()
    monkeypatch.setattr(engine, "send_pending", fake)
    rub = Rubrics.from_dir(rubrics_dir)
    assert str(rubrics_dir) in rub.label()
    ins = [J.JudgeInput(t, t, f"问题{t}", f"回答{t}", judge_rubric(t).names()) for t in ("FDD", "FTU", "FQA")]
    with ResponseStore(tmp_path / "s.sqlite") as store:
        res = J.judge_batch(stub_spec(), store, ins, method="vanilla", rubrics=rub, progress=False)
        assert [r.score for r in res] == [60.0, 85.0, 87.2] and all(r.status == "ok" for r in res)
        assert fake.sent[:3] == ["FDD-VANILLA q=问题FDD a=回答FDD 输出 {\"评分分数\":\"xx\"}",
                                 "FTU-VANILLA q=问题FTU a=回答FTU", "FQA-VANILLA q=问题FQA a=回答FQA"]
        fake.sent.clear()
        [traj] = J.iterajudge(stub_spec(), store, ins[:1], rubrics=rub, progress=False)
        # FDD: the authors' two revision prompts in their order, then their judge against the revised text
        assert fake.sent == ["FDD-REVISE-1 q=问题FDD a=回答FDD", "FDD-REVISE-2 q=问题FDD a=FDD-REVISE-1 revised",
                             "FDD-JUDGE q=问题FDD a=回答FDD ref=FDD-REVISE-2 revised"]
        assert traj.result.score == 60.0
        fake.sent.clear()
        [ftu] = J.iterajudge(stub_spec(), store, [ins[1]], rubrics=rub, progress=False)
        assert all(not t.startswith("FTU") for t in fake.sent)  # no published per-dimension FTU refiner: ours
        assert ftu.result.score == 70.0


def test_ours_by_default_and_versions_differ(rubrics_dir):
    inp = J.JudgeInput("x", "FDD", "q", "a", judge_rubric("FDD").names())
    msgs, version, fmt = Rubrics().vanilla(inp, (0, 100))
    assert version == JUDGE_VANILLA_VERSION and fmt == "json" and "100、60或0" in msgs[0]["content"]
    _, published_version, published_fmt = Rubrics.from_dir(rubrics_dir).vanilla(inp, (0, 100))
    assert published_version != version and published_fmt == "fdd_published"


@pytest.mark.parametrize("fmt, reply, score", [
    ("fdd_published", '{"评分分数": "100", "描述": "完全正确"}', 100),
    ("fdd_published", '{"评分分数": 60}', 60),
    ("ftu_published", "评价证据：……\n评分：[[ 72 ]]", 72),
    ("ftu_published", "评分：72", 72),
    ("fqa_published", '{"总评分": {"总分": 87.2}}', 87.2),
    ("fqa_published", '{"总评分": {"总分": 90}}', 90),
])
def test_published_verdict_formats(fmt, reply, score):
    assert J.parse_judge_score(reply, (0, 100), fmt)[0] == score


@pytest.mark.parametrize("fmt, reply", [
    ("fdd_published", '{"score": 60}'), ("fdd_published", '{"评分分数": "很好"}'),
    ("ftu_published", "我给85分"), ("ftu_published", "评分：[[120]]"),
    ("fqa_published", '{"总分": 80}'), ("fqa_published", '{"总评分": {"总分": "高"}}'),
])
def test_published_verdicts_that_cannot_be_read_are_invalid(fmt, reply):
    assert J.parse_judge_score(reply, (0, 100), fmt)[0] is None


def test_every_published_template_has_a_rubric_of_ours():
    assert set(PUBLISHED) <= set(JUDGE_TASKS)
    for task, roles in PUBLISHED.items():
        for role in roles:
            if role.startswith("refine:"):
                assert role.split(":", 1)[1] in judge_rubric(task).names()
