"""The ``prefalign`` group of command-line options and ini values, and the run's settings
resolved from them (command line over ini over defaults, checked once).

As pytest's own plugins do, each subsystem declares the options it reads: the data and output
paths in ``paths.py``, sharding in ``shards.py``, the gate in ``gating.py``; the run's own groups
(which tests, their floors, how they evaluate, what a broken plugin does) are here, beside
``settings``, which reads them for the session. ``addoption`` calls each group in the order
``pytest --help`` shows them."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import pytest

from pytest_prefalign import method_options
from pytest_prefalign.analysis import catalogue
from pytest_prefalign.api import DEFAULT_REDUCE, REDUCTIONS
from pytest_prefalign.plumbing import paths, shards
from pytest_prefalign.plumbing.shards import Shard

DEFAULT_LIMIT = 8  # users: enough for a comparison paired over users to reach a finding
DEFAULT_SIZES = ["135m"]  # model size labels
DEFAULT_SEED = 0  # the decoders' draws (docs/usage.md states these defaults; a test checks)


def comma_list(text: str) -> list[str]:
    """``a,b``: each item once (a method or size given twice would make two tests of one id)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, e.g. a,b")
    twice = sorted({item for item in items if items.count(item) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} given twice in {text!r}")
    return items


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


@dataclass(frozen=True)
class Floor:
    """A floor such as ``rouge1=0.2``: the test fails when the metric is below it."""

    metric: str
    value: float

    @classmethod
    def parse(cls, text: str) -> Floor:
        metric, sep, raw = text.partition("=")
        metric = metric.strip()
        if not sep or metric not in catalogue.names():
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected METRIC=VALUE with METRIC one of {', '.join(catalogue.names())}"
            )
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {raw!r} is not a number") from None
        if not 0.0 <= value <= 1.0:
            raise argparse.ArgumentTypeError(f"{text!r}: a floor lies between 0 and 1")
        return cls(metric, value)


def floors(text: str) -> list[Floor]:
    return [Floor.parse(part) for part in comma_list(text)]


def reduce_kind(text: str) -> str:
    if text not in REDUCTIONS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {' or '.join(REDUCTIONS)}")
    return text


GUIDANCE = ("chosen", "fixed", "sweep")  # how a decoder's guidance strength is set
DEFAULT_GUIDANCE = "chosen"
# ``sweep``: the common strengths of the standardised rewards at which every reward-guided
# decoder that declares a strength runs each of its reward methods, beside its working point
SWEEP = (0.25, 1.0, 4.0)


def guidance_kind(text: str) -> str:
    if text not in GUIDANCE:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected {', '.join(GUIDANCE[:-1])} or {GUIDANCE[-1]}"
        )
    return text


def dtype_kind(text: str) -> str:
    """``--prefalign-dtype``: one of the weights' dtypes a model line may name."""
    from pytest_prefalign.runtime.model_lines import DTYPES

    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {' or '.join(DTYPES)}")
    return text


GROUP = "prefalign"


def addoption(parser: pytest.Parser) -> None:
    """Every option and ini value of the ``prefalign`` group but the gate's
    (``gating.addoption``), each group declared by the subsystem that reads it, in the order
    ``pytest --help`` shows them. The group is opened here, first, with its description."""
    parser.getgroup(GROUP, "personalized alignment evaluation (pytest-prefalign)")
    for add in (
        add_run_options,
        paths.add_data_options,
        paths.add_output_options,
        add_floor_options,
        add_evaluation_options,
        add_plugin_options,
        add_memory_options,
        shards.add_options,
    ):
        add(parser)


def add_run_options(parser: pytest.Parser) -> None:
    """Which tests the run makes: the switch, the methods, the model sizes (and the models
    they name), the users per suite."""
    group = parser.getgroup(GROUP)
    group.addoption(
        "--prefalign",
        action="store_true",
        default=False,
        help="collect suite folders (suite.toml) as evaluation tests.",
    )
    group.addoption(
        "--prefalign-methods",
        type=comma_list,
        metavar="M1,M2",
        help="methods to run, e.g. base,icl_rag,args[lore] (default: all registered; "
        "ini: prefalign_methods).",
    )
    group.addoption(
        "--prefalign-sizes",
        type=comma_list,
        metavar="S1,S2",
        help=f"model size labels to run (default: {','.join(DEFAULT_SIZES)}; "
        "ini: prefalign_sizes).",
    )
    group.addoption(
        "--prefalign-limit",
        type=positive_int,
        metavar="N",
        help=f"number of users per suite (default: {DEFAULT_LIMIT}; ini: prefalign_limit).",
    )
    group.addoption(
        "--prefalign-dtype",
        type=dtype_kind,
        metavar="float32|bfloat16",
        help="the dtype the language models' passes run in, over a model line's dtype= "
        "(default: fp32 on the CPU, bf16 on CUDA; ini: prefalign_dtype). bfloat16 is refused "
        "on a CPU without native bf16 (avx512_bf16 or AMX); reward heads, standardisation and "
        "every statistic stay fp32.",
    )
    parser.addini("prefalign_methods", "methods to run (comma-separated)")
    parser.addini("prefalign_sizes", "model size labels to run (comma-separated)")
    parser.addini("prefalign_limit", "number of users per suite")
    parser.addini("prefalign_models", "size label = model source, one per line", type="linelist")
    parser.addini("prefalign_dtype", "the language models' dtype: float32 or bfloat16")


def add_floor_options(parser: pytest.Parser) -> None:
    """The floors a test's figures must reach (the session's ``problems``)."""
    parser.getgroup(GROUP).addoption(
        "--prefalign-fail-under",
        type=floors,
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="fail tests whose metric is below VALUE, e.g. rouge1=0.2 (ini: prefalign_fail_under).",
    )
    parser.addini("prefalign_fail_under", "floors METRIC=VALUE, comma-separated")


def add_evaluation_options(parser: pytest.Parser) -> None:
    """How each test evaluates: the policy score's reduction, the decoders' seed, the cache,
    and the methods' own options (``method_options``)."""
    group = parser.getgroup(GROUP)
    group.addoption(
        "--prefalign-reduce",
        type=reduce_kind,
        metavar="sum|mean",
        help="policy accuracy: sum or mean of token log-likelihoods "
        f"(default: {DEFAULT_REDUCE}; the run file keeps both).",
    )
    group.addoption(
        "--prefalign-guidance",
        type=guidance_kind,
        metavar="chosen|fixed|sweep",
        help="the guidance strength of reward-guided decoders (args.w, genarm.alpha): chosen "
        "per (reward method, decoder, suite, size) on validation items of the training users "
        "by the rule of docs/metrics.md, or fixed at the option's value (the paper's "
        f"constants unless set with --prefalign-option; default: {DEFAULT_GUIDANCE}); sweep: "
        "chosen, and beside each such row one test per common strength "
        f"({', '.join(f'{v:g}' for v in SWEEP)}) of the standardised reward. A strength set "
        "with --prefalign-option is always kept as set (a swept test's strength is the "
        "sweep's).",
    )
    group.addoption(
        "--prefalign-seed",
        type=int,
        default=None,
        metavar="N",
        help="seed of the decoders' draws: icl's examples per user and the samples of bon "
        f"and of genarm with sample=true (default: {DEFAULT_SEED}). The bootstrap intervals "
        "always use seed 0; a reward method's training has its own seed option (e.g. arm.seed).",
    )
    group.addoption(
        "--prefalign-no-cache",
        action="store_true",
        default=False,
        help="recompute everything (generations, trained reward models, features, "
        "negatives, judges) instead of reusing the cache, and write nothing to "
        "it.",
    )
    group.addoption(
        "--prefalign-option",
        type=method_options.assignments,
        action="append",
        default=[],
        metavar="TARGET.FIELD=VALUE",
        help="set a decoder or reward method option, e.g. args.k=5, "
        "genarm.alpha=0.5, arm.rank=4, or max_new_tokens=32 for every decoder "
        "(repeatable; ini: prefalign_options, one per line).",
    )
    parser.addini("prefalign_reduce", "sum or mean")
    parser.addini("prefalign_guidance", "chosen, fixed or sweep")
    parser.addini(
        "prefalign_options",
        "decoder and reward method options TARGET.FIELD=VALUE, one per line",
        type="linelist",
    )


def add_plugin_options(parser: pytest.Parser) -> None:
    """What a plugin that fails to load does (the session's ``check_plugins``)."""
    parser.getgroup(GROUP).addoption(
        "--prefalign-strict-plugins",
        action="store_true",
        default=None,
        help="a prefalign plugin that fails to load is a usage error, not a warning "
        "(ini: prefalign_strict_plugins).",
    )
    parser.addini(
        "prefalign_strict_plugins", "a plugin that fails to load stops the run", type="bool"
    )


def memory_gb(text: str) -> float:
    """``--prefalign-memory`` type: a number of GB above 0."""
    from pytest_prefalign.runtime.memory import parse_gb

    try:
        return parse_gb(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_memory_options(parser: pytest.Parser) -> None:
    """The memory the run may use (``runtime/memory.py``)."""
    parser.getgroup(GROUP).addoption(
        "--prefalign-memory",
        type=memory_gb,
        metavar="GB",
        help="the memory the whole run may use, shared by its xdist workers; the prefill "
        "stores' budgets are shares of it (default: the memory the machine has available; "
        "ini: prefalign_memory).",
    )
    parser.addini("prefalign_memory", "the memory the whole run may use, in GB")


@dataclass(frozen=True)
class Settings:
    """The validated options of one run (command line over ini over defaults)."""

    methods: list[str] | None
    sizes: list[str]
    limit: int
    data: str | None
    data_ini: str | None
    json_path: str | None
    report_dir: str | None
    floors: list[Floor]
    reduce: str
    seed: int
    use_cache: bool
    guidance: str  # chosen (on validation items), fixed (as the options say) or sweep
    models: list[str]
    assignments: list[method_options.Assignment]  # ini lines first, the command line after
    strict_plugins: bool  # a plugin that fails to load is a usage error
    shard: Shard | None = None  # --prefalign-shard K/N
    memory: float | None = None  # GB the whole run may use (None: what the machine has)
    dtype: str | None = None  # the models' passes: float32, bfloat16 (None: the device's)


def settings(config: pytest.Config) -> Settings:
    """Resolve every option once; a bad ini value is a usage error naming it."""

    def pick(opt: str, ini: str, conv, default):
        value = config.getoption(opt)
        return value if value is not None else from_ini(ini, conv, default)

    def from_ini(ini: str, conv, default):
        raw = config.getini(ini)
        if not raw:
            return default
        try:
            return conv(raw)
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"ini value {ini}: {exc}") from None

    cli_floors = [f for group in config.getoption("prefalign_fail_under") for f in group]
    return Settings(
        methods=pick("prefalign_methods", "prefalign_methods", comma_list, None),
        sizes=pick("prefalign_sizes", "prefalign_sizes", comma_list, list(DEFAULT_SIZES)),
        limit=pick("prefalign_limit", "prefalign_limit", positive_int, DEFAULT_LIMIT),
        data=config.getoption("prefalign_data"),
        data_ini=config.getini("prefalign_data") or None,
        json_path=config.getoption("prefalign_json"),
        report_dir=config.getoption("prefalign_report"),
        # the command line's floors replace the ini's (its option defaults to [], not None)
        floors=cli_floors or from_ini("prefalign_fail_under", floors, []),
        # the run file keeps the other reduction's figures too
        reduce=pick("prefalign_reduce", "prefalign_reduce", reduce_kind, DEFAULT_REDUCE),
        seed=config.getoption("prefalign_seed")
        if config.getoption("prefalign_seed") is not None
        else DEFAULT_SEED,
        use_cache=not config.getoption("prefalign_no_cache"),
        guidance=pick("prefalign_guidance", "prefalign_guidance", guidance_kind, DEFAULT_GUIDANCE),
        models=list(config.getini("prefalign_models")),
        assignments=[
            *_ini_assignments(config),
            *(a for group in config.getoption("prefalign_option") for a in group),
        ],
        strict_plugins=bool(
            config.getoption("prefalign_strict_plugins")
            or config.getini("prefalign_strict_plugins")
        ),
        shard=config.getoption("prefalign_shard"),
        memory=pick("prefalign_memory", "prefalign_memory", memory_gb, None),
        dtype=pick("prefalign_dtype", "prefalign_dtype", dtype_kind, None),
    )


def _ini_assignments(config: pytest.Config) -> list[method_options.Assignment]:
    out = []
    for line in config.getini("prefalign_options"):
        if line.strip() and not line.strip().startswith("#"):
            try:
                out += method_options.assignments(line)
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(f"ini value prefalign_options: {exc}") from None
    return out


def finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)
