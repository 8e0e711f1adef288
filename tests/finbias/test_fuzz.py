"""Property tests (hypothesis) on the parts that read untrusted text: the rating parser (model
replies), the analyst-rating extractor and the sentence splitter (corpus text), and the params
loader (user files). No crash, bounded time on hostile input, ambiguous input -> unparsed.

Hostile inputs run in a forked child with a deadline, so a quadratic blow-up fails (or xfails,
for known ones, with the owner named) in seconds instead of hanging `make test`."""
from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finlib.core.config import ConfigError, load_params
from finlib.core.params import validate_params
from finlib.finbias.answers import parse_rating, parse_rating_detail
from finlib.finbias.perturb.ratings import extract_analyst_rating
from finlib.finbias.sentences import sentence_spans
from finlib.finbias.vocab import RATING_SYNONYMS, Rating

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEADLINE_S = 10.0  # per hostile call: the linear ones take < 1 s idle, up to ~5 s on our loaded 2 cores
KNOWN_DEADLINE_S = 3.0  # known blow-ups (xfail) are cut sooner: they only have to show they still blow up
LABELS = [r.value for r in Rating]


def _in_child(conn, fn, arg) -> None:
    try:
        t0 = time.perf_counter()
        out = fn(arg)
        conn.send(("ok", repr(out)[:200], time.perf_counter() - t0))
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent, which decides
        conn.send(("raised", f"{type(exc).__name__}: {str(exc)[:200]}", 0.0))


def bounded(fn, arg, seconds: float = DEADLINE_S) -> tuple[str, str]:
    """fn(arg) in a forked child: ("ok", repr) / ("raised", error); TimeoutError past `seconds`."""
    parent, child = mp.get_context("fork").Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_in_child, args=(child, fn, arg), daemon=True)
    proc.start()
    ready = parent.poll(seconds)
    if not ready:
        proc.kill()
        proc.join()
        raise TimeoutError(f"{fn.__module__}.{fn.__name__} took more than {seconds} s on {len(arg):,} chars")
    status, value, _ = parent.recv()
    proc.join()
    return status, value


HOSTILE = {
    "braces_1mb": "{" * 1_000_000,
    "closing_1mb": "}" * 1_000_000,
    "quotes_1mb": '"' * 1_000_000,
    "answer_keys_1mb": '{"answer": "bullish"} ' * 45_000,
    "hedges_1mb": "bullish or bearish " * 55_000,
    "newlines_1mb": "\n" * 1_000_000,
    "nul_and_controls": "\x00\x01\x1b[31m" * 200_000,
    "long_word_1mb": "a" * 1_000_000,
}
# Known blow-ups found by this file, with the module that owns the fix. Remove a marker when fixed.
KNOWN: dict[tuple[str, str], str] = {}  # (function, input) -> reason, for blow-ups not fixed yet
# Linear but long: 500k one-word sentences at Punkt's ~5-25 us each (idle vs loaded machine).
SLOW_BUT_LINEAR_S = {("sentence_spans", "dots_1mb"): 60.0}
HOSTILE.update({"nested_answer_keys": '{"answer": ' * 100_000, "think_tags": "<think>" * 100_000,
                "dots_1mb": ". " * 500_000})


def _cases():
    for fn in (parse_rating_detail, extract_analyst_rating, sentence_spans):
        for name in HOSTILE:
            reason = KNOWN.get((fn.__name__, name))
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            seconds = KNOWN_DEADLINE_S if reason else SLOW_BUT_LINEAR_S.get((fn.__name__, name), DEADLINE_S)
            yield pytest.param(fn, name, seconds, id=f"{fn.__name__}-{name}",
                               marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("fn, name, seconds", list(_cases()))
def test_hostile_input_is_bounded_and_does_not_crash(fn, name, seconds):
    status, value = bounded(fn, HOSTILE[name], seconds)
    assert status == "ok", value
    if fn is parse_rating_detail and name != "answer_keys_1mb":
        assert value.startswith("(None"), value  # nothing here is an answer


# ---------------------------------------------------------------- rating parser

@FUZZ
@given(st.text(max_size=3000))
def test_parser_never_crashes_and_returns_a_rating_or_none(text):
    rating, note = parse_rating_detail(text)
    assert rating is None or isinstance(rating, Rating)
    assert isinstance(note, str) and note
    assert parse_rating(text) == rating


NOISE = st.text(alphabet=st.characters(whitelist_categories=("Nd", "Zs", "Po"), blacklist_characters="\"'{}[]"),
                max_size=200)


@FUZZ
@given(NOISE, st.sampled_from(LABELS), NOISE)
def test_json_answer_is_read_whatever_surrounds_it(prefix, label, suffix):
    reply = prefix + json.dumps({"answer": label, "reason": "because"}) + suffix
    assert parse_rating(reply) == Rating(label)


SYNONYMS = [(r, t) for r, terms in RATING_SYNONYMS.items() for t in terms]


@FUZZ
@given(st.sampled_from(LABELS), st.sampled_from(LABELS), st.sampled_from([" or ", " / ", " to ", " and "]))
def test_hedges_between_two_ratings_are_unparsed(a, b, joiner):
    if a == b:
        return
    for reply in (f"{a}{joiner}{b}", f"Answer: {a}{joiner}{b}", f"My rating is {a}{joiner}{b}."):
        assert parse_rating(reply) is None, reply


@FUZZ
@given(st.sampled_from(LABELS), st.sampled_from(LABELS))
def test_two_different_answers_are_unparsed(a, b):
    reply = f"Answer: {a}.\nAnswer: {b}."
    assert parse_rating(reply) == (Rating(a) if a == b else None)


@FUZZ
@given(st.sampled_from(LABELS))
def test_negated_answers_are_unparsed(label):
    assert parse_rating(f"I am not {label}.") is None
    assert parse_rating(f"Answer: not {label}") is None


# ---------------------------------------------------------------- analyst-rating extractor

@FUZZ
@given(st.text(max_size=2000))
def test_extractor_never_crashes(text):
    r = extract_analyst_rating(text)
    assert r is None or isinstance(r, Rating)


@FUZZ
@given(st.text(alphabet=st.characters(whitelist_categories=("Nd", "Zs", "Po")), max_size=500))
def test_extractor_finds_nothing_without_words(text):
    assert extract_analyst_rating(text) is None


# ---------------------------------------------------------------- sentence splitter

@FUZZ
@given(st.text(max_size=3000))
def test_sentence_spans_are_ordered_substrings_covering_every_visible_character(text):
    spans = sentence_spans(text)
    last = 0
    for a, b in spans:
        assert last <= a < b <= len(text)
        assert text[a:b] == text[a:b].strip() and text[a:b]
        assert not text[last:a].strip(), (text[last:a],)  # nothing visible between sentences
        last = b
    assert not text[last:].strip()


# ---------------------------------------------------------------- params loader

YAML_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
YAML_VALUES = st.recursive(YAML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)
SECTIONS = st.sampled_from(["seed", "data", "labels", "perturb", "inference", "scoring", "dpo", "plan", "lables", "x"])


@FUZZ
@given(st.dictionaries(SECTIONS, YAML_VALUES, max_size=5))
def test_schema_accepts_or_raises_config_error_only(params):
    try:
        validate_params(params, "fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml: invalid params:\n  - ")


@pytest.fixture(scope="module")
def default_params(repo_root: Path) -> dict:
    return load_params(repo_root / "params" / "default.yaml")


@FUZZ
@given(st.sampled_from(["labels", "perturb", "inference", "scoring", "data"]), st.data())
def test_a_wrong_value_in_a_real_file_names_its_key(default_params, section, data):
    key = data.draw(st.sampled_from(sorted(default_params[section])))
    value = data.draw(YAML_VALUES)
    params = {**default_params, section: {**default_params[section], key: value}}
    try:
        validate_params(params, "f.yaml")
    except ConfigError as exc:
        assert f"{section}.{key}" in str(exc)


@FUZZ
@given(st.binary(max_size=400))
def test_params_files_of_arbitrary_bytes_load_or_raise_config_error(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("p") / "fuzz.yaml"
    path.write_bytes(blob)
    try:
        out = load_params(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
    else:
        assert isinstance(out, dict)


def test_yaml_alias_bomb_is_refused_at_once(tmp_path):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefg", "bcdefgh"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines))
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"aliases \(\*name\) expand it to 54,481,013 values \(limit 100,000\)"):
        load_params(p)
    assert time.perf_counter() - t0 < 2.0  # 9^8 leaves if expanded: minutes
    p.write_text(yaml.safe_dump({"inference": {"a": [1, 2], "b": None}}) + "x: &k [1, 2]\ny: *k\n")
    assert load_params(p)["y"] == [1, 2]  # a plain alias (yaml.safe_dump writes them) is fine


def test_params_file_that_is_not_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("seed: 1\n# café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not valid UTF-8 at byte \d+ \(line 2\)"):
        load_params(p)


def test_extends_chain_that_loops_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends` loops back"):
        load_params(tmp_path / "a.yaml")
