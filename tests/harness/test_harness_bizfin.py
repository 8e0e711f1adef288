"""BizFinBench through the project's runner path and through the inspect tasks: equal item scores
and equal family scores (== on floats), for a rule-scored family (both rules) and a judged family
under the vanilla judge and IteraJudge, with a call that never succeeds.

The runner path is stage 07's: `engine.chat` for the answers, `judge_batch` for the verdicts and
`score_model` for the item rows. The stub answers like models do: a JSON answer, a fenced one, prose
with the number, a refusal; a judge prompt gets a JSON verdict, prose, or a score off the scale; a
refinement request gets the answer back rewritten. Replies are picked by a hash of the prompt.
"""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("inspect_ai", reason="the harness extra is not installed (pip install -e '.[harness]')")

from llm_helpers import api_record, write_registry

from finlib.bizfin.benchmark.stage import score_model
from finlib.bizfin.iterajudge.judge import judge_batch
from finlib.harness.bizfin_rows import family_scores, load_items
from finlib.harness.inspect_common import registry_record
from finlib.llm import openai_backend
from finlib.llm.engine import ChatItem, chat
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import StubServer, ThreadedStub

pytestmark = pytest.mark.slow  # live local server, two paths per family

ANSWERS = (
    '{"answer": 4.5}',
    '```json\n{"answer": "0.125", "reason": "净利润除以营业收入"}\n```',
    "答案是4.5，理由如下：三日涨跌幅相加。",
    "抱歉，我无法回答这个问题。",
)
VERDICTS = (
    '{"score": 85, "reason": "趋势描述准确"}',
    '{"score": 40, "reason": "数值有误"}',
    "我认为这个回答不错，给80分。",
    '{"score": 140}',
)


def reply_for(text: str) -> str:
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    if "修订" in text and "只输出修订后的完整回答" in text:
        return "修订后的回答：" + text[-40:]
    if '"score"' in text:
        return VERDICTS[h % len(VERDICTS)]
    return ANSWERS[h % len(ANSWERS)]


def never_answered(text: str) -> bool:
    """Calls that always get a 500: FNC's second item, and FDD's refinements of the volume item."""
    return ("样本科技" in text and "金融数值推理" in text and '"score"' not in text) or (
        "成交量" in text and "只输出修订后的完整回答" in text
    )


class BizStub(StubServer):
    async def _answer(self, req: dict, text: str, fault: str | None) -> bytes:
        if never_answered(text):
            return self._respond(500, {"error": {"message": "server error (scripted)"}})
        n_in = max(1, len(text) // 4)
        self.answers[text] += 1
        return self._respond(
            200,
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "stub",
                "usage": {"prompt_tokens": n_in, "completion_tokens": 9, "total_tokens": n_in + 9},
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply_for(text)}}
                ],
            },
        )


def runner_rows(spec, family: str, method: str, store: ResponseStore) -> list[dict]:
    items = load_items(family)
    answers = chat(
        spec,
        [ChatItem(it.id, it.chat_messages(spec.supports_system), "v") for it in items],
        store,
        max_new_tokens=1024,
        progress=False,
    )

    def judge(inputs):
        return judge_batch(
            spec,
            store,
            inputs,
            method=method,
            max_new_tokens=1024,
            progress=False,
        )

    return score_model(spec.name, {family: items}, answers, judge, (0, 100))


def inspect_rows(family: str, method: str, registry, base_url: str, log_dir) -> tuple[list[dict], dict, str]:
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import list_eval_logs, read_eval_log
    from inspect_ai.model import get_model

    from finlib.harness.inspect_tasks import FAMILY_TASKS

    model = get_model("openai-api/stub/stub-model", base_url=base_url, api_key="stub-key", max_retries=0)
    task = FAMILY_TASKS[f"bizfinbench_{family.lower()}"](
        record="stub", registry=str(registry), judge_method=method, cache=False
    )
    inspect_eval(task, model=model, log_dir=str(log_dir), display="none")
    (info,) = list_eval_logs(str(log_dir))
    log = read_eval_log(info)
    rows = [next(iter(s.scores.values())).metadata["row"] for s in log.samples]
    metrics = {k.removeprefix("bizfin_scores/"): m.value for k, m in log.results.scores[0].metrics.items()}
    return rows, metrics, log.status


@pytest.mark.parametrize(("family", "method"), [("FNC", "vanilla"), ("FDD", "vanilla"), ("FDD", "iterajudge")])
def test_runner_and_inspect_agree(tmp_path, monkeypatch, family, method):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("STUB_TEST_KEY", "stub-key")
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "params").mkdir()
    out = {}
    for path in ("runner", "inspect"):
        with ThreadedStub() as server:
            server.stub.__class__ = BizStub
            record = api_record("stub", server.base_url, "STUB_TEST_KEY", concurrency=2, max_attempts=2, timeout_s=5)
            registry = tmp_path / write_registry(tmp_path, record)
            if path == "runner":
                monkeypatch.setattr(openai_backend, "sleep", _no_wait)
                openai_backend.reset_breakers()
                rows = runner_rows(registry_record("stub", registry), family, method, ResponseStore(tmp_path / "s.db"))
                out[path] = (rows, family_scores(rows, "stub"), "success")
            else:
                out[path] = inspect_rows(family, method, registry, server.base_url, tmp_path / "logs")
    (rrows, rscores, _), (irows, iscores, status) = out["runner"], out["inspect"]
    assert status == "success"
    keys = ("item_id", "status", "parsed", "official", "ours", "answer", "judge_status")
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731  (NaN: outside N on both paths)
    for r, i in zip(sorted(rrows, key=lambda r: r["item_id"]), sorted(irows, key=lambda r: r["item_id"]), strict=True):
        assert all(same(r[k], i[k]) for k in keys), (r, i)
    assert iscores == rscores
    assert rscores["n_items"] == len(load_items(family))
    assert rscores["not_answered"] == (0 if (family, method) == ("FDD", "vanilla") else 1)


async def _no_wait(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(0)
