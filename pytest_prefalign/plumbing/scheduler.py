"""The xdist scheduler of a prefalign run under ``-n``: each group of tests (a (suite, size)) to
one worker, whole, the largest groups first; every other test a group of its own. It is the
project's own implementation of the ``Scheduling`` protocol that xdist's documented
``pytest_xdist_make_scheduler`` hook returns, and asks of a worker only what xdist's own
schedulers ask (``send_runtest_some``, ``shutdown``, ``shutting_down``, ``gateway.id``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

# A worker runs a test only once it knows the next one (pytest's teardown needs it), so it
# holds its last test back until more come or it is shut down: a worker with this many tests
# pending or fewer is given the next group.
LOW_WATER = 2


def worker_count(config: pytest.Config) -> int:
    """The workers xdist starts: one per ``--tx`` spec, ``N*spec`` counting N (``-n N`` is
    ``N`` times ``popen``)."""
    count = 0
    for spec in config.getoption("tx", None) or []:
        times, star, _ = spec.partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


class PrefalignGroupScheduling:
    """Every worker reports the tests it collected; once all have (and the collections agree),
    the tests are cut into groups by ``group`` (a test id to its group's name), the largest
    first unless ``--no-loadscope-reorder``; each worker is given a group, and more whenever
    its pending tests fall to ``LOW_WATER``; a worker is shut down once no group is left, after
    the tests it holds. The tests a crashed worker had not finished go back on the queue,
    regrouped, the one it was running among them (xdist reports that one failed, and runs it
    again on a new worker, as ``--dist loadscope`` does)."""

    def __init__(self, config: pytest.Config, log: Any, group: Callable[[str], str]) -> None:
        self.config = config
        self.log = log.prefalignsched
        self.group = group
        self.expected = worker_count(config)  # the workers whose collections are awaited
        self.collections: dict[WorkerController, list[str]] = {}
        self.collection: list[str] | None = None  # the tests, once the groups are cut
        self.queue: deque[list[int]] = deque()  # groups no worker has: test indices
        self.assigned: dict[WorkerController, dict[int, bool]] = {}  # sent: index -> done

    @property
    def nodes(self) -> list[WorkerController]:
        return list(self.assigned)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.collections) >= self.expected

    @property
    def tests_finished(self) -> bool:
        """True once nothing is queued and each worker holds at most its last test (which it
        runs when it is shut down)."""
        if not self.collection_is_completed or self.queue:
            return False
        return all(self.pending(node) < 2 for node in self.assigned)

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(self.pending(node) for node in self.assigned)

    def pending(self, node: WorkerController) -> int:
        return list(self.assigned[node].values()).count(False)

    def add_node(self, node: WorkerController) -> None:
        self.assigned[node] = {}

    def add_node_collection(self, node: WorkerController, collection: Sequence[str]) -> None:
        """A worker's tests. One that starts after the groups were cut (in place of a crashed
        one) and collected other tests is shut down unused."""
        if self.collection is not None and list(collection) != self.collection:
            self.log(f"{node.gateway.id} collected other tests than the run's; shut down")
            self.assigned.pop(node, None)
            node.shutdown()
            return
        self.collections[node] = list(collection)

    def schedule(self) -> None:
        """Cut the groups and give each worker its first (once all collections are in); called
        again when a new worker has collected, to give it work."""
        if self.collection is not None:
            for node in self.nodes:
                self.reschedule(node)
            return
        if not self.same_collections():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.collections.values()))
        if not self.collection:
            return
        groups = self.cut(range(len(self.collection)))
        if self.config.getoption("loadscopereorder", True):
            groups.sort(key=len, reverse=True)
        self.queue.extend(groups)
        for node in self.nodes[len(self.queue) :]:  # more workers than groups
            self.log(f"Shutting down unused node {node.gateway.id}")
            del self.assigned[node]
            node.shutdown()
        for node in self.nodes:
            if node in self.collections:
                self.send(node)
        for node in self.nodes:
            self.reschedule(node)

    def cut(self, indices: Sequence[int] | range) -> list[list[int]]:
        """The tests at ``indices`` by group, each group in the order of the collection."""
        assert self.collection is not None
        groups: dict[str, list[int]] = {}
        for index in indices:
            groups.setdefault(self.group(self.collection[index]), []).append(index)
        return list(groups.values())

    def send(self, node: WorkerController) -> None:
        indices = self.queue.popleft()
        self.assigned[node].update(dict.fromkeys(indices, False))
        node.send_runtest_some(indices)

    def reschedule(self, node: WorkerController) -> None:
        """Give ``node`` groups while it is running low; shut it down if none is left."""
        if node.shutting_down or node not in self.collections:
            return
        while self.queue and self.pending(node) <= LOW_WATER:
            self.send(node)
        if not self.queue:
            node.shutdown()

    def mark_test_complete(
        self, node: WorkerController, item_index: int, duration: float = 0
    ) -> None:
        self.assigned[node][item_index] = True
        self.reschedule(node)

    def mark_test_pending(self, item: str) -> None:
        """Run ``item`` again (a ``pytest_handlecrashitem`` hook may ask it for a crashed
        test): first on the queue, a group of its own, unless it is queued or with a worker
        already (as the test a crashed worker was running is, by ``remove_node``)."""
        assert self.collection is not None
        index = self.collection.index(item)
        queued = any(index in group for group in self.queue)
        if not queued and not any(sent.get(index) is False for sent in self.assigned.values()):
            self.queue.appendleft([index])
        for node in self.nodes:
            self.reschedule(node)

    def remove_pending_tests_from_node(
        self, node: WorkerController, indices: Sequence[int]
    ) -> None:
        """Only a worker told to hand tests back (``--dist worksteal``) calls this; this
        scheduler never tells one."""
        raise NotImplementedError("PrefalignGroupScheduling takes no tests back from a worker")

    def remove_node(self, node: WorkerController) -> str | None:
        """A worker gone, at its end or in a crash: the test it was running when it crashed
        (``None`` if it had finished them all), and the unfinished ones queued again."""
        unfinished = [index for index, done in self.assigned.pop(node).items() if not done]
        if not unfinished:
            return None
        assert self.collection is not None
        self.queue.extend(self.cut(unfinished))
        for other in self.nodes:
            self.reschedule(other)
        return self.collection[unfinished[0]]

    def same_collections(self) -> bool:
        """Whether every worker collected the same tests; each one that did not is a failed
        collection report naming the two workers and the tests that differ."""
        from xdist.report import report_collection_diff

        (first, tests), *others = self.collections.items()
        same = True
        for node, collection in others:
            diff = report_collection_diff(tests, collection, first.gateway.id, node.gateway.id)
            if diff:
                same = False
                self.log(diff)
                report = pytest.CollectReport(
                    nodeid=node.gateway.id, outcome="failed", longrepr=diff, result=[]
                )
                self.config.hook.pytest_collectreport(report=report)
        return same
