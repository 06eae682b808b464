"""The fresh-arm thresholds of the Gittins index told U[0, 1] (:mod:`icrl_gym.estimators.fresh_arm`), and the
record's play defaults that turn the family model's floor on (:func:`icrl_gym.checkpoint.set_play`)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from icrl_gym.agent_base import first_argmax
from icrl_gym.checkpoint import CheckpointError, find_checkpoint, main, read_record, set_play
from icrl_gym.estimators.fresh_arm import (
    SHIPPED_HORIZON,
    SHIPPED_PATH,
    build_fresh_arm_rule,
    fresh_arm_rule,
    load_fresh_arm_rule,
    save_fresh_arm_rule,
)
from icrl_gym.estimators.gittins import build_gittins_table


def _states(rng, horizon, runs=20):
    """Random count states (runs, K) with every arm's s + f + m <= horizon + 1, some arms untried."""
    k, m = int(rng.integers(2, 8)), int(rng.integers(1, horizon + 2))
    pulls = rng.multinomial(horizon + 1 - m, rng.dirichlet(np.ones(k)), size=runs) * (rng.random((runs, k)) < 0.7)
    successes = rng.binomial(pulls, rng.random((runs, k)))
    return successes, pulls - successes, m


def test_first_untried_decides_as_the_tables_first_argmax():
    """Reference: the first maximiser of G(s, f, m) over the arms, looked up in the table itself."""
    table = build_gittins_table(60)
    rule, rng, fired = build_fresh_arm_rule(table), np.random.default_rng(0), 0
    for _ in range(500):
        s, f, m = _states(rng, 60)
        first = first_argmax(table.lookup(s, f, m))
        expected = np.where((s + f)[np.arange(len(first)), first] == 0, first, -1)
        np.testing.assert_array_equal(rule.first_untried(s, f, m), expected)
        fired += int((expected >= 0).sum())
    assert 0 < fired < 500 * 20


def test_the_floor_replaces_a_tried_choice_with_the_indexs_untried_arm_only():
    """Reference, one run at a time: the table's first maximiser where it is untried and the choice is tried."""
    table = build_gittins_table(40)
    rule, rng, acted = build_fresh_arm_rule(table), np.random.default_rng(1), 0
    for _ in range(200):
        s, f, m = _states(rng, 40)
        chosen = rng.integers(0, s.shape[1], len(s))
        floored = rule.floor(s, f, m, chosen)
        for run in range(len(s)):
            best = int(first_argmax(table.lookup(s[run], f[run], m)[None])[0])
            fresh = s[run, best] + f[run, best] == 0
            expected = best if fresh and s[run, chosen[run]] + f[run, chosen[run]] > 0 else -1
            assert floored[run] == expected
            acted += expected >= 0
    assert acted > 0


def test_a_tried_arm_tied_with_the_fresh_index_before_the_first_untried_one_keeps_the_first_place():
    """A tie goes to the first arm: a tried arm whose index equals lambda*_m and comes first wins."""
    table = build_gittins_table(20)
    m = 10
    table.values[table.offsets[m] + 1 * (22 - m) + 1] = table.lookup(0, 0, m)  # G(1, 1, m) := lambda*_m
    rule = build_fresh_arm_rule(table)
    s, f = np.array([[1, 0], [0, 1]]), np.array([[1, 0], [0, 1]])
    np.testing.assert_array_equal(rule.first_untried(s, f, m), [-1, 0])


def test_the_shipped_thresholds_are_those_of_a_smaller_table():
    """A table for N >= T holds the same values on a game of T steps, so its thresholds on those states must too."""
    small = build_fresh_arm_rule(build_gittins_table(80))
    shipped = load_fresh_arm_rule(SHIPPED_PATH)
    assert shipped.horizon == SHIPPED_HORIZON and fresh_arm_rule(200).horizon == SHIPPED_HORIZON
    with np.load(SHIPPED_PATH, allow_pickle=False) as data:  # the file says what made it
        assert str(data["command"]) == "python -m icrl_gym.estimators.fresh_arm 1000"
        assert json.loads(str(data["software"]))["code"]["modified"] is False
    n, m = np.meshgrid(np.arange(1, 81), np.arange(1, 82), indexing="ij")
    valid = n + m <= 81
    for name in ("above", "reach"):
        np.testing.assert_array_equal(getattr(shipped, name)[n, m][valid], getattr(small, name)[n, m][valid])


def test_the_rule_file_round_trips_and_refuses_damage(tmp_path):
    rule = build_fresh_arm_rule(build_gittins_table(30))
    path = save_fresh_arm_rule(rule, tmp_path / "rule.npz")
    again = load_fresh_arm_rule(path)
    np.testing.assert_array_equal(again.above, rule.above)
    np.testing.assert_array_equal(again.reach, rule.reach)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="not a file of fresh-arm thresholds"):
        load_fresh_arm_rule(path)
    with pytest.raises(ValueError, match=r"\(31, 32\) integers"):
        type(rule)(30, 256, rule.above[:-1], rule.reach)
    with pytest.raises(IndexError, match="outside"):
        rule.first_untried(np.array([[30, 0]]), np.array([[0, 0]]), 5)


def _copy_family(tmp_path):
    stem = find_checkpoint("bernoulli-generalist-family")
    for suffix in (".json", ".safetensors"):
        shutil.copy(stem.with_suffix(suffix), tmp_path / f"family{suffix}")
    return tmp_path / "family"


def test_set_play_makes_the_agent_play_with_the_records_keywords(tmp_path, monkeypatch):
    from agents import pretrained

    stem = _copy_family(tmp_path)
    monkeypatch.chdir(tmp_path)
    main(["play", str(stem), "fresh_arm_floor=false"])
    record = read_record(stem)  # the hash renewed: the record reads back
    assert record.play == {"fresh_arm_floor": False}
    # the command as typed, with no folder of this machine
    assert record.meta["play"]["command"] == "python -m icrl_gym.checkpoint play family fresh_arm_floor=false"
    assert pretrained(stem).config()["fresh_arm_floor"] is False
    set_play(stem, {"fresh_arm_floor": True})
    assert pretrained(stem).config()["fresh_arm_floor"] is True
    assert pretrained(stem, fresh_arm_floor=False).config()["fresh_arm_floor"] is False  # the caller's wins
    set_play(stem, {"fresh_arm_flor": True})
    with pytest.raises(CheckpointError, match="'fresh_arm_flor', which GeneralistAgent does not take"):
        pretrained(stem)
    set_play(stem, {})
    assert "play" not in json.loads(stem.with_suffix(".json").read_text()) and read_record(stem).play == {}


def test_the_play_command_refuses_bad_input_without_a_traceback(tmp_path, capsys):
    for argv, message in (
        (["play", str(tmp_path / "missing"), "fresh_arm_floor=true"], "no checkpoint at that path"),
        (["play", "bernoulli-generalist-family", "fresh_arm_floor"], "expected key=value"),
        (["play", "bernoulli-generalist-family", "fresh_arm_floor=yes"], "must be JSON"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_family_model_plays_with_the_floor_by_default():
    from agents import pretrained

    assert read_record(find_checkpoint("bernoulli-generalist-family")).play == {"fresh_arm_floor": True}
    assert pretrained("bernoulli-generalist-family").config()["fresh_arm_floor"] is True
    assert "fresh_arm_floor" not in pretrained("bernoulli-generalist").config()


def test_a_horizon_beyond_the_shipped_thresholds_is_refused_before_its_table_is_built():
    from icrl_gym.envs.validation import MemoryLimitError

    with pytest.raises(MemoryLimitError, match=r"fresh-arm floor at T = 1500 .*fresh_arm_floor=False"):
        fresh_arm_rule(1500, max_memory_gib=4.0)


def test_beyond_the_shipped_thresholds_the_records_floor_is_left_out_with_a_warning():
    """T > 1,000: the floor only the record asks for is skipped (no 5 GiB table); asked for explicitly, it is built
    within the memory limit or refused."""
    import gymnasium as gym

    from agents import pretrained
    from icrl_gym.envs.validation import MemoryLimitError

    env = gym.make_vec(
        "ICRL-BernoulliBandit-v0", num_envs=2, vectorization_mode="vector_entry_point", num_arms=3, horizon=1500
    )
    obs, info = env.reset(seed=0)
    agent = pretrained("bernoulli-generalist-family")
    with pytest.warns(RuntimeWarning, match="without its record's fresh-arm floor at T = 1500"):
        agent.reset(info)
    assert agent._floor_rule is None and agent.act(obs).shape == (2,)
    agent = pretrained("bernoulli-generalist-family", fresh_arm_floor=True)
    agent.max_memory_gib = 4.0
    with pytest.raises(MemoryLimitError, match="fresh-arm floor at T = 1500"):
        agent.reset(info)


def test_the_model_card_states_the_records_play_defaults_and_their_command():
    from icrl_gym.model_card import model_card

    card = model_card("bernoulli-generalist-family")
    assert "play with `fresh_arm_floor=True` unless given other values" in card
    assert "python -m icrl_gym.checkpoint play bernoulli-generalist-family fresh_arm_floor=true" in card
    assert "unless given other values" not in model_card("bernoulli-generalist")


def test_a_hub_folder_carries_the_records_play_defaults(tmp_path):
    from agents import pretrained
    from icrl_gym.checkpoint import resolve_checkpoint
    from icrl_gym.hub import export_hf_folder

    folder = export_hf_folder(resolve_checkpoint("bernoulli-generalist-family"), tmp_path / "hub")
    assert pretrained(folder).config()["fresh_arm_floor"] is True
