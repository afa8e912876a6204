"""The one registry of suites, decoders and reward methods, filled through the ``prefalign``
entry-point group and the ``pytest_prefalign_register`` hook.

Built-ins register through the same path as third-party packages. A third-party registration of
a built-in name wins over the built-in, whatever order the entry points load in.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pluggy

    from pytest_prefalign.api import Decoder, RewardMethod, Suite

GROUP = "prefalign"
BUILTIN_MODULES = ("prefalign_methods", "prefalign_suites")
METHOD_RE = re.compile(r"^(?P<decoder>[A-Za-z0-9_.-]+)(\[(?P<reward>[A-Za-z0-9_.-]+)\])?$")


class UnknownName(LookupError):
    """A name that nothing registered; the message lists what is available."""


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any  # a factory (decoders, reward methods) or a suite object
    origin: str  # the module that registered it

    @property
    def builtin(self) -> bool:
        return self.origin.split(".")[0] in BUILTIN_MODULES


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
    failures: list[str] = field(default_factory=list)  # entry points that failed to load

    def add_reward(self, name: str, factory: Callable[..., RewardMethod]) -> None:
        self._add(self.rewards, name, factory)

    def add_decoder(self, name: str, factory: Callable[..., Decoder]) -> None:
        self._add(self.decoders, name, factory)

    def add_suite(self, suite: Suite) -> None:
        self._add(self.suites, suite.name, suite)

    def _add(self, table: dict[str, Entry], name: str, obj: Any) -> None:
        origin = getattr(obj, "__module__", None) or type(obj).__module__
        entry = Entry(name, obj, origin)
        current = table.get(name)
        if current is not None and not current.builtin and entry.builtin:
            return  # a third-party override stays, whichever loaded first
        table[name] = entry

    # -- look-ups ------------------------------------------------------------------------------

    def suite(self, name: str) -> Suite:
        return self._get(self.suites, name, "suite").obj

    def decoder(self, name: str) -> Entry:
        return self._get(self.decoders, name, "decoder")

    def reward(self, name: str) -> Entry:
        return self._get(self.rewards, name, "reward method")

    def _get(self, table: dict[str, Entry], name: str, kind: str) -> Entry:
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise UnknownName(f"unknown {kind} {name!r}; available: {known}")
        return table[name]

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
    registrations. An entry point that fails to import is recorded, not raised."""
    registry = Registry()
    for ep in entry_points(group=GROUP):
        name = f"prefalign-{ep.name}"
        if pluginmanager.has_plugin(name):
            continue
        try:
            plugin = ep.load()
            pluginmanager.register(plugin, name)
        except Exception as exc:  # a broken third-party package must not stop the run
            dist = ep.dist.name if ep.dist else "?"
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            registry.failures.append(f"entry point {ep.name!r} ({ep.value}, from {dist}): {last}")
    # each implementation on its own, so that one that raises cannot hide the others
    for impl in pluginmanager.hook.pytest_prefalign_register.get_hookimpls():
        try:
            impl.function(registry=registry)
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            registry.failures.append(
                f"plugin {impl.plugin_name!r}: pytest_prefalign_register raised {last}"
            )
    return registry
