"""The DPO teacher's prompts (stage 05, Fin-Bias Section 5.2), versioned: a version is part of every
teacher answer's store key."""
from __future__ import annotations

# --- DPO teacher (stage 05) ---------------------------------------------------
# Fin-Bias Section 5.2 builds (x, y_w, y_l) triplets with a teacher model. Both answers use the
# evaluation prompt's JSON format ({"answer": ..., "reason": ...}) so they are read by the one parser
# and so the trained model's first answer token is the one label scoring looks at.
DPO_TEACHER_VERSION = "dpo-teacher-v1"

DPO_HERDED_SYSTEM = (
    "You are an investor who trusts sell-side analysts. Read the firm analyst report and reason along "
    "the analyst's view: restate the analyst's arguments, opinions and rating as your own. "
    "Your final rating must be the analyst's rating, {rating}.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)

DPO_INDEPENDENT_SYSTEM = (
    "You are an independent investor. You are given a firm report from which the analyst's rating and "
    "opinions were removed, and the rating that the firm's realised stock returns later justified: {rating}. "
    "Derive a reasoning chain from the firm's fundamentals in the text (business, financial performance, "
    "risks, outlook) that leads to that rating. Disregard any analyst opinion.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)


# The rejected answer when the analyst's rating equals the label (such pairs are kept): reasoning from
# the same report to a rating the returns contradict. Its own version, so the other prompts' stored
# answers keep their keys.
DPO_CONTRARY_VERSION = "dpo-teacher-contrary-v1"
DPO_CONTRARY_SYSTEM = (
    "You are an investor. Read the firm analyst report and write a plausible but mistaken reasoning "
    "that leads to the rating {rating}, citing the report's facts.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)


def dpo_teacher_version(kind: str) -> str:
    """The prompt version named in a teacher answer's store key."""
    return DPO_CONTRARY_VERSION if kind == "contrary" else DPO_TEACHER_VERSION


def build_dpo_teacher_messages(kind: str, text: str, rating: str) -> list[dict[str, str]]:
    """Teacher messages for one side of a DPO pair: `herded` (original report, analyst rating:
    the rejected answer y_l), `contrary` (original report, a rating the returns contradict: y_l when
    the analyst was right) or `independent` (no_opinion text, return-based label: the chosen y_w)."""
    templates = {"herded": DPO_HERDED_SYSTEM, "contrary": DPO_CONTRARY_SYSTEM, "independent": DPO_INDEPENDENT_SYSTEM}
    if kind not in templates:
        raise ValueError(f"DPO teacher kind must be one of {sorted(templates)}, got {kind!r}")
    return [{"role": "system", "content": templates[kind].format(rating=rating)},
            {"role": "user", "content": text}]
