"""What a reply in each task's answer format looks like, right (carrying the gold) or wrong: a task record's
`reply` (`finlib.bizfin.tasks`). The rehearsal's simulated models answer with these, so a declared task is
answered in its own format without the rehearsal naming it."""

from __future__ import annotations

import json
import re

from finlib.bizfin.scorers import SP_KEY, gold_entities

COT = "根据数据参考逐项计算与核对。"


def answer_json(gold: str, right: bool) -> str:
    """FNC, FTR: a JSON object whose `answer` is the gold, or 0."""
    return json.dumps({"cot": COT, "answer": gold if right else "0"}, ensure_ascii=False)


def news_indices(gold: str, right: bool) -> str:
    """AEA: the gold's news indices, or one that no item lists."""
    idx = [int(x) for x in re.findall(r"\d+", gold)] if right else [99]
    return json.dumps({"cot": COT, "相关新闻序号": idx}, ensure_ascii=False)


def emotion_list(gold: str, right: bool) -> str:
    """ER: the gold list as written, or an empty one."""
    return gold if right else "[]"


def price_direction(gold: str, right: bool) -> str:
    """SP: the gold direction under the published key, or no call."""
    return json.dumps({"cot": COT, SP_KEY: gold if right else "无法判断"}, ensure_ascii=False)


def entity_results(gold: str, right: bool) -> str:
    """FNER: the gold's entities, or none."""
    ents = gold_entities(gold) if right else []
    return json.dumps({"results": [{"type": t, "text": x} for t, x in ents]}, ensure_ascii=False)


def free_text(gold: str, right: bool) -> str:
    """Judge-scored tasks: free text, longer and marked complete when right (the simulated judge reads the mark)."""
    quality = "完整准确" if right else "简略"
    return f"回答（{quality}）：" + ("根据材料，" + "，".join(["数据与结论一致"] * (8 if right else 1)))
