"""What a stage reads: `cfg.section(name)`, validated, read-only, every declared key there without a default."""
from __future__ import annotations

import copy
import json
import pickle

import pytest
import yaml

from finlib.core.params import SECTION_MODELS, Section, SectionError

MUTATIONS = {
    "assign a key": lambda s: s.__setitem__("window", 20),
    "delete a key": lambda s: s.__delitem__("window"),
    "update": lambda s: s.update(window=20),
    "merge in place": lambda s: s.__ior__({"window": 20}),
    "setdefault": lambda s: s.setdefault("window", 20),
    "pop": lambda s: s.pop("window"),
    "popitem": lambda s: s.popitem(),
    "clear": lambda s: s.clear(),
    "assign a nested key": lambda s: s["mackinlay"].__setitem__("gap", 0),
    "append to a list": lambda s: s["quantiles"].append(0.9),
    "assign a list item": lambda s: s["quantiles"].__setitem__(0, 0.1),
    "extend a list in place": lambda s: s["quantiles"].__iadd__([0.9]),
    "sort a list": lambda s: s["quantiles"].sort(reverse=True),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_mutating_a_section_raises_and_changes_nothing(tmp_run, mutate):
    labels = tmp_run.section("labels")
    before = json.dumps(labels, sort_keys=True)
    with pytest.raises(SectionError, match=r"params section 'labels(\.\w+)?' is read-only"):
        mutate(labels)
    assert json.dumps(labels, sort_keys=True) == before
    assert json.dumps(tmp_run.params["labels"], sort_keys=True) == before


def test_a_declared_key_cannot_be_read_with_a_default(tmp_run):
    labels = tmp_run.section("labels")
    with pytest.raises(SectionError, match=r"declares 'window'.*read section\['window'\]"):
        labels.get("window", 60)
    with pytest.raises(SectionError, match="declares 'gap'"):
        labels["mackinlay"].get("gap", 30)
    assert labels.get("window") == labels["window"] == tmp_run.params["labels"]["window"]
    assert labels.get("not_a_key", "absent") == "absent"  # no key to shadow: a plain lookup


def test_free_mappings_keep_get_with_a_default(tmp_run):
    """`inference.endpoints` maps model names (not declared keys) to overrides: a missing name has a meaning."""
    endpoints = tmp_run.section("inference")["endpoints"]
    assert endpoints.get("no-such-model", {}) == {}


def test_override_keys_left_out_keep_get_with_a_default():
    """`rehearsal.profiles.<model>` lists only what it changes: a key left out falls back to the planted value."""
    from finlib.core.params import RehearsalSection, frozen

    profiles = frozen({"profiles": {"m": {"follow": 0.5}}}, RehearsalSection, "rehearsal")["profiles"]
    assert profiles["m"].get("skill", 1.25) == 1.25 and profiles["m"]["follow"] == 0.5
    with pytest.raises(SectionError, match="read-only"):
        profiles["m"]["skill"] = 2.0


def test_every_section_is_a_read_only_view_of_the_same_values(tmp_run):
    """Dumps and hashes of a section are those of the params it was read from (fingerprints unchanged)."""
    for name in SECTION_MODELS:
        section, raw = tmp_run.section(name), tmp_run.params[name]
        assert isinstance(section, Section) and section == raw
        assert json.dumps(section, sort_keys=True) == json.dumps(raw, sort_keys=True)
        assert yaml.safe_dump(section) == yaml.safe_dump(raw) and yaml.dump(section) == yaml.dump(raw)


def test_copies_are_plain_and_the_callers_own(tmp_run):
    labels = tmp_run.section("labels")
    for mine in (copy.deepcopy(labels), pickle.loads(pickle.dumps(labels))):
        assert type(mine) is dict and type(mine["mackinlay"]) is dict and type(mine["quantiles"]) is list
        mine["mackinlay"]["gap"] = 0
        mine["quantiles"].append(0.9)
    shallow = dict(labels)
    shallow["window"] = 5
    assert labels == tmp_run.params["labels"] and labels["mackinlay"]["gap"] != 0


def test_a_section_is_read_again_after_the_params_change(tmp_run):
    """A section is a snapshot of validated values: an edit of cfg.params shows in the next read, checked."""
    from finlib.core.config import ConfigError

    first = tmp_run.section("labels")
    tmp_run.params["labels"]["window"] = first["window"] + 1
    assert tmp_run.section("labels")["window"] == first["window"] + 1 != first["window"]
    tmp_run.params["labels"]["window"] = "sixty"
    with pytest.raises(ConfigError, match="labels.window"):
        tmp_run.section("labels")


def test_the_synthetic_generator_defaults_are_params_default_yaml(repo_root):
    """SynthParams is the schema's model; a knob left out takes params/default.yaml's value (read here with yaml)."""
    from finlib.core.params import SyntheticSection
    from finlib.finbias.data.synth import SynthParams

    written = yaml.safe_load((repo_root / "params" / "default.yaml").read_text(encoding="utf-8"))["data"]["synthetic"]
    assert issubclass(SynthParams, SyntheticSection) and SynthParams.model_fields.keys() == written.keys()
    assert SynthParams.from_section({}).model_dump() == written
    assert SynthParams.from_section({"n_reports": 7}).model_dump() == {**written, "n_reports": 7}
    with pytest.raises(Exception, match="frozen"):
        SynthParams.from_section({}).n_reports = 3  # type: ignore[misc]
