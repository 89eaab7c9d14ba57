"""Every registered extension keeps its recipe (CONTRIBUTING.md): one test per registry entry.

The parameters are read from the registries when this module is collected, so a new
architecture, task, optimizer or experiment is tested here without editing this file:

* ``nqf.ARCHITECTURES``: documented, every option has a default and is accepted, the name
  round-trips; shapes agree with ``nqf.network``; the closed form A(x) (when there is one)
  equals autodiff's to 1e-10 relative (float64); the expansion check gives a verdict and
  the theory applies at the defaults.
* ``nqf.TASKS``: documented, builds with its defaults; X, Y fit its natural architecture;
  same seed -> same data, another seed -> other data (unless declared seed-independent);
  finite, nonzero data matrix C = E[y A(x)].
* ``nqf.optimizers.OPTIMIZER_RECORDS`` (``nqf.OPTIMIZERS``): each record is consistent
  (labels and colours unique, its reference flow closes on M), its optax transformation builds
  and steps, the command line takes it (``--optimizers``, ``--lr-OPT``, ``--optimizer`` for one
  that closes on M) and the records import without JAX; with an M-flow (in
  ``PREDICT_OPTIMIZERS``) ``nqf.predict``'s exact map on M equals training the quadratic
  model to 1e-9 relative; without one, ``nqf.predict`` refuses it with one NqfError line.
* ``nqf_paper.EXPERIMENTS``: quick() and full() configs that round-trip through the
  TOML/--set form; runs with unique names, JSON configs and picklable computes; a figure
  function in ``nqf.report``; its claims exercised by a test file.

Sizes are small (about 40 s of CPU for the whole file); test_architectures.py,
test_tasks.py, test_flow.py and the experiment tests check each entry in depth.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import pickle
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from typer.testing import CliRunner

import nqf
import nqf_paper.verdict
from nqf.architectures import ARCHITECTURES, architecture_options, get_architecture
from nqf.architectures.architecture import Architecture, arch_key
from nqf.architectures.expansion import APPLIES, LINEAR_TERM, NOT_SMOOTH, VANISHING_FORM
from nqf.comparison.config import FLOW_OF
from nqf.core.errors import NqfError
from nqf.optimizers import (
    BATCH_RULES,
    MINIBATCH_OPTIMIZERS,
    OPTIMIZER_RECORDS,
    RATE_OPTIMIZERS,
    REFERENCE_FLOW,
    optimizer_record,
)
from nqf.store.results import run_key
from nqf.theory.predict.pipeline import PREDICT_OPTIMIZERS
from nqf.training.config import OPTIMIZERS, TrainConfig, make_optimizer
from nqf.training.tasks import TASKS, get_task, task_options
from nqf_paper import EXPERIMENTS, config_from_dict, config_to_dict
from tests.conftest import assert_allclose
from tests.test_architectures import _relative
from tests.test_flow import small_arch

TESTS = Path(__file__).parent


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message, f"the error must be one line: {message!r}"
    return message


def _bad_cli_options(options: dict) -> list[str]:
    """Options whose default has a type the command line cannot convert to (``nqf.cli.options``)."""

    def ok(value) -> bool:
        if isinstance(value, tuple):
            return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        return value is None or isinstance(value, (bool, int, float, str))

    return [f"{k}={v!r}" for k, v in options.items() if not ok(v)]


# -- architectures ----------------------------------------------------------------------

CLOSED_FORM_RTOL = 1e-10  # closed form vs autodiff, relative to max |A| (float64; measured ~1e-16)
WIDTH = 3  # units (a mixture of experts gets WIDTH experts: small_arch)


@functools.cache
def _small(name: str) -> Architecture:
    return small_arch(name, WIDTH)


def _inputs(arch: Architecture, count: int, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=(count, *arch.input_shape)))


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architecture_registered_documented_and_options_accepted(name):
    factory = ARCHITECTURES[name]
    assert inspect.getdoc(factory), f"{name}: the factory needs a docstring (its math and options)"
    options = architecture_options(name)
    without = [k for k, v in options.items() if v is inspect.Parameter.empty]
    assert not without, f"{name}: options without a default: {without}"
    assert not _bad_cli_options(options), f"{name}: defaults the CLI cannot parse: {_bad_cli_options(options)}"
    arch = get_architecture(name)
    assert isinstance(arch, Architecture) and arch.name == name  # the name round-trips
    assert arch.description, f"{name}: Architecture.description is the line of `nqf structure --list`"
    assert (arch.closed_form is None) == (not arch.closed_form_text), f"{name}: closed_form and its text go together"
    # the echoed options are the ones given (defaults here); every listed option is accepted
    assert set(dict(arch.options).items()) <= set(options.items()), name
    explicit = get_architecture(name, **options)
    assert arch_key(explicit) == arch_key(arch), f"{name}: passing the defaults explicitly builds another architecture"
    with pytest.raises(NqfError, match="has no option") as err:
        get_architecture(name, no_such_option=1)
    _one_line(err)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architecture_shapes_agree_with_network(name):
    arch = _small(name)
    n = arch.router.units if arch.router is not None else WIDTH
    assert arch.dim == sum(math.prod(b.shape) for b in arch.blocks)
    assert [b.start for b in arch.blocks] == [0] + [b.stop for b in arch.blocks[:-1]], "blocks must tile W's rows"
    X = _inputs(arch, 2)
    W = jnp.asarray(np.random.default_rng(1).normal(size=(arch.dim, n)))

    @jax.jit
    def shapes(X, W):
        unit = jax.vmap(lambda x: arch.unit(arch.unravel(W[:, 0]), x))(X)
        net = jax.vmap(lambda x: nqf.network(arch, W, x))(X)
        model = nqf.structure(arch, X).forms(W @ W.T)
        return unit, net, model

    unit, net, model = shapes(X, W)
    assert unit.size == 2 * arch.outputs, f"{name}: one unit gives {unit.shape[1:]} per input, not K = {arch.outputs}"
    assert net.shape == model.shape == (2, arch.outputs), (net.shape, model.shape)
    assert np.all(np.isfinite(net)) and np.all(np.isfinite(model))
    assert nqf.init_weights(arch, jax.random.PRNGKey(0), n, 0.1).shape == (arch.dim, n)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_closed_form_equals_autodiff(name):
    arch = _small(name)
    X = _inputs(arch, 3, seed=2)
    auto = np.asarray(jax.jit(jax.vmap(lambda x: nqf.structure_matrix(arch, x)))(X))
    assert auto.shape == (3, arch.outputs, arch.dim, arch.dim) and np.max(np.abs(auto)) > 0
    if arch.closed_form is None:  # optional: then the factors are derived by autodiff on the coupled blocks
        derived = nqf.structure(arch, X)
        assert isinstance(derived, nqf.architectures.structure.BlockFactors)
        np.testing.assert_allclose(derived.dense(), auto, rtol=1e-12, atol=1e-13)
        with pytest.raises(NqfError, match="no closed form"):
            nqf.closed_form_structure(arch, X[0])
        return
    closed = np.asarray(jax.jit(lambda X: nqf.structure(arch, X, method="closed").dense())(X))
    assert closed.shape == auto.shape
    error = _relative(closed, auto)
    assert error <= CLOSED_FORM_RTOL, f"{name}: closed form != autodiff (relative {error:.3g})"


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_expansion_check_gives_a_verdict_and_the_defaults_apply(name):
    report = nqf.expansion_check(_small(name), num_inputs=4)
    assert report.architecture == name
    assert report.kind in (APPLIES, NOT_SMOOTH, LINEAR_TERM, VANISHING_FORM)
    assert report.reason and "\n" not in report.reason
    assert report.applies and report.kind == APPLIES, f"{name}: the defaults must be inside the theory: {report.reason}"


# -- tasks ------------------------------------------------------------------------------

SMALL_SAMPLES = 96  # for the options that count samples
SAMPLE_OPTIONS = ("samples", "prompts")
# tasks whose data do not depend on the key (declare a new one here, with the reason)
SEED_INDEPENDENT = {"npz": "the user's file"}


def _required_task_options(name: str, tmp_path: Path) -> dict:
    """Options a task cannot default (only npz: the file)."""
    if name != "npz":
        return {}
    rng = np.random.default_rng(0)
    path = tmp_path / "data.npz"
    np.savez(path, X=rng.normal(size=(20, 3)), Y=rng.normal(size=(20, 2)))
    return {"path": str(path)}


def _small_task(name: str, tmp_path: Path):
    options = _required_task_options(name, tmp_path)
    options.update({k: SMALL_SAMPLES for k in SAMPLE_OPTIONS if k in task_options(name)})
    return get_task(name, **options)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_registered_documented_and_builds_with_defaults(name, tmp_path):
    cls = TASKS[name]
    assert cls.name == name and inspect.getdoc(cls), f"{name}: the class needs name = {name!r} and a docstring"
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, f"{name}: a task is a frozen dataclass"
    assert not _bad_cli_options(task_options(name)), f"{name}: defaults the CLI cannot parse"
    task = get_task(name, **_required_task_options(name, tmp_path))
    assert isinstance(task, nqf.Task) and hash(task) == hash(get_task(name, **task.options()))
    arch_name, arch_options = task.natural_architecture()
    assert arch_name in ARCHITECTURES, f"{name}: natural architecture {arch_name!r} is not registered"
    assert task.architecture().name == arch_name and set(arch_options) <= set(architecture_options(arch_name))
    with pytest.raises(NqfError, match="has no option") as err:
        get_task(name, no_such_option=1)
    _one_line(err)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_data_fit_its_architecture_and_follow_the_seed(name, tmp_path):
    task = _small_task(name, tmp_path)
    arch = task.architecture()
    X, Y = task.generate(3, "float64")
    assert X.dtype == Y.dtype == jnp.float64
    assert X.shape[1:] == tuple(arch.input_shape), f"{name}: X {X.shape} vs input shape {arch.input_shape}"
    assert Y.shape == (X.shape[0], arch.outputs), f"{name}: Y {Y.shape} vs (N={X.shape[0]}, K={arch.outputs})"
    again = task.generate(3, "float64")
    assert np.array_equal(X, again[0]) and np.array_equal(Y, again[1]), f"{name}: the same seed must give the same data"
    other = task.generate(4, "float64")
    same = np.array_equal(X, other[0]) and np.array_equal(Y, other[1])
    if name in SEED_INDEPENDENT:
        assert same, f"{name} is declared seed-independent ({SEED_INDEPENDENT[name]}) but its data depend on the seed"
    else:
        assert not same, f"{name}: seeds 3 and 4 give the same data (declare it in SEED_INDEPENDENT if meant)"
    data = nqf.data_matrices(arch, X, Y)
    C = np.asarray(data.C)
    KI = np.asarray(data.K_apply(jnp.eye(arch.dim)))
    assert np.all(np.isfinite(C)) and np.all(np.isfinite(KI)), f"{name}: non-finite data matrices"
    assert np.max(np.abs(C)) > 0, f"{name}: C = E[y A(x)] = 0, nothing to learn for {arch.name}"
    spectrum = task.spectrum(3)
    if spectrum is not None:
        spectrum = np.asarray(spectrum)
        assert np.all(np.isfinite(spectrum)) and np.all(spectrum > 0), f"{name}: spectrum() must be positive c_k"
        assert np.all(np.diff(spectrum) <= 0), f"{name}: spectrum() must be in decreasing order"


# -- optimizers -------------------------------------------------------------------------

# settings an optimizer cannot default (TrainConfig and PredictConfig refuse it without them)
REQUIRED_SETTINGS = {"sgd": {"batch_size": 16}}
MAP_RTOL = 1e-9  # M-flow vs trained quadratic model, relative (float64; measured <= 7e-14)
CLOSURE_RUN = dict(lr=0.05, steps=120, sigma0=1e-3, width=6)  # staircase: occupations grow 1e2-1e7 x


@functools.lru_cache(maxsize=1)
def _staircase():
    task = get_task("staircase", samples=64)
    X, Y = task.generate(0, "float64")
    return task.architecture(), X, Y


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_optimizer_record_is_consistent_and_read_everywhere(optimizer):
    """The record (``nqf.optimizers``) is the one place: every list of optimizers is read off it."""
    record = optimizer_record(optimizer)
    assert record.name == optimizer and record.label, f"{optimizer}: a record needs its own name and a label"
    assert record.batch in BATCH_RULES, f"{optimizer}: batch must be one of {BATCH_RULES}"
    assert record.takes_beta == (record.default_beta is not None)
    if record.default_beta is not None:
        assert 0 <= record.default_beta < 1, f"{optimizer}: default beta outside [0, 1)"
    # the M-flow compare draws beside it: its own when it closes on M, else one that does
    assert record.reference_flow in PREDICT_OPTIMIZERS
    assert (record.reference_flow == optimizer) == record.closes_on_m
    assert (optimizer in PREDICT_OPTIMIZERS) == record.closes_on_m
    if record.closes_on_m:  # its LV numbers: its own full-batch flow, or that of its mean (SGD: GD)
        assert optimizer_record(record.mean_flow).deterministic_flow
    assert FLOW_OF[optimizer] == record.reference_flow
    assert (optimizer in MINIBATCH_OPTIMIZERS) == (record.batch == "required")
    assert (optimizer in RATE_OPTIMIZERS) == (optimizer != REFERENCE_FLOW)
    config = TrainConfig(optimizer=optimizer, **REQUIRED_SETTINGS.get(optimizer, {}))
    assert config.effective_beta == record.default_beta


def test_optimizer_records_are_the_only_lists():
    records = list(OPTIMIZER_RECORDS.values())
    labels, colours = [r.label for r in records], [r.colour for r in records]
    assert len(set(labels)) == len(labels), f"labels must be unique: {labels}"
    assert len(set(colours)) == len(colours), f"colours must be unique: {colours}"
    assert all(isinstance(c, int) and c >= 0 for c in colours)
    assert OPTIMIZERS == nqf.OPTIMIZERS == tuple(OPTIMIZER_RECORDS)
    assert PREDICT_OPTIMIZERS == tuple(r.name for r in records if r.closes_on_m)
    assert REFERENCE_FLOW in PREDICT_OPTIMIZERS
    with pytest.raises(NqfError, match="unknown optimizer 'lbfgs'; choose one of") as err:
        optimizer_record("lbfgs")
    _one_line(err)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_optimizer_builds_and_steps(optimizer):
    """The record's optax transformation steps a small W downhill on L = |W|^2 / 2, with its
    defaults and with beta and eps set; ``make_optimizer`` builds the same transformation."""
    record = optimizer_record(optimizer)
    W = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    settings = [{}]
    if record.takes_beta:
        settings.append({"beta": 0.5})
    if record.takes_eps:
        settings.append({"eps": 1e-6})
    for extra in settings:
        transformation = record.build(1e-2, extra.get("beta"), extra.get("eps"))
        state = transformation.init(W)
        updates, state = transformation.update(W, state, W)  # the gradient of |W|^2 / 2 is W
        stepped = optax.apply_updates(W, updates)
        assert stepped.shape == W.shape and bool(jnp.all(jnp.isfinite(stepped))), (optimizer, extra)
        assert float(jnp.sum(stepped**2)) < float(jnp.sum(W**2)), f"{optimizer} {extra}: the step must go downhill"
        config = TrainConfig(optimizer=optimizer, lr=1e-2, **REQUIRED_SETTINGS.get(optimizer, {}), **extra)
        built = make_optimizer(config)
        same, _ = built.update(W, built.init(W), W)
        assert_allclose(same, updates, rtol=0, atol=0, err_msg=f"{optimizer} {extra}: make_optimizer differs")


_RUNNER = CliRunner()


def _parsed(monkeypatch, command: str, args: list[str]):
    """The arguments typer hands ``nqf COMMAND`` (its run function replaced by a recorder)."""
    from nqf.cli import app, compare, predict

    module = {"compare": compare, "predict": predict}[command]
    seen = []
    monkeypatch.setattr(module, f"run_{command}_command", seen.append)
    result = _RUNNER.invoke(app, [command, *args])
    assert result.exit_code == 0 and len(seen) == 1, result.output
    return seen[0]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_the_command_line_takes_the_optimizer(optimizer, monkeypatch):
    """``nqf compare --optimizers NAME [--lr-NAME ETA]`` reaches CompareConfig; ``nqf predict
    --optimizer NAME`` passes its JAX-free checks exactly when the optimizer closes on M."""
    from nqf.cli.compare import compare_config, parse_optimizers
    from nqf.cli.predict import check_arguments

    record = optimizer_record(optimizer)
    batch = ["--batch", "8"] if record.minibatches else []
    rate = [f"--lr-{optimizer}", "0.01"] if optimizer in RATE_OPTIMIZERS else []
    common = ["--width", "4", "--sigma0", "1e-3", "--lr", "0.05", "--steps", "10"]
    args = _parsed(monkeypatch, "compare", ["--task", "staircase", *common, "--optimizers", optimizer, *batch, *rate])
    config = compare_config(args, parse_optimizers(args.optimizers))
    assert config.optimizers == (optimizer,)
    assert config.lr_for(optimizer) == (0.01 if rate else 0.05), f"--lr-{optimizer} did not reach CompareConfig"
    assert config.flows == tuple(dict.fromkeys((REFERENCE_FLOW, record.reference_flow)))
    predict = ["--data", "x.npz", "--arch", "mlp", *common, "--optimizer", optimizer, *batch]
    args = _parsed(monkeypatch, "predict", predict)
    if record.closes_on_m:
        check_arguments(args)
    else:
        with pytest.raises(NqfError, match=f"got '{optimizer}'") as err:
            check_arguments(args)
        _one_line(err)


@pytest.mark.slow  # a second Python process
def test_the_optimizer_records_import_without_jax():
    """The command line reads the records before JAX starts: importing them loads neither JAX nor optax."""
    code = (
        "import sys\nimport nqf.optimizers, nqf.core.names\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'jaxlib', 'optax'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", f"nqf.optimizers imports {done.stdout.strip()}"


def test_predict_optimizers_are_optimizers():
    assert set(PREDICT_OPTIMIZERS) <= set(OPTIMIZERS)


@pytest.mark.parametrize(
    "optimizer", [pytest.param(name, marks=pytest.mark.slow) if name == "sgd" else name for name in OPTIMIZERS]
)  # sgd: the heaviest (2.8-5.7 s)
def test_optimizer_m_flow_equals_training_or_predict_refuses(optimizer):
    arch, X, Y = _staircase()
    settings = REQUIRED_SETTINGS.get(optimizer, {})
    if optimizer not in PREDICT_OPTIMIZERS:  # declared without an M-flow
        with pytest.raises(NqfError, match=optimizer) as err:
            nqf.predict(arch, X, Y, nqf.PredictConfig(optimizer=optimizer, **CLOSURE_RUN, **settings))
        _one_line(err)
        return
    config = nqf.PredictConfig(optimizer=optimizer, stepping="every", **CLOSURE_RUN, **settings)
    prediction = nqf.predict(arch, X, Y, config)
    basis = prediction.modes.basis[:, : prediction.modes.num_growing]
    quadratic = TrainConfig(optimizer=optimizer, model="quadratic", dtype="float64", **CLOSURE_RUN, **settings)
    # the same W0 (training_keys(seed)[0]) and, for sgd, the same minibatches as the M-flow
    trained = nqf.train(arch, X, Y, quadratic, basis=basis)
    assert not trained.diverged
    steps = np.asarray(prediction.flow.steps)
    assert steps[0] == 0 and steps[-1] == CLOSURE_RUN["steps"]
    occupations = trained.occupations[steps]
    assert np.min(occupations[-1] / occupations[0]) > 10, "the occupations must move for the comparison to count"
    assert_allclose(prediction.flow.occupations, occupations, rtol=MAP_RTOL, err_msg=f"{optimizer}: M-flow occupations")
    assert_allclose(prediction.flow.loss, trained.loss[steps], rtol=MAP_RTOL, err_msg=f"{optimizer}: M-flow loss")


# -- experiments ------------------------------------------------------------------------

MODES = ("quick", "full")


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_configs_and_runs(name):
    exp = EXPERIMENTS[name]
    assert exp.name == name and exp.title, f"{name}: registered under its own name, with a title"
    for mode in MODES:
        config = exp.config(mode)  # quick() / full() return the config type (Experiment.config checks)
        assert config_from_dict(exp.config_type, config_to_dict(config)) == config, f"{name}.{mode}: TOML round trip"
        specs = exp.run_specs(config)  # RunSpec objects with distinct names (Experiment.run_specs checks)
        assert specs, f"{name}.{mode}: no runs"
        for spec in specs:
            run_key(name, spec.name, spec.config, "test")  # JSON-able, finite: the store's key
            pickle.dumps(spec.compute)  # module-level, so --jobs can send it to a worker


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_has_a_report_figure(name):
    figures = EXPERIMENTS[name].figures
    assert figures, f"{name}: figures='nqf_paper.<its folder>.figures:plot' is missing"
    module_name, _, function_name = figures.partition(":")
    folder = EXPERIMENTS[name].summarise.__module__.split(".")[1]  # nqf_paper.<folder>[.summary]
    assert folder.startswith(f"{name.lower()}_"), f"{name}: its folder is nqf_paper/{name.lower()}_<topic>/"
    assert module_name == f"nqf_paper.{folder}.figures", f"{name}: figures live in nqf_paper/{folder}/figures.py"
    plot = getattr(importlib.import_module(module_name), function_name)  # as `nqf reproduce` finds it
    assert len(inspect.signature(plot).parameters) >= 2, "plot(result, figure_dir)"


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_claims_are_tested(name):
    """The claims need computed runs, so each experiment's own test file judges them (tiny
    configs): one that imports the experiment's module and summarises it (or reproduces it)."""
    package = EXPERIMENTS[name].summarise.__module__.split(".")[1]  # nqf_paper.<package>[.summary]
    testers = [
        path.name
        for path in TESTS.glob("test_*.py")
        if path.name != Path(__file__).name
        and f"nqf_paper.{package}" in (text := path.read_text())
        and ("summarise(" in text or "reproduce(" in text)
    ]
    assert testers, f"{name}: no test file imports nqf_paper.{package} and judges its claims (summarise)"


def test_a_claim_cannot_lack_a_tolerance():
    """What ``summarise`` returns is judged by its stated tolerance: Claim refuses anything else."""
    with pytest.raises(NqfError, match="tolerance") as err:
        nqf_paper.verdict.Claim("a claim", "what was measured", 1.0, 1.0, tolerance=None)
    _one_line(err)
