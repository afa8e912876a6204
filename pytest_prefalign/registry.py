"""The one registry of suites, decoders, reward methods and judges, filled through the ``prefalign``
entry-point group and the ``pytest_prefalign_register`` hook.

Built-ins register through the same path as third-party packages. A third-party registration of
a built-in name wins over the built-in, whatever order the entry points load in; two third-party
registrations of one name are a conflict (``conflicts``), which the run refuses, naming both. A
plugin that fails to load is recorded with its error (``failures``), and asking for a name it
may have provided shows that error instead of a plain "unknown name".
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pluggy

    from pytest_prefalign.api import Decoder, Judge, RewardMethod, Suite

GROUP = "prefalign"
HOOK = "pytest_prefalign_register"  # what a plugin defines
BUILTIN_MODULES = ("prefalign_methods", "prefalign_suites")
METHOD_RE = re.compile(r"^(?P<decoder>[A-Za-z0-9_.-]+)(\[(?P<reward>[A-Za-z0-9_.-]+)\])?$")
# frames of the import machinery and of this loader, left out of a plugin's traceback
_LOADER_FRAMES = ("importlib", "pluggy", "pytest_prefalign/registry.py")


class UnknownName(LookupError):
    """A name that nothing registered; the message lists what is available, and the error of
    any plugin that failed to load and may have provided it."""


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any  # a factory (decoders, reward methods) or a suite object
    origin: str  # the module that registered it
    package: str | None = None  # the installed distribution that provided it, when known
    version: str | None = None  # and its version

    @property
    def builtin(self) -> bool:
        return self.origin.split(".")[0] in BUILTIN_MODULES

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
    # who is registering now: (module, distribution, version), set while a plugin's hook runs
    _registering: tuple[str, str | None, str | None] | None = field(
        default=None, repr=False, compare=False
    )

    def add_reward(self, name: str, factory: Callable[..., RewardMethod]) -> None:
        self._add(self.rewards, "reward method", name, factory)

    def add_decoder(self, name: str, factory: Callable[..., Decoder]) -> None:
        self._add(self.decoders, "decoder", name, factory)

    def add_suite(self, suite: Suite) -> None:
        self._add(self.suites, "suite", suite.name, suite)

    def add_judge(self, name: str, judge: Judge) -> None:
        """A judge of the win rates over base (``api.Judge``); the evaluation asks for
        ``api.INDEPENDENT_JUDGE``."""
        self._add(self.judges, "judge", name, judge)

    @contextmanager
    def registering(
        self, module: str, package: str | None = None, version: str | None = None
    ) -> Iterator[None]:
        """Attribute what is added inside to ``module`` (from ``package`` ``version``)."""
        self._registering = (module, package, version)
        try:
            yield
        finally:
            self._registering = None

    def _add(self, table: dict[str, Entry], kind: str, name: str, obj: Any) -> None:
        if self._registering is not None:
            entry = Entry(name, obj, *self._registering)
        else:  # added directly (a test): the object's module, its package not looked up
            entry = Entry(name, obj, getattr(obj, "__module__", None) or type(obj).__module__)
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
        needs: frozenset[str] = getattr(decoder, "needs", frozenset())
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
        missing = set(needs) - {"score"} - set(getattr(reward, "capabilities", ()))
        if missing:
            raise ValueError(
                f"{method}: decoder {method.decoder!r} needs the capability "
                f"{', '.join(sorted(missing))} that reward method {method.reward!r} "
                "does not declare"
            )

    def default_methods(self) -> list[MethodName]:
        """Every decoder without a reward method; each reward method with the decoder it names
        as ``default_decoder``, else the first reward-guided decoder (by ``order``) that it can
        serve; and each reward-guided decoder left without a row, with the reward method it
        names as ``default_reward``, else the first (by name) that it can take. So every
        registered method, reward or decoder, has at least one row, except a reward method
        that sets ``in_default_methods = False`` (one made for a single suite, such as the
        synthetic suite's ``oracle``): it runs only when named."""
        plain = [MethodName(n, None) for n, e in self.decoders.items() if not e.obj.needs]
        guided = sorted(
            (e for e in self.decoders.values() if e.obj.needs),
            key=lambda e: (getattr(e.obj, "order", 100), e.name),
        )
        rewards = {
            n: e for n, e in self.rewards.items() if getattr(e.obj, "in_default_methods", True)
        }
        combos = []
        for reward, entry in rewards.items():
            # a reward method may name the decoder it is made for (arm: genarm)
            hint = getattr(entry.obj, "default_decoder", None)
            combos += self._first_valid(
                MethodName(dec.name, reward) for dec in sorted(guided, key=lambda e: e.name != hint)
            )
        for dec in guided:
            if any(c.decoder == dec.name for c in combos):
                continue
            hint = getattr(dec.obj, "default_reward", None)
            combos += self._first_valid(
                MethodName(dec.name, reward)
                for reward in sorted(rewards, key=lambda r: (r != hint, r))
            )

        def order(m: MethodName) -> tuple[int, str]:
            return getattr(self.decoders[m.decoder].obj, "order", 100), m.reward or ""

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


def load(pluginmanager: pluggy.PluginManager) -> Registry:
    """Import every ``prefalign`` entry point, register it as a plugin and collect
    registrations. A plugin that fails to load is recorded (``failures``), not raised; a name
    two plugins register is recorded in ``conflicts``."""
    registry = Registry()
    packages: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
    for ep in metadata.entry_points(group=GROUP):
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
    if callable(loaded) and getattr(loaded, "__name__", "") == HOOK:
        module = sys.modules.get(getattr(loaded, "__module__", ""))
        if module is not None and getattr(module, HOOK, None) is loaded:
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


def _module_name(plugin: Any, fallback: str) -> str:
    """The module a plugin is; a ``conftest.py`` by its file, since every one is ``conftest``."""
    if isinstance(plugin, ModuleType):
        if plugin.__name__.split(".")[-1] == "conftest" and getattr(plugin, "__file__", None):
            return str(plugin.__file__)
        return plugin.__name__
    return getattr(type(plugin), "__module__", None) or fallback


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
