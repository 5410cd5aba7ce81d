import pytest

from alphagym.config import load_params
from alphagym.errors import ConfigError


def test_profile_merges_over_base(root):
    base = load_params(root / "params.yaml")
    real = load_params(root / "params.yaml", ["profile=real"])
    assert base["data"]["source"] == "synthetic"
    assert real["data"]["source"] == "csv" and real["data"]["holdout_start"] == "2020-04-22"
    assert real["data"]["universe"] == base["data"]["universe"]  # untouched keys survive the merge
    assert "profiles" not in real


def test_every_profile_keeps_its_own_results(root):
    """A profile writes under its own results folder (its block's `paths.results`, else `results/<name>`): a
    `make smoke` after a `make run` must not replace the default outputs, and no command may meet one
    profile's archive next to another's panel. An explicit `--set paths.results=...` still wins."""
    import yaml

    names = list(yaml.safe_load((root / "params.yaml").read_text())["profiles"])
    assert {"real", "smoke", "smollm2", "gpu", "envb"} <= set(names)
    base = load_params(root / "params.yaml")["paths"]["results"]
    folders = {name: load_params(root / "params.yaml", [f"profile={name}"])["paths"]["results"] for name in names}
    assert len({base, *folders.values()}) == len(names) + 1, folders
    assert folders["smoke"] == f"{base}/smoke" and folders["real"] == "results/real"
    assert load_params(root / "params.yaml", ["profile=smoke", "paths.results=/x"])["paths"]["results"] == "/x"


def test_override_wins_over_profile(root):
    p = load_params(root / "params.yaml", ["profile=real", "data.source=yfinance", "seed=11"])
    assert p["data"]["source"] == "yfinance" and p["seed"] == 11


@pytest.mark.parametrize("item, message", [
    ("data.nosuch=1", "unknown key 'data.nosuch'"),
    ("nosuch.key=1", "unknown key 'nosuch'"),
    ("seedless", "must look like key.sub=value"),
    ("profile=nosuch", "profile 'nosuch' not defined"),
])
def test_bad_overrides_are_named(root, item, message):
    with pytest.raises(ConfigError, match=message):
        load_params(root / "params.yaml", [item])


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_exponent_floats_are_floats(root, tmp_path):
    p = load_params(root / "params.yaml", ["verifier.costs.holdout.book_usd=1e6", "worldmodel.lr=3.0e-4"])
    assert p["verifier"]["costs"]["holdout"]["book_usd"] == 1e6
    assert p["worldmodel"]["lr"] == 3e-4
    base = load_params(root / "params.yaml")
    assert isinstance(base["worldmodel"]["lr"], float) and isinstance(base["worldmodel"]["weight_decay"], float)
    assert isinstance(base["verifier"]["costs"]["holdout"]["book_usd"], float)
    assert load_params(root / "params.yaml", ["data.start=2012-06-29"])["data"]["start"] != 2012.0


# Each of these was once accepted silently (a wrong number) or crashed with a raw traceback.
BAD_VALUES = [
    ("verifier.costs.train.fee_bps=-100", "verifier.costs.train.fee_bps = -100", "greater than or equal to 0"),
    ("verifier.costs.train.fee_bps=.nan", "verifier.costs.train.fee_bps = nan", "finite number"),
    ("verifier.costs.train.fee_bps=abc", "verifier.costs.train.fee_bps = 'abc'", "valid number"),
    ("verifier.cpcv.std_penalty=-5", "verifier.cpcv.std_penalty = -5", "greater than or equal to 0"),
    ("data.holdout_warmup_sessions=-5", "data.holdout_warmup_sessions = -5", "greater than or equal to 0"),
    ("data.validation.max_fill_gap=-1", "data.validation.max_fill_gap = -1", "greater than or equal to 0"),
    ("verifier.book.max_flat_share=-1", "verifier.book.max_flat_share = -1", "greater than or equal to 0"),
    ("verifier.min_turnover.ramp_to=0.08", "verifier.min_turnover", "invalid_below <= ramp_to < free"),
    ("verifier.cpcv.blocks=1", "verifier.cpcv.blocks = 1", "greater than or equal to 2"),
    ("verifier.cpcv.blocks=0", "verifier.cpcv.blocks = 0", "greater than or equal to 2"),
    ("verifier.cpcv.test_blocks=7", "verifier.cpcv", "test_blocks must be between 1 and blocks - 1 = 5"),
    ("dsl.window_buckets=[]", "dsl.window_buckets = []", "at least 1 item"),
    ("verifier.cpcv=3", "verifier.cpcv = 3", "valid dictionary"),
    ("data.start=notadate", "data.start = 'notadate'", "YYYY-MM-DD"),
    ("seed=abc", "seed = 'abc'", "valid integer"),
    ("tracking.lock_retries=0", "tracking.lock_retries = 0", "greater than or equal to 1"),
    ("dsl.limits.max_depth=46", "dsl.limits.max_depth = 46", "less than or equal to 32"),
    ("data.train_end=2030-01-01", "data", "start < train_end < holdout_start <= end"),
    ("worldmodel.heads=3", "worldmodel", "heads (3) must divide d_model (64)"),
    ("rl.recipe.off_brief=last", "rl.recipe", "off_brief 'last' needs min_compliance"),
]


@pytest.mark.parametrize("override, key, allowed", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_bad_values_fail_at_load_naming_key_value_and_rule(root, override, key, allowed):
    with pytest.raises(ConfigError) as err:
        load_params(root / "params.yaml", [override])
    message = str(err.value)
    assert str(root / "params.yaml") in message and key in message and allowed in message, message


def test_bad_value_in_an_unselected_profile_fails_too(root, tmp_path):
    text = (root / "params.yaml").read_text().replace("max_epochs: 1,", "max_epochs: -3,")
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"profile 'smoke'.*\n  worldmodel.max_epochs = -3"):
        load_params(tmp_path / "params.yaml")


def test_a_bad_value_in_the_base_block_is_named_as_the_base_not_a_profile(root, tmp_path):
    """The base block is validated before any profile: its error names the base block, even when the selected
    profile overrides the key (smoke sets rl.recipe.steps) and another profile does not; a profile's own
    error still names that profile."""
    text = (root / "params.yaml").read_text()
    assert text.count("\n    steps: 600\n") == 1
    (tmp_path / "params.yaml").write_text(text.replace("\n    steps: 600\n", "\n    steps: -5\n"))
    for profile in (["profile=smoke"], ["profile=real"], []):
        with pytest.raises(ConfigError) as err:
            load_params(tmp_path / "params.yaml", profile)
        message = str(err.value)
        assert message.startswith(f"{tmp_path / 'params.yaml'}") and "rl.recipe.steps = -5" in message, message
        assert "profile '" not in message.splitlines()[0], message
        if profile:
            assert message.startswith(f"{tmp_path / 'params.yaml'} (base block): invalid parameters:"), message
    (tmp_path / "params.yaml").write_text(text.replace("recipe: {steps: 200}}\n    verifier:",
                                                       "recipe: {steps: -7}}\n    verifier:"))
    with pytest.raises(ConfigError, match=r"params.yaml \(profile 'envb'\): invalid parameters:\n  "
                                          r"rl.recipe.steps = -7"):
        load_params(tmp_path / "params.yaml", ["profile=smoke"])
    # a bad `--set` is not the file's base block: it is named with the profile it was given with
    with pytest.raises(ConfigError, match=r"params.yaml \(profile 'smoke'\): invalid parameters:\n  "
                                          r"rl.recipe.lr = -1"):
        load_params(root / "params.yaml", ["profile=smoke", "rl.recipe.lr=-1"])


def test_unknown_key_in_the_file_is_named(root, tmp_path):
    text = (root / "params.yaml").read_text().replace("  workers: 1", "  workers: 1\n  wokers: 2")
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"verifier.wokers = 2: Extra inputs are not permitted"):
        load_params(tmp_path / "params.yaml")


def test_unknown_calendar_is_named_when_the_data_stages_read_it(root):
    from alphagym.data.calendar import sessions

    p = load_params(root / "params.yaml", ["data.calendar=XXXX"])
    with pytest.raises(ConfigError, match="data.calendar = 'XXXX': not a calendar exchange_calendars knows"):
        sessions(p.data.calendar, p.data.start, p.data.end)


def test_every_field_is_typed_described_and_without_a_default():
    """params.yaml is the one place where values live: a missing key is an error, not a hidden default."""
    from alphagym.params import Params, Section

    seen, todo = set(), [Params]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, f in model.model_fields.items():
            assert f.is_required(), f"{model.__name__}.{name} has a default"
            assert f.description or (isinstance(f.annotation, type) and issubclass(f.annotation, Section)), \
                f"{model.__name__}.{name} has no description"
            if isinstance(f.annotation, type) and issubclass(f.annotation, Section):
                todo.append(f.annotation)
    assert len(seen) > 20


def test_params_read_as_typed_attributes_and_as_a_mapping(root):
    p = load_params(root / "params.yaml")
    assert p.verifier.cpcv.blocks == p["verifier"]["cpcv"]["blocks"] == 6
    assert dict(p.verifier.costs.train) == {"fee_bps": 2.0, "slippage_bps": 1.0, "half_spread_bps": 0.5,
                                            "impact_bps": 0.5}
    with pytest.raises(Exception, match="frozen"):
        p.verifier.cpcv.blocks = 3


def test_one_resolver_gives_a_ladder_member_its_recipe_seed_threads_and_cost(root):
    """`resolve_rung` is what the stage table (threads, priorities), train and probe read: a replica
    `RUNG-sK` has its rung's recipe and seed + K; a DoRA step counts DORA_STEP_COST LoRA steps."""
    from alphagym.pipeline import rung_threads
    from alphagym.rungs import DORA_STEP_COST, resolve_rung

    p = load_params(root / "params.yaml", ["rl.recipe.numba_threads=3"])
    base = resolve_rung(p, "cispo_repo_dora")
    replica = resolve_rung(p, "cispo_repo_dora-s2")
    assert (base.name, base.replica, base.seed) == ("cispo_repo_dora", 0, p.seed)
    assert (replica.name, replica.replica, replica.seed) == ("cispo_repo_dora", 2, p.seed + 2)
    assert replica.recipe == base.recipe == p.rl.recipe_of("cispo_repo_dora")
    assert base.recipe.adapter == "dora" and base.cost == base.recipe.steps * DORA_STEP_COST
    assert base.threads == rung_threads(p, "cispo_repo_dora-s2") == 3


def test_replica_k_of_every_rung_shares_its_seeds(root):
    """Paired replicas: replica k of two rungs draws the same briefs at every step and seeds its adapter and
    sampling streams alike (`rungs.resolve_rung`'s seed; `Trainer._draw`, `step_seed`); the negative control,
    another replica, draws other briefs."""
    from alphagym.rl.trainer import Trainer, step_seed
    from alphagym.rungs import resolve_rung

    p = load_params(root / "params.yaml", [])

    def drawn(item):
        t = Trainer.__new__(Trainer)
        t.seed, t.briefs = resolve_rung(p, item).seed, list(range(200))
        return [t._draw(step, 4, 1) for step in range(1, 8)]

    assert resolve_rung(p, "cispo_repo-s1").seed == resolve_rung(p, "cispo_repo_idea-s1").seed
    assert drawn("cispo_repo-s1") == drawn("cispo_repo_idea-s1") == drawn("cispo_repo_grammar-s1")
    assert step_seed(resolve_rung(p, "cispo_repo-s2").seed, 5, 0) == step_seed(
        resolve_rung(p, "cispo_repo_marginal-s2").seed, 5, 0)
    assert drawn("cispo_repo-s1") != drawn("cispo_repo_idea-s2")


def test_mlflow_logs_the_decoding_a_rung_ran_under_not_null(root):
    """A rung whose recipe leaves `decoding` null samples under policy.decoding: its tracked params say so."""
    from alphagym.rungs import resolve_rung

    p = load_params(root / "params.yaml", [])
    assert p.rl.recipe_of("cispo_repo").decoding is None and p.policy.decoding == "brief"
    assert resolve_rung(p, "cispo_repo").tracked()[0]["recipe.decoding"] == "brief"
    assert resolve_rung(p, "cispo_repo_grammar-s1").tracked()[0]["recipe.decoding"] == "grammar"
    q = load_params(root / "params.yaml", ["policy.decoding=free"])
    assert resolve_rung(q, "cispo_repo").tracked()[0]["recipe.decoding"] == "free"


def test_a_grammar_only_rung_starts_after_the_brief_decoded_ones_it_outlasts_less(root):
    """Under brief decoding a rung that samples under the grammar alone steps in about GRAMMAR_STEP_COST of
    the time, so its training priority is lower and the brief-decoded rungs start first; with every rung
    under the grammar (`policy.decoding=grammar`) the two cost the same again."""
    from alphagym.pipeline import GRAMMAR_STEP_COST, rung_cost, rung_priority

    p = load_params(root / "params.yaml", [])
    assert p.policy.decoding == "brief" and p.rl.recipe_of("cispo_repo_grammar").decoding == "grammar"
    assert rung_cost(p, "cispo_repo_grammar-s1") == pytest.approx(GRAMMAR_STEP_COST * rung_cost(p, "cispo_repo"))
    brief = rung_priority(p, "cispo_repo")
    assert rung_priority(p, "cispo_repo_grammar") < brief == rung_priority(p, "cispo_repo_idea")
    g = load_params(root / "params.yaml", ["policy.decoding=grammar"])
    assert rung_priority(g, "cispo_repo_grammar") == rung_priority(g, "cispo_repo")


# pydantic's lax mode read a bool as a number (True -> 1) and 1 as a bool: every int, bool and float is strict
STRICT_VALUES = [
    ("seed=true", "seed = True", "valid integer"),
    ("rl.recipe.steps=true", "rl.recipe.steps = True", "valid integer"),
    ("verifier.cpcv.blocks=6.0", "verifier.cpcv.blocks = 6.0", "valid integer"),
    ("dsl.window_buckets=[5, true]", "dsl.window_buckets.1 = True", "valid integer"),
    ("tracking.enabled=1", "tracking.enabled = 1", "valid boolean"),
    ("rl.recipe.repo.enabled=0", "rl.recipe.repo.enabled = 0", "valid boolean"),
    ("worldmodel.lr=true", "worldmodel.lr = True", "valid number"),
]


@pytest.mark.parametrize("override, key, allowed", STRICT_VALUES, ids=[s[0] for s in STRICT_VALUES])
def test_a_bool_is_not_a_number_nor_a_number_a_bool(root, override, key, allowed):
    with pytest.raises(ConfigError) as err:
        load_params(root / "params.yaml", [override])
    message = str(err.value)
    assert f"\n  {key}: " in message and allowed in message, message


def test_a_float_still_takes_an_int_and_every_profile_loads(root):
    import yaml

    p = load_params(root / "params.yaml", ["worldmodel.lr=1", "verifier.costs.train.fee_bps=5"])
    assert p.worldmodel.lr == 1.0 and isinstance(p.worldmodel.lr, float)
    assert isinstance(p.verifier.costs.train.fee_bps, float)
    names = list(yaml.safe_load((root / "params.yaml").read_text())["profiles"])
    for name in ["default", *names]:
        assert load_params(root / "params.yaml", [f"profile={name}"]).profile == name
    with pytest.raises(ConfigError, match=r"rung 'cispo_repo': its recipe does not validate: steps = True: Input "
                                          r"should be a valid integer$"):    # a rung's recipe: strict too, one line
        load_params(root / "params.yaml", ["rl.rungs.cispo_repo.set={steps: true}"])


def test_params_yaml_rewritten_by_dvc_exp_loads_the_same(root, tmp_path):
    """`dvc exp run -S KEY=VALUE` rewrites params.yaml as YAML 1.2 (it drops the quotes of `"off"`): the file
    it writes loads into the same params but for the key it set. PyYAML's YAML 1.1 booleans read the unquoted
    `off` as False, and every command then refused params.yaml."""
    from dvc.utils.serialize import modify_yaml

    path = tmp_path / "params.yaml"
    path.write_text((root / "params.yaml").read_text())
    with modify_yaml(path) as data:
        data["profiles"]["smoke"]["rl"]["recipe"]["steps"] = 6
    assert "advantage_floor: off" in path.read_text()          # DVC's rewrite, unquoted
    for profile in ("default", "smoke"):
        before = load_params(root / "params.yaml", [f"profile={profile}"]).model_dump()
        after = load_params(path, [f"profile={profile}"]).model_dump()
        if profile == "smoke":
            assert after["rl"]["recipe"]["steps"] == 6
            after["rl"]["recipe"]["steps"] = before["rl"]["recipe"]["steps"]
        assert after == before
