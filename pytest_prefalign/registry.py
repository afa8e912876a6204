"""The one registry of suites, decoders, reward methods and judges: the built-ins listed here
(``BUILTINS``), and third-party packages through the ``prefalign`` entry-point group and the
``pytest_prefalign_register`` hook.

The built-ins are a list of ``"module:attr"`` targets, as pytest lists its own plugins in
``default_plugins``: no installed metadata is read to find them, so a new built-in is its module
and one line of ``BUILTINS``, with no reinstall. A target is imported when the entry is first
used (``Entry.obj``), as lm-eval's registry resolves a placeholder: ``prefalign list`` imports
no suite, and a plugin may register targets too (``registry.add_decoder("x", "pkg.mod:X")``).

A third-party registration of a built-in name wins over the built-in, whatever order the entry
points load in; two third-party registrations of one name are a conflict (``conflicts``), which
the run refuses, naming both. A plugin that fails to load is recorded with its error
(``failures``), and asking for a name it may have provided shows that error instead of a plain
"unknown name".
"""

from __future__ import annotations

import inspect
import pkgutil
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pytest_prefalign.api import INDEPENDENT_JUDGE, declared

if TYPE_CHECKING:  # pragma: no cover
    import pluggy

    from pytest_prefalign.api import Decoder, Judge, RewardMethod, Suite

GROUP = "prefalign"
HOOK = "pytest_prefalign_register"  # what a plugin defines
BUILTIN_MODULES = ("prefalign_methods", "prefalign_suites")
DISTRIBUTION = "pytest-prefalign"  # the distribution the built-ins come with, for messages
KINDS = ("decoder", "reward", "suite", "judge")
MADE = ("suite", "judge")  # kinds whose target is a class made once, with no arguments
# The built-ins, one line each: (kind, name, "module:attr"). The core imports none of them: each
# target is imported when its entry is first used. Entry points are for third-party packages.
BUILTINS: tuple[tuple[str, str, str], ...] = (
    ("decoder", "base", "prefalign_methods.decoders.base:BaseDecoder"),
    ("decoder", "icl", "prefalign_methods.decoders.icl:ICLDecoder"),
    ("decoder", "icl_rag", "prefalign_methods.decoders.icl:RAGDecoder"),
    ("decoder", "lead", "prefalign_methods.decoders.lead:LeadDecoder"),
    ("decoder", "profile_copy", "prefalign_methods.decoders.profile_copy:ProfileCopyDecoder"),
    ("decoder", "args", "prefalign_methods.decoders.args:ArgsDecoder"),
    ("decoder", "genarm", "prefalign_methods.decoders.genarm:GenARMDecoder"),
    ("decoder", "bon", "prefalign_methods.decoders.bon:BestOfNDecoder"),
    ("reward", "global_bt", "prefalign_methods.rewards.global_bt:GlobalBT"),
    ("reward", "per_user_bt", "prefalign_methods.rewards.per_user_bt:PerUserBT"),
    ("reward", "lore", "prefalign_methods.rewards.lore:LoRe"),
    ("reward", "vpl", "prefalign_methods.rewards.vpl:VPL"),
    ("reward", "pal", "prefalign_methods.rewards.pal:PAL"),
    ("reward", "pref", "prefalign_methods.rewards.pref:PReF"),
    ("reward", "hier_bt", "prefalign_methods.rewards.hier_bt:HierBT"),
    ("reward", "history_bt", "prefalign_methods.rewards.history_bt:HistoryBT"),
    ("reward", "arm", "prefalign_methods.rewards.arm:ARM"),
    ("reward", "profile_bm25", "prefalign_methods.rewards.profile_bm25:ProfileBM25"),
    ("reward", "profile_overlap", "prefalign_methods.rewards.profile_overlap:ProfileOverlap"),
    ("reward", "profile_impostors", "prefalign_methods.rewards.profile_impostors:ProfileImpostors"),
    ("reward", "profile_minilm", "prefalign_methods.rewards.profile_minilm:ProfileMiniLM"),
    ("reward", "global_bt_minilm", "prefalign_methods.rewards.minilm_bt:GlobalBTMiniLM"),
    ("reward", "per_user_bt_minilm", "prefalign_methods.rewards.minilm_bt:PerUserBTMiniLM"),
    ("reward", "oracle", "prefalign_suites.synthetic.oracle:Oracle"),
    ("reward", "oracle_noisy", "prefalign_suites.synthetic.oracle:NoisyOracle"),
    ("reward", "oracle_negated", "prefalign_suites.synthetic.oracle:NegatedOracle"),
    ("reward", "oracle_noise1", "prefalign_suites.synthetic.oracle:Noise1Oracle"),
    ("reward", "oracle_noise4", "prefalign_suites.synthetic.oracle:Noise4Oracle"),
    ("reward", "oracle_noise8", "prefalign_suites.synthetic.oracle:Noise8Oracle"),
    ("suite", "pref_lamp", "prefalign_suites.pref_lamp.suite:PrefLamp"),
    ("suite", "polis", "prefalign_suites.polis.suite:Polis"),
    ("suite", "tldr", "prefalign_suites.tldr.suite:Tldr"),
    ("suite", "prism", "prefalign_suites.prism.suite:Prism"),
    ("suite", "synthetic", "prefalign_suites.synthetic.suite:Synthetic"),
    ("judge", INDEPENDENT_JUDGE, "prefalign_methods.rewards.judge:MiniLMJudge"),
)
METHOD_RE = re.compile(r"^(?P<decoder>[A-Za-z0-9_.-]+)(\[(?P<reward>[A-Za-z0-9_.-]+)\])?$")
# frames of the import machinery and of this loader, left out of a plugin's traceback
_LOADER_FRAMES = ("importlib", "pluggy", "pytest_prefalign/registry.py")


class UnknownName(LookupError):
    """A name that nothing registered; the message lists what is available, and the error of
    any plugin that failed to load and may have provided it."""


@dataclass(frozen=True)
class Target:
    """A ``"module:attr"`` reference (``attr`` may be dotted), imported when first resolved;
    ``make``: what it names is called once with no arguments (a suite's or a judge's class)."""

    spec: str
    make: bool = False

    def __post_init__(self) -> None:
        module, sep, attr = self.spec.partition(":")
        if not (sep and module and attr):
            raise ValueError(f"{self.spec!r} is not a target: expected 'module:attr'")

    @property
    def module(self) -> str:
        return self.spec.partition(":")[0]

    def resolve(self) -> Any:
        found = pkgutil.resolve_name(self.spec)
        return found() if self.make else found


@dataclass
class Entry:
    name: str
    found: Any  # a factory (decoders, reward methods), a suite or judge, or a Target of one
    origin: str  # the module that registered it (a target's own module)
    package: str | None = None  # the installed distribution that provided it, when known
    version: str | None = None  # and its version
    builtin: bool = False  # listed in BUILTINS

    @property
    def obj(self) -> Any:
        """What was registered; a target is imported (and a suite or judge made) on first use,
        or ``UnknownName`` says why it cannot be, naming the target and who registered it."""
        if isinstance(self.found, Target):
            try:
                self.found = self.found.resolve()
            except Exception as exc:
                raise UnknownName(
                    f"{self.name!r} is not available: its target {self.found.spec!r} "
                    f"({self.provider}) failed: {type(exc).__name__}: {exc}"
                ) from exc
        return self.found

    @property
    def provider(self) -> str:
        """Who provided it, for messages: ``mypkg 0.2 (mypkg.myrm)``, or the module alone."""
        if self.package is None:
            return f"module {self.origin} (not from an installed package)"
        return f"{self.package} {self.version or '?'} ({self.origin})"


@dataclass(frozen=True)
class Failure:
    """A plugin that failed to load: an entry point that could not be imported, or a
    ``pytest_prefalign_register`` that raised."""

    source: str  # "entry point 'myrm' (mypkg.myrm, from mypkg)" or "plugin 'name'"
    error: str  # the exception's last line
    details: str  # its traceback, trimmed to the plugin's own frames
    names: frozenset[str] = frozenset()  # names it may have registered (entry point, module)

    def __str__(self) -> str:
        return f"{self.source}: {self.error}"

    def full(self) -> str:
        """The one line and the traceback below it."""
        return f"{self}\n{self.details}".rstrip()


@dataclass(frozen=True)
class MethodName:
    """``decoder`` or ``decoder[reward]``, as written on the command line and in ids."""

    decoder: str
    reward: str | None

    @classmethod
    def parse(cls, text: str) -> MethodName:
        match = METHOD_RE.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a method name: expected DECODER or DECODER[REWARD]")
        return cls(match["decoder"], match["reward"])

    def __str__(self) -> str:
        return self.decoder if self.reward is None else f"{self.decoder}[{self.reward}]"


@dataclass
class Registry:
    rewards: dict[str, Entry] = field(default_factory=dict)
    decoders: dict[str, Entry] = field(default_factory=dict)
    suites: dict[str, Entry] = field(default_factory=dict)
    judges: dict[str, Entry] = field(default_factory=dict)  # api.INDEPENDENT_JUDGE: the one asked
    failures: list[Failure] = field(default_factory=list)  # plugins that failed to load
    conflicts: list[str] = field(default_factory=list)  # names two plugins registered
    overrides: list[str] = field(default_factory=list)  # built-ins a plugin replaced
    # who is registering now: (module, distribution, version, built-in), set while a plugin's
    # hook runs or the built-ins are added
    _registering: tuple[str, str | None, str | None, bool] | None = field(
        default=None, repr=False, compare=False
    )

    # Each ``add_*`` takes the object, or a ``"module:attr"`` target of it imported on first use.

    def add_reward(self, name: str, factory: Callable[..., RewardMethod] | str) -> None:
        self._add(self.rewards, "reward method", name, _target(factory, make=False))

    def add_decoder(self, name: str, factory: Callable[..., Decoder] | str) -> None:
        self._add(self.decoders, "decoder", name, _target(factory, make=False))

    def add_suite(self, suite: Suite | str, name: str | None = None) -> None:
        """A suite object, or the target of its class with ``name``, the suite's name."""
        if isinstance(suite, str):
            if name is None:
                raise ValueError(f"add_suite({suite!r}): a target needs the suite's name")
            self._add(self.suites, "suite", name, _target(suite, make=True))
        else:
            self._add(self.suites, "suite", suite.name, suite)

    def add_judge(self, name: str, judge: Judge | str) -> None:
        """A judge of the win rates over base (``api.Judge``), or the target of its class;
        the evaluation asks for ``api.INDEPENDENT_JUDGE``."""
        self._add(self.judges, "judge", name, _target(judge, make=True))

    def add(self, kind: str, name: str, target: str) -> None:
        """``kind`` (one of ``KINDS``) ``name`` from a ``"module:attr"`` target."""
        adders: dict[str, Callable[[str, str], None]] = {
            "decoder": self.add_decoder,
            "reward": self.add_reward,
            "suite": lambda n, t: self.add_suite(t, n),
            "judge": self.add_judge,
        }
        if kind not in adders:
            raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        adders[kind](name, target)

    @contextmanager
    def registering(
        self,
        module: str,
        package: str | None = None,
        version: str | None = None,
        *,
        builtin: bool = False,
    ) -> Iterator[None]:
        """Attribute what is added inside to ``module`` (from ``package`` ``version``)."""
        self._registering = (module, package, version, builtin)
        try:
            yield
        finally:
            self._registering = None

    def _add(self, table: dict[str, Entry], kind: str, name: str, obj: Any) -> None:
        if self._registering is not None:
            entry = Entry(name, obj, *self._registering)
        else:  # added directly (a test): the object's module, its package not looked up
            module = obj.module if isinstance(obj, Target) else _module_of(obj)
            entry = Entry(name, obj, module, builtin=module.split(".")[0] in BUILTIN_MODULES)
        current = table.get(name)
        if current is not None and current.origin != entry.origin:
            if not current.builtin and entry.builtin:
                self._overridden(kind, name, current)
                return  # a third-party override stays, whichever loaded first
            if current.builtin and not entry.builtin:
                self._overridden(kind, name, entry)
            elif not current.builtin and not entry.builtin:
                first, second = sorted((current.provider, entry.provider))
                self.conflicts.append(
                    f"{kind} {name!r} is registered twice: by {first} and by {second}; "
                    "uninstall one, or register one under another name"
                )
                return
        table[name] = entry

    def _overridden(self, kind: str, name: str, by: Entry) -> None:
        self.overrides.append(f"{kind} {name!r}: the built-in is replaced by {by.provider}")

    # -- look-ups ------------------------------------------------------------------------------

    def suite(self, name: str) -> Suite:
        return self._get(self.suites, name, "suite").obj

    def suite_entry(self, name: str) -> Entry:
        return self._get(self.suites, name, "suite")

    def decoder(self, name: str) -> Entry:
        return self._get(self.decoders, name, "decoder")

    def reward(self, name: str) -> Entry:
        return self._get(self.rewards, name, "reward method")

    def judge(self, name: str) -> Entry:
        return self._get(self.judges, name, "judge")

    def _get(self, table: dict[str, Entry], name: str, kind: str) -> Entry:
        if name in table:
            return table[name]
        known = ", ".join(sorted(table)) or "none"
        named = [f for f in self.failures if name.lower() in f.names]
        if named:  # its own plugin failed: that error is the answer, not "unknown"
            raise UnknownName(
                f"{kind} {name!r} is not available: its plugin failed to load: "
                f"{named[0].full()}\n(available: {known})"
            )
        message = f"unknown {kind} {name!r}; available: {known}"
        if self.failures:
            message += f"\n{len(self.failures)} plugin(s) failed to load and may have provided it:"
            message += "".join(f"\n{f.full()}" for f in self.failures)
        raise UnknownName(message)

    def check_method(self, method: MethodName) -> None:
        """Raise UnknownName or ValueError when the decoder and reward method cannot combine."""
        decoder = self.decoder(method.decoder).obj
        needs: frozenset[str] = declared(decoder, "needs")
        if method.reward is None:
            if needs:
                raise ValueError(
                    f"decoder {method.decoder!r} needs a reward method: "
                    f"write {method.decoder}[REWARD]"
                )
            return
        if not needs:
            raise ValueError(f"decoder {method.decoder!r} takes no reward method")
        reward = self.reward(method.reward).obj
        missing = set(needs) - {"score"} - set(declared(reward, "capabilities"))
        if missing:
            raise ValueError(
                f"{method}: decoder {method.decoder!r} needs the capability "
                f"{', '.join(sorted(missing))} that reward method {method.reward!r} "
                "does not declare"
            )

    def default_methods(self) -> list[MethodName]:
        """Every decoder without a reward method; each reward method with the decoder it names
        as ``default_decoder``, else the first reward-guided decoder (by ``order``) that it can
        serve; and each reward-guided decoder with the reward method it names as
        ``default_reward`` (whatever other rows it has), or, left without a row, the first
        reward method (by name) that it can take. So every
        registered method, reward or decoder, has at least one row, except a reward method
        that sets ``in_default_methods = False`` (one made for a single suite, such as the
        synthetic suite's ``oracle``): it runs only when named."""
        plain = [
            MethodName(n, None) for n, e in self.decoders.items() if not declared(e.obj, "needs")
        ]
        guided = sorted(
            (e for e in self.decoders.values() if declared(e.obj, "needs")),
            key=lambda e: (declared(e.obj, "order"), e.name),
        )
        rewards = {n: e for n, e in self.rewards.items() if declared(e.obj, "in_default_methods")}
        combos = []
        for reward, entry in rewards.items():
            # a reward method may name the decoder it is made for (arm: genarm)
            hint = declared(entry.obj, "default_decoder")
            combos += self._first_valid(
                MethodName(dec.name, reward) for dec in sorted(guided, key=lambda e: e.name != hint)
            )
        for dec in guided:
            hint = declared(dec.obj, "default_reward")
            # a decoder's named row stays when other reward methods chose that decoder too
            # (bon[per_user_bt] beside the MiniLM methods' bon rows)
            has_row = any(c.decoder == dec.name for c in combos)
            if has_row and hint not in rewards:
                continue
            named = [hint] if has_row else sorted(rewards, key=lambda r: (r != hint, r))
            combos += self._first_valid(
                MethodName(dec.name, reward)
                for reward in named
                if MethodName(dec.name, reward) not in combos
            )

        def order(m: MethodName) -> tuple[int, str]:
            return declared(self.decoders[m.decoder].obj, "order"), m.reward or ""

        return sorted(plain, key=order) + sorted(combos, key=order)

    def _first_valid(self, candidates: Iterable[MethodName]) -> list[MethodName]:
        """The first candidate whose decoder and reward method combine, or none."""
        for candidate in candidates:
            try:
                self.check_method(candidate)
            except ValueError:
                continue
            return [candidate]
        return []


def add_builtins(registry: Registry, *names: str) -> None:
    """Add the ``BUILTINS`` (those named, or all), each as its target, imported on first use."""
    unknown = set(names) - {name for _, name, _ in BUILTINS}
    if unknown:
        raise UnknownName(f"no built-in named {', '.join(sorted(unknown))}")
    version = own_version()
    for kind, name, target in BUILTINS:
        if names and name not in names:
            continue
        with registry.registering(target.partition(":")[0], DISTRIBUTION, version, builtin=True):
            registry.add(kind, name, target)


def own_version() -> str | None:
    """The installed version of this distribution, for messages (None when not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def load(pluginmanager: pluggy.PluginManager) -> Registry:
    """The built-ins (``BUILTINS``), then every ``prefalign`` entry point imported, registered
    as a plugin and its registrations collected. A plugin that fails to load is recorded
    (``failures``), not raised; a name two plugins register is recorded in ``conflicts``."""
    registry = Registry()
    add_builtins(registry)
    packages: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
    for ep in metadata.entry_points(group=GROUP):
        if ep.module.split(".")[0] in BUILTIN_MODULES:
            continue  # metadata of an install from before the built-ins were listed here
        dist = (ep.dist.name, ep.dist.version) if ep.dist else ("?", "?")
        # the distribution in the name: two packages may use one entry point name, and each
        # must load (a name both register is then a conflict, not a silent skip)
        name = f"prefalign-{dist[0]}-{ep.name}"
        packages[name] = dist
        if pluginmanager.has_plugin(name):
            continue
        try:
            plugin = _hook_owner(ep.load(), ep.value)
            pluginmanager.register(plugin, name)
        except Exception as exc:  # a broken third-party package must not stop the run
            registry.failures.append(
                _failure(
                    f"entry point {ep.name!r} ({ep.value}, from {dist[0]})",
                    exc,
                    ep.name,
                    ep.module,
                    dist[0],
                )
            )
    # each implementation on its own, so that one that raises cannot hide the others
    for impl in pluginmanager.hook.pytest_prefalign_register.get_hookimpls():
        module = _module_name(impl.plugin, impl.plugin_name)
        package, version = packages.get(impl.plugin_name) or distribution_of(module)
        try:
            with registry.registering(module, package, version):
                impl.function(registry=registry)
        except Exception as exc:
            registry.failures.append(
                _failure(
                    f"plugin {impl.plugin_name!r}",
                    exc,
                    impl.plugin_name,
                    module,
                    package or "",
                    prefix="pytest_prefalign_register raised ",
                )
            )
    return registry


def _hook_owner(loaded: Any, value: str) -> Any:
    """The plugin an entry point names: a module (or object) defining
    ``pytest_prefalign_register``; for the ``module:pytest_prefalign_register`` form, the
    function's module. Anything else would register nothing, silently: an error."""
    if hasattr(loaded, HOOK):
        return loaded
    if inspect.isfunction(loaded) and loaded.__name__ == HOOK:
        module = sys.modules.get(loaded.__module__)
        if module is not None and vars(module).get(HOOK) is loaded:
            return module
    raise LookupError(
        f"{value} defines no {HOOK}(registry) function, so it would register nothing: point "
        f"the entry point at the module that defines it"
    )


def distribution_of(module: str) -> tuple[str | None, str | None]:
    """The installed distribution that provides ``module`` and its version, or ``(None,
    None)`` for a module of no distribution (a conftest.py, a file on the path)."""
    top = module.split(".")[0]
    if top in ("conftest", "__main__") or module.endswith(".py"):
        return None, None
    names = metadata.packages_distributions().get(top) or []
    if not names:
        return None, None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return names[0], None


def _target(obj: Any, *, make: bool) -> Any:
    """A ``"module:attr"`` string as a ``Target`` (``make``: a class made once on first use),
    anything else as it is."""
    return Target(obj, make=make) if isinstance(obj, str) else obj


def _module_of(obj: Any) -> str:
    return getattr(obj, "__module__", None) or type(obj).__module__


def _module_name(plugin: Any, fallback: str) -> str:
    """The module a plugin is; a ``conftest.py`` by its file, since every one is ``conftest``."""
    if isinstance(plugin, ModuleType):
        file = vars(plugin).get("__file__")
        if plugin.__name__.split(".")[-1] == "conftest" and file:
            return str(file)
        return plugin.__name__
    return type(plugin).__module__ or fallback


def _failure(source: str, exc: BaseException, *names: str, prefix: str = "") -> Failure:
    """A failure with the exception's last line and its traceback without the loader's frames."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not any(part in f.filename.replace("\\", "/") for part in _LOADER_FRAMES)
    ]
    details = "".join(traceback.format_list(frames))
    if details:
        details = "Traceback (most recent call last):\n" + details
    details += "".join(traceback.format_exception_only(type(exc), exc))
    keys = {n.lower() for n in names if n}
    keys |= {k.split(".")[-1] for k in keys} | {k.replace("-", "_") for k in keys}
    return Failure(source, prefix + last, details, frozenset(keys))
