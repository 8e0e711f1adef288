"""The questions and graded answers of the calibration reference sets (FDD, FTU): fictional data, a correct
answer, and the same answer with counted errors injected. Each task's IteraJudge record
(`finlib.bizfin.iterajudge.records`) points at its builder (`fdd_cases`, `ftu_cases`);
`finlib.bizfin.iterajudge.reference_set` assembles and scores the answers."""
from __future__ import annotations

import json
from collections.abc import Callable

Case = tuple[str, Callable[[dict[str, int]], str]]  # (question, errors -> the answer with them injected)

# FDD: (firm, code, dates, daily change in %, closing price on the last day)
FDD_SERIES = (
    ("示例股份", "000001.XX", ("3月3日", "3月4日", "3月5日", "3月6日"), (1.20, -0.50, 2.30, 0.80), 10.50),
    ("样本科技", "000002.XX", ("4月7日", "4月8日", "4月9日", "4月10日"), (-2.10, -1.35, 0.60, -0.90), 23.18),
    ("虚构银行", "000003.XX", ("5月12日", "5月13日", "5月14日", "5月15日"), (0.35, 0.42, -0.18, 0.27), 6.04),
    ("演示能源", "000004.XX", ("6月2日", "6月3日", "6月4日", "6月5日"), (3.50, -4.20, 1.10, 2.05), 15.66),
    ("模拟医药", "000005.XX", ("7月21日", "7月22日", "7月23日", "7月24日"), (-0.75, 1.60, 1.25, -0.40), 41.30),
    ("假想汽车", "000006.XX", ("8月11日", "8月12日", "8月13日", "8月14日"), (2.40, 1.80, -3.10, -0.65), 32.90),
    ("范例消费", "000007.XX", ("9月15日", "9月16日", "9月17日", "9月18日"), (-1.05, -0.70, -1.45, 0.95), 58.72),
)

# FTU: (user request, correct calls as (tool, params), a wrong but plausible tool for the first call,
# the parameter to corrupt in each call and its wrong value)
FTU_TOOLS = ("可用工具：\n1. FinQuery(indicators: list, company_identifier: str, time_range: str)：查询行情、财务等金融数据。\n"
             "2. StockNews(symbol: str, time_range: str)：查询个股新闻。\n3. Calculator(expression: str)：计算复杂算式。\n"
             "4. FinWiki(query: str)：查询金融术语的定义。\n5. CalendarQuery(date: str)：判断某日是否为交易日。\n"
             "6. ReportQuery(query: str, time_range: str)：查询研报观点。")
FTU_CASES = (
    ("示例股份（000001.XX）2024年的净利润和营业收入分别是多少？再算一下净利率。",
     (("FinQuery", {"indicators": ["净利润", "营业收入"], "company_identifier": "000001.XX", "time_range": "2024"}),
      ("Calculator", {"expression": "净利润 / 营业收入"})), "StockNews",
     (("time_range", "2023"), ("expression", "营业收入 / 净利润"))),
    ("样本科技最近7天有什么新闻？它这几天的股价走势怎样？",
     (("StockNews", {"symbol": "样本科技", "time_range": "last 7 days"}),
      ("FinQuery", {"indicators": ["收盘价"], "company_identifier": "样本科技", "time_range": "last 7 days"})),
     "ReportQuery", (("time_range", "last 1 year"), ("indicators", ["市盈率"]))),
    ("2025年1月20日是交易日吗？如果是，查一下虚构银行那天的成交额。",
     (("CalendarQuery", {"date": "2025-01-20"}),
      ("FinQuery", {"indicators": ["成交额"], "company_identifier": "虚构银行", "time_range": "2025-01-20"})),
     "FinWiki", (("date", "2025-01-21"), ("company_identifier", "示例股份"))),
    ("什么是市净率？演示能源现在的市净率是多少？",
     (("FinWiki", {"query": "市净率"}),
      ("FinQuery", {"indicators": ["市净率"], "company_identifier": "演示能源", "time_range": "last 7 days"})),
     "Calculator", (("query", "市盈率"), ("indicators", ["市盈率"]))),
    ("模拟医药2023年和2024年的营业收入各是多少，增长率是多少？",
     (("FinQuery", {"indicators": ["营业收入"], "company_identifier": "模拟医药", "time_range": "2023-2024"}),
      ("Calculator", {"expression": "(2024年营业收入 - 2023年营业收入) / 2023年营业收入"})),
     "ReportQuery", (("time_range", "2024"), ("expression", "2024年营业收入 - 2023年营业收入"))),
    ("券商最近怎么看假想汽车？它近一个月涨了多少？",
     (("ReportQuery", {"query": "假想汽车", "time_range": "last 1 month"}),
      ("FinQuery", {"indicators": ["区间涨跌幅"], "company_identifier": "假想汽车", "time_range": "last 1 month"})),
     "StockNews", (("query", "汽车行业"), ("time_range", "last 1 year"))),
    ("范例消费的股息率是多少？如果我买1万元，一年大概能拿多少分红？",
     (("FinQuery", {"indicators": ["股息率"], "company_identifier": "范例消费", "time_range": "last 1 year"}),
      ("Calculator", {"expression": "10000 * 股息率"})),
     "FinWiki", (("company_identifier", "样本科技"), ("expression", "10000 / 股息率"))),
)


_FIRMS = ("示例股份", "样本科技", "虚构银行", "演示能源", "模拟医药", "假想汽车", "范例消费", "测试电子", "样例化工",
          "拟态物流", "虚拟地产", "示范农业", "演练证券", "模型传媒", "假定钢铁", "试点航运", "推演软件", "设想食品",
          "构想环保", "假设机械")


def generated_fdd_series(n: int) -> tuple[tuple, ...]:
    """FDD series beyond the hand-written ones, seeded (the files stay reproducible): four daily changes
    with no zero day and a closing price, for the fictional firms in `_FIRMS`."""
    import random

    rng = random.Random(20250522)
    out = []
    for i in range(len(FDD_SERIES), n):
        month = 1 + i % 12
        dates = tuple(f"{month}月{d}日" for d in (10, 11, 12, 13))
        changes = tuple(round(rng.choice((-1, 1)) * rng.uniform(0.15, 4.5), 2) for _ in dates)
        out.append((_FIRMS[i], f"{i + 1:06d}.XX", dates, changes, round(rng.uniform(4.0, 80.0), 2)))
    return FDD_SERIES + tuple(out)


# FTU templates for the questions beyond the hand-written ones: (request, calls, wrong tool, corruptions);
# {firm}/{code} filled per question.
_FTU_TEMPLATES = (
    ("{firm}（{code}）2024年的毛利润和营业收入是多少？再算一下毛利率。",
     (("FinQuery", {"indicators": ["毛利润", "营业收入"], "company_identifier": "{code}", "time_range": "2024"}),
      ("Calculator", {"expression": "毛利润 / 营业收入"})), "StockNews",
     (("time_range", "2022"), ("expression", "营业收入 / 毛利润"))),
    ("{firm}最近一个月有哪些公告？这段时间它的换手率怎样？",
     (("StockNews", {"symbol": "{firm}", "time_range": "last 1 month"}),
      ("FinQuery", {"indicators": ["换手率"], "company_identifier": "{firm}", "time_range": "last 1 month"})),
     "FinWiki", (("time_range", "last 1 year"), ("indicators", ["市盈率"]))),
    ("2025年2月{day}日是交易日吗？如果是，查一下{firm}那天的收盘价。",
     (("CalendarQuery", {"date": "2025-02-{day}"}),
      ("FinQuery", {"indicators": ["收盘价"], "company_identifier": "{firm}", "time_range": "2025-02-{day}"})),
     "ReportQuery", (("date", "2025-03-{day}"), ("company_identifier", "示例股份"))),
    ("什么是{term}？{firm}最新的{term}是多少？",
     (("FinWiki", {"query": "{term}"}),
      ("FinQuery", {"indicators": ["{term}"], "company_identifier": "{firm}", "time_range": "last 1 year"})),
     "Calculator", (("query", "{firm}"), ("indicators", ["流动比率"]))),
)
_TERMS = ("资产负债率", "净资产收益率", "市销率", "速动比率", "存货周转率")


def _fill(value, **fields):
    if isinstance(value, str):
        return value.format(**fields)
    if isinstance(value, list):
        return [_fill(v, **fields) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, **fields) for k, v in value.items()}
    return value


def generated_ftu_cases(n: int) -> tuple[tuple, ...]:
    """FTU cases beyond the hand-written ones: the templates in turn, each with the next fictional firm."""
    out = []
    for i in range(len(FTU_CASES), n):
        request, calls, wrong_tool, corrupt = _FTU_TEMPLATES[i % len(_FTU_TEMPLATES)]
        f = {"firm": _FIRMS[i], "code": f"{i + 1:06d}.XX", "day": f"{i + 1:02d}", "term": _TERMS[i % len(_TERMS)]}
        out.append((_fill(request, **f), tuple((t, _fill(p, **f)) for t, p in calls), wrong_tool,
                    tuple((k, _fill(v, **f)) for k, v in corrupt)))
    return FTU_CASES + tuple(out)


def _fdd_question(firm: str, code: str, dates: tuple[str, ...], changes: tuple[float, ...], close: float) -> str:
    head = "|股票代码|股票简称|" + "|".join(f"涨跌幅[{d}]" for d in dates) + f"|收盘价[{dates[-1]}]|"
    row = f"|{code}|{firm}|" + "|".join(f"{c:.2f}%" for c in changes) + f"|{close:.2f}元|"
    return ("根据下面提供的数据描述这支股票的情况，包括变化趋势和一些数值:\n\n" + head + "\n"
            + "|---" * (len(dates) + 3) + "|\n" + row + "\n")


def _fdd_answer(firm: str, dates, changes, close, errors: dict[str, int]) -> str:
    """The correct description with `errors` injected: numbers shifted (first days first), day
    directions flipped (last days first), a day left out (the second)."""
    changes = list(changes)
    wrong_number = set(range(errors.get("number", 0)))
    flipped = set(range(len(changes) - errors.get("trend", 0), len(changes)))
    parts = []
    for i, (d, c) in enumerate(zip(dates, changes)):
        if errors.get("omission") and i == 1:
            continue
        shown = abs(c) + (0.40 if i in wrong_number else 0.0)
        up = (c > 0) != (i in flipped)
        parts.append(f"{d}{'上涨' if up else '下跌'}{shown:.2f}%")
    total = sum(changes)
    overall = "整体上行" if total > 0 else "整体下行"
    return f"{firm}" + "，".join(parts) + f"，最新收盘价{close:.2f}元，区间{overall}。"


def _ftu_question(request: str) -> str:
    return (FTU_TOOLS + "\n\n用户问题：" + request + "\n请以json格式输出需要调用的工具及参数："
            '{"Thought":"<思考过程>","Actions":[{"Action":"<工具名>","Action Input":{}}]}')


def _ftu_answer(calls, wrong_tool: str, wrong_params, errors: dict[str, int]) -> str:
    """The correct calls with `errors` injected: a wrong tool for the first call, wrong parameter
    values (one per call, in order), the calls in the wrong order with the second one dropped."""
    actions = [{"Action": tool, "Action Input": dict(params)} for tool, params in calls]
    for key, value in wrong_params[:errors.get("param", 0)]:
        target = next(a for a in actions if key in a["Action Input"])
        target["Action Input"][key] = value
    if errors.get("tool"):
        actions[0]["Action"] = wrong_tool
    if errors.get("coordination"):
        actions = actions[:1]
    thought = "先取得所需数据，再据此回答用户。" if len(actions) > 1 else "调用一个工具即可。"
    return json.dumps({"Thought": thought, "Actions": actions}, ensure_ascii=False)


def fdd_cases(n: int) -> list[Case]:
    """`n` FDD questions (a table of daily changes) and their description makers."""
    return [(_fdd_question(*s), lambda e, s=s: _fdd_answer(s[0], s[2], s[3], s[4], e)) for s in generated_fdd_series(n)]


def ftu_cases(n: int) -> list[Case]:
    """`n` FTU questions (a request and the tool list) and their tool-call plan makers."""
    return [(_ftu_question(c[0]), lambda e, c=c: _ftu_answer(c[1], c[2], c[3], e)) for c in generated_ftu_cases(n)]
