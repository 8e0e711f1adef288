"""IteraJudge and the vanilla judge: control flow with a scripted fake model behind the real engine
and response store (dimension order, q in every step, trajectory, contrastive prompt, strict
parsing, resume without repeating finished steps), plus one run through the HTTP stub server."""
from __future__ import annotations

import json
import re

import pytest

from finlib.bizfin.iterajudge import judge as J
from finlib.bizfin.prompts import JUDGE_CONTRASTIVE_VERSION, JUDGE_REFINE_VERSION
from finlib.llm import engine
from finlib.llm.store import ResponseStore, Result
from finlib.rehearsal.stub_server import ThreadedStub, stub_spec

SPEC = stub_spec()  # never contacted: send_pending is replaced by the fake below
DIMS = ("准确性", "完整性", "分析深度")  # three of the FQA rubric's dimensions, in a chosen order
Q = "根据数据描述股票A的走势：|日期|涨跌幅|\n|1月2日|+3%|\n|1月3日|-1%|"


class FakeModel:
    """Scripted model at the engine's backend switch: every request actually 'sent' is logged;
    refinement calls append the dimension's tag to the answer, judge calls reply `judge_reply`.
    `fail_on` (substring) makes matching calls error; `crash_after` raises after N sends."""

    def __init__(self, judge_reply: str = '{"score": 80, "reason": "ok"}', fail_on: str | None = None,
                 crash_after: int | None = None):
        self.sent: list[str] = []
        self.judge_reply, self.fail_on, self.crash_after = judge_reply, fail_on, crash_after

    def reply(self, text: str) -> str:
        if "修订者" in text:
            m = re.search(r"【评估标准：(.*?)】\n.*?\n\n【回答】\n(.*?)\n\n不要解释", text, re.DOTALL)
            return f"{m.group(2)}+[{m.group(1)}]"
        return self.judge_reply

    def __call__(self, spec, pending, store, **kw):
        results = []
        for req in pending:
            if self.crash_after is not None and len(self.sent) >= self.crash_after:
                store.put_many(results)
                raise KeyboardInterrupt("scripted interruption")
            text = req.messages[-1]["content"]
            self.sent.append(text)
            if self.fail_on and self.fail_on in text:
                results.append(Result.for_request(req, status="error", error="scripted failure"))
            else:
                results.append(Result.for_request(req, status="ok", raw_text=self.reply(text), input_tokens=10,
                                                  output_tokens=5, cost_usd=0.001, truncated_output=False))
        store.put_many(results)


@pytest.fixture()
def store(tmp_path):
    with ResponseStore(tmp_path / "r.sqlite") as s:
        yield s


@pytest.fixture()
def fake(monkeypatch):
    model = FakeModel()
    monkeypatch.setattr(engine, "send_pending", model)
    return model


def inputs(n: int = 2, dims=DIMS) -> list[J.JudgeInput]:
    return [J.JudgeInput(f"i{i}", "FQA", f"{Q} #{i}", f"股票A先涨后跌{i}", dims) for i in range(n)]


def run_itera(store, ins, **kw):
    return J.iterajudge(SPEC, store, ins, progress=False, **kw)


def test_refinement_follows_dimension_order_with_q_in_every_step(store, fake):
    trajs = run_itera(store, inputs(1))
    refine_calls = [t for t in fake.sent if "修订者" in t]
    assert [re.search(r"【评估标准：(.*?)】", t).group(1) for t in refine_calls] == list(DIMS)
    assert all(Q in t for t in fake.sent)  # the question in every refine step and in the judge call
    # y_k = refine(y_{k-1}): each step sees the previous step's output
    assert "股票A先涨后跌0+[准确性]+[完整性]" in refine_calls[2]
    assert trajs[0].texts() == ["股票A先涨后跌0", "股票A先涨后跌0+[准确性]",
                                "股票A先涨后跌0+[准确性]+[完整性]",
                                "股票A先涨后跌0+[准确性]+[完整性]+[分析深度]"]


def test_contrastive_prompt_holds_original_and_final_refinement(store, fake):
    trajs = run_itera(store, inputs(1))
    judge_call = fake.sent[-1]
    assert "【回答】\n股票A先涨后跌0\n" in judge_call
    assert "【参考回答】\n" + trajs[0].texts()[-1] + "\n" in judge_call
    assert all(d in judge_call for d in DIMS)
    assert trajs[0].result == J.JudgeResult("i0", 80.0, "ok", '{"score": 80, "reason": "ok"}', "",
                                            pytest.approx(0.004))
    assert trajs[0].judge_raw == '{"score": 80, "reason": "ok"}'


def test_trajectory_frame_keeps_every_step_and_its_delta(store, fake):
    frame = J.trajectories_frame(run_itera(store, inputs(2)))
    assert len(frame) == 2 * (1 + len(DIMS))
    one = frame[frame["id"] == "i1"].sort_values("k")
    assert list(one["k"]) == [0, 1, 2, 3]
    assert list(one["dimension"])[1:] == list(DIMS)
    assert one["diff"].iloc[1] == "{++[准确性]+}"
    assert one["chars_added"].iloc[1] == len("+[准确性]") and one["chars_removed"].iloc[1] == 0
    summary = J.trajectory_summary(run_itera(store, inputs(2)))
    assert set(summary.columns) >= {f"change[{d}]" for d in DIMS}
    json.dumps(J.to_json(run_itera(store, inputs(1))), ensure_ascii=False)  # JSON-able for artifacts


def test_resume_mid_trajectory_repeats_no_finished_step(store, monkeypatch):
    first = FakeModel(crash_after=3)  # 2 items: step 1 for both, then step 2 of the first, then crash
    monkeypatch.setattr(engine, "send_pending", first)
    with pytest.raises(KeyboardInterrupt):
        run_itera(store, inputs(2))
    assert len(first.sent) == 3
    second = FakeModel()
    monkeypatch.setattr(engine, "send_pending", second)
    trajs = run_itera(store, inputs(2))
    # remaining: step 2 of i1, step 3 of both, 2 judge calls; nothing sent before is sent again
    assert len(second.sent) == 5 and not set(second.sent) & set(first.sent)
    assert [t.result.status for t in trajs] == ["ok", "ok"]
    assert [s.cached for s in trajs[0].steps] == [True, True, False]
    third = FakeModel()
    monkeypatch.setattr(engine, "send_pending", third)
    run_itera(store, inputs(2))
    assert third.sent == []  # a finished run costs nothing to rerun


@pytest.mark.parametrize("reply, why", [
    ("I would give it 80 points.", "no JSON object"),
    ('{"score": "很好"}', "not an integer"),
    ('{"score": 85.5}', "not an integer"),
    ('{"score": true}', "not an integer"),
    ('{"score": 120}', "outside 0..100"),
    ('{"score": 80} {"score": 40}', "conflicting"),
    ('{"rating": 80}', "no JSON object with a 'score' key"),
    ("", "empty"),
])
def test_unreadable_judge_output_is_invalid_never_zero(store, monkeypatch, reply, why):
    monkeypatch.setattr(engine, "send_pending", FakeModel(judge_reply=reply))
    for method in J.METHODS:
        [res] = J.judge_batch(SPEC, store, inputs(1), method=method, progress=False)
        assert res.status == "invalid" and res.score is None and why in res.note
        assert res.raw_text == reply


@pytest.mark.parametrize("reply, score", [
    ('{"score": 60, "reason": "部分错误"}', 60),
    ('```json\n{"score": "100", "reason": "完全正确"}\n```', 100),
    ('<think>{"score": 10}</think>\n{"score": 0, "reason": "趋势错误"}', 0),
    ('{"score": 75.0}', 75),
    ('{"score": 60, "reason": "趋势正确，\n但数值有误"}', 60),      # a raw line break inside the reason
])
def test_readable_judge_output(reply, score):
    assert J.parse_judge_score(reply) == (score, "json")


def test_scale_is_a_parameter(store, monkeypatch):
    fake = FakeModel(judge_reply='{"score": 5}')
    monkeypatch.setattr(engine, "send_pending", fake)
    [res] = J.judge_batch(SPEC, store, inputs(1), method="vanilla", score_range=(1, 5), progress=False)
    assert res.score == 5.0 and "1到5之间的整数" in fake.sent[0]
    [res] = J.judge_batch(SPEC, store, inputs(1), method="vanilla", score_range=(0, 4), progress=False)
    assert res.status == "invalid"


def test_failed_refine_step_stops_that_item_only(store, monkeypatch):
    fake = FakeModel(fail_on="股票A先涨后跌1+[准确性]")  # step 2 of item i1 fails
    monkeypatch.setattr(engine, "send_pending", fake)
    trajs = run_itera(store, inputs(2))
    assert trajs[0].result.status == "ok"
    bad = trajs[1].result
    assert bad.status == "not_answered" and "step 2 (完整性)" in bad.note and bad.score is None
    assert len(trajs[1].steps) == 2 and trajs[1].judge_raw is None
    # the failure is retried next run; the finished step 1 is not
    retry = FakeModel()
    monkeypatch.setattr(engine, "send_pending", retry)
    assert [t.result.status for t in run_itera(store, inputs(2))] == ["ok", "ok"]
    assert len(retry.sent) == 3  # step 2 and 3 of i1, its judge call


def test_vanilla_judge_one_call_with_reference(store, fake):
    ins = [J.JudgeInput("v", "FQA", "什么是市盈率？", "股价除以每股收益。", ("准确性",), reference="参考：P/E")]
    [res] = J.judge_batch(SPEC, store, ins, method="vanilla", progress=False)
    assert res.score == 80.0 and len(fake.sent) == 1
    assert "【参考答案】\n参考：P/E" in fake.sent[0] and "什么是市盈率？" in fake.sent[0]


def test_inputs_are_validated():
    with pytest.raises(ValueError, match="dimensions"):
        J.JudgeInput("x", "FDD", "q", "a", ())
    with pytest.raises(ValueError, match="duplicate"):
        J.vanilla_judge(SPEC, None, [J.JudgeInput("x", "FDD", "q", "a", ("d",))] * 2)
    with pytest.raises(ValueError, match="unknown judge method"):
        J.judge_batch(SPEC, None, [], method="revise")


def test_refine_and_judge_versions_are_separate_store_keys():
    assert len({JUDGE_REFINE_VERSION, JUDGE_CONTRASTIVE_VERSION}) == 2


def test_through_the_http_stub(tmp_path, monkeypatch):
    """The real engine path (OpenAI client -> stub server): the stub answers a Fin-Bias JSON with
    no score, so every verdict must be 'invalid' with the raw text kept; a rerun sends nothing."""
    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    with ThreadedStub() as stub, ResponseStore(tmp_path / "s.sqlite") as store:
        spec = stub_spec(stub.base_url)
        results = J.judge_batch(spec, store, inputs(2, DIMS[:2]), method="iterajudge", progress=False)
        assert [r.status for r in results] == ["invalid", "invalid"]
        assert all(r.raw_text and "answer" in r.raw_text for r in results)
        n = stub.stub.n_requests
        assert n == 2 * 2 + 2
        J.judge_batch(spec, store, inputs(2, DIMS[:2]), method="iterajudge", progress=False)
        assert stub.stub.n_requests == n


def test_failed_judge_call_is_not_answered_and_cut_refinements_are_flagged(store, monkeypatch):
    fake = FakeModel(fail_on="【回答】\n股票A先涨后跌0\n\n请给出")  # the vanilla judge call of item i0 fails
    monkeypatch.setattr(engine, "send_pending", fake)
    [res] = J.judge_batch(SPEC, store, inputs(1), method="vanilla", progress=False)
    assert res.status == "not_answered" and res.score is None and "scripted failure" in res.note

    class Cut(FakeModel):
        def __call__(self, spec, pending, store, **kw):
            super().__call__(spec, pending, store, **kw)
            store.conn.execute("UPDATE responses SET truncated_output = 1")  # every reply hit the token limit

    monkeypatch.setattr(engine, "send_pending", Cut())
    [t] = run_itera(store, inputs(1, DIMS[:1]))
    assert t.result.status == "ok" and "refinement cut at the token limit in step(s) [1]" in t.result.note


def test_inline_diff_shows_changed_spans_or_one_replacement():
    assert J.inline_diff("从55.24增长到58.32", "从55.32增长到59.14") != ""
    assert "[-" in J.inline_diff("收盘价10.80元", "收盘价10.50元")
    assert J.inline_diff("完全不同的回答", '{"answer": "x"}') == '[-完全不同的回答-]{+{"answer": "x"}+}'
    assert J.inline_diff("same", "same") == ""
