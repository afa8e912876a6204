"""The xdist scheduler of a prefalign run (``plumbing/scheduler.py``), driven as xdist's
controller drives it, with workers that record what they are sent: each (suite, size) to one
worker whole, the largest first, a worker given more only when it runs low, every worker shut
down once nothing is left, a crashed worker's tests queued again and collections compared.
``tests/test_scale.py`` runs it under a real ``-n 2``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_prefalign.plumbing.scheduler import PrefalignGroupScheduling, worker_count
from pytest_prefalign.plumbing.workers import make_scheduler

# two suites at two sizes, and two tests of the project's own
TESTS = [
    "a/suite.toml::a[base-tiny]",
    "a/suite.toml::a[icl-tiny]",
    "a/suite.toml::a[args-tiny]",
    "a/suite.toml::a[base-tiny2]",
    "a/suite.toml::a[icl-tiny2]",
    "b/suite.toml::b[base-tiny]",
    "tests/test_x.py::test_one",
    "tests/test_x.py::test_two",
]


class Worker:
    """What the scheduler asks of xdist's ``WorkerController``: its id, tests to run, and a
    shutdown after the tests it holds."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, f"{self.gateway.id} was sent tests after its shutdown"
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.gateway.id


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, name: str) -> Log:  # xdist's Producer: log.name is a sub-log
        return self

    def __call__(self, *args: object) -> None:
        self.lines.append(" ".join(map(str, args)))


def config(workers: int, reorder: bool = True) -> SimpleNamespace:
    options = {"tx": ["popen"] * workers, "loadscopereorder": reorder}
    reports: list[pytest.CollectReport] = []
    return SimpleNamespace(
        getoption=lambda name, default=None: options.get(name, default),
        hook=SimpleNamespace(pytest_collectreport=lambda report: reports.append(report)),
        reports=reports,
    )


def started(workers: int, tests: list[str] = TESTS, reorder: bool = True):
    """A scheduler whose workers have collected ``tests`` and been scheduled."""
    sched = make_scheduler(config(workers, reorder), Log(), ["tiny", "tiny2"])
    nodes = [Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        assert not sched.collection_is_completed
        sched.add_node_collection(node, tests)
    assert sched.collection_is_completed
    sched.schedule()
    return sched, nodes


def names(indices: list[int]) -> list[str]:
    return [TESTS[i].split("::")[1] for i in indices]


def run(sched: PrefalignGroupScheduling, node: Worker, count: int) -> None:
    """``node`` finishes its next ``count`` tests, in the order it was sent them."""
    done = [i for i, finished in sched.assigned[node].items() if finished]
    for index in [i for i in node.sent if i not in done][:count]:
        sched.mark_test_complete(node, index)


def test_each_group_goes_whole_to_one_worker_the_largest_first():
    sched, (gw0, gw1) = started(2)
    assert sched.__class__.__name__ == "PrefalignGroupScheduling"  # the name xdist prints
    # a's tiny (3 tests) to gw0, a's tiny2 (2) to gw1; gw1 holds 2, so it is given b's tiny
    # too; gw0, with 3 pending, waits
    assert names(gw0.sent) == ["a[base-tiny]", "a[icl-tiny]", "a[args-tiny]"]
    assert names(gw1.sent) == ["a[base-tiny2]", "a[icl-tiny2]", "b[base-tiny]"]
    assert not sched.tests_finished and sched.has_pending
    run(sched, gw0, 1)  # gw0 down to 2 pending: the next group, one test of the project's
    assert names(gw0.sent[3:]) == ["test_one"]
    run(sched, gw1, 1)
    assert names(gw1.sent[3:]) == ["test_two"]  # the queue is empty: gw1 shut down, after
    assert gw1.shutting_down and not gw0.shutting_down  # its tests; gw0 when it next reports
    run(sched, gw0, 1)
    assert gw0.shutting_down
    assert not sched.tests_finished  # each still holds more than its last test
    run(sched, gw0, 1)
    run(sched, gw0, 2)
    run(sched, gw1, 2)
    assert sched.tests_finished and sched.has_pending  # each holds only its last test
    run(sched, gw0, 1)
    run(sched, gw1, 1)
    assert not sched.has_pending
    assert sorted(gw0.sent + gw1.sent) == list(range(len(TESTS)))  # every test once
    assert sched.remove_node(gw0) is None and sched.remove_node(gw1) is None


def test_without_reordering_the_groups_go_in_the_collections_order():
    sched, (gw0,) = started(1, reorder=False)
    run(sched, gw0, 1)
    run(sched, gw0, 3)
    assert names(gw0.sent) == [
        "a[base-tiny]", "a[icl-tiny]", "a[args-tiny]", "a[base-tiny2]", "a[icl-tiny2]",
        "b[base-tiny]", "test_one",
    ]  # fmt: skip


def test_workers_beyond_the_groups_are_shut_down_unused():
    tests = TESTS[:5]  # two groups
    sched, nodes = started(3, tests)
    assert [len(n.sent) for n in nodes] == [3, 2, 0]
    assert nodes[2].shutting_down and nodes[2] not in sched.nodes
    assert all(n.shutting_down for n in nodes)  # nothing left to give


def test_a_crashed_workers_unfinished_group_goes_whole_to_another_worker():
    sched, (gw0, gw1) = started(2)
    run(sched, gw0, 1)  # a[base-tiny] done, test_one sent; gw0 crashes running a[icl-tiny]
    crashed = sched.remove_node(gw0)
    assert crashed == "a/suite.toml::a[icl-tiny]"  # what xdist reports failed
    assert gw0 not in sched.nodes
    sched.mark_test_pending(crashed)  # a pytest_handlecrashitem asking again: queued already
    # test_two, then what gw0 left: a's tiny less a[base-tiny], and test_one
    assert [names(group) for group in sched.queue] == [
        ["test_two"], ["a[icl-tiny]", "a[args-tiny]"], ["test_one"]
    ]  # fmt: skip
    assert not gw1.shutting_down  # three pending: it waits
    run(sched, gw1, 1)  # down to two: test_two
    run(sched, gw1, 1)  # and again: what gw0 left of a's tiny, whole, the crashed test in it
    assert names(gw1.sent[3:]) == ["test_two", "a[icl-tiny]", "a[args-tiny]"]
    run(sched, gw1, 2)
    assert names(gw1.sent[6:]) == ["test_one"] and gw1.shutting_down
    sched.mark_test_pending("a/suite.toml::a[base-tiny]")  # asked again for a test run: first
    assert list(sched.queue) == [[0]]


def test_a_crashed_workers_tests_wait_for_a_new_worker_when_the_others_are_shut_down():
    sched, (gw0, gw1) = started(2, TESTS[:5])  # one group each: both shut down at once
    assert gw0.shutting_down and gw1.shutting_down
    assert sched.remove_node(gw0) == "a/suite.toml::a[base-tiny]"
    assert len(gw1.sent) == 2 and not sched.tests_finished and sched.has_pending
    gw2 = Worker("gw2")
    sched.add_node(gw2)
    sched.add_node_collection(gw2, TESTS[:5])
    sched.schedule()
    assert names(gw2.sent) == ["a[base-tiny]", "a[icl-tiny]", "a[args-tiny]"]


def test_a_new_worker_after_a_crash_is_given_work_when_it_has_collected():
    sched, (gw0, gw1) = started(2)
    sched.remove_node(gw0)  # before finishing anything: a's tiny back on the queue
    gw2 = Worker("gw2")
    sched.add_node(gw2)
    sched.reschedule(gw2)  # not collected yet: nothing
    assert gw2.sent == []
    sched.add_node_collection(gw2, TESTS)
    sched.schedule()  # given groups until it holds more than two: all that is queued
    assert names(gw2.sent) == [
        "test_one",
        "test_two",
        "a[base-tiny]",
        "a[icl-tiny]",
        "a[args-tiny]",
    ]


def test_a_late_worker_that_collected_other_tests_is_shut_down_unused():
    sched, (gw0, gw1) = started(2)
    gw2 = Worker("gw2")
    sched.add_node(gw2)
    sched.add_node_collection(gw2, TESTS[1:])
    assert gw2.shutting_down and gw2 not in sched.nodes and gw2.sent == []


def test_different_collections_are_a_failed_collection_report_and_nothing_runs():
    sched = PrefalignGroupScheduling(config(2), Log(), lambda nodeid: nodeid)
    gw0, gw1 = Worker("gw0"), Worker("gw1")
    sched.add_node(gw0)
    sched.add_node(gw1)
    sched.add_node_collection(gw0, TESTS)
    sched.add_node_collection(gw1, TESTS[:-1])
    sched.schedule()
    assert gw0.sent == gw1.sent == []
    (report,) = sched.config.reports
    assert report.failed and report.nodeid == "gw1"
    assert "tests/test_x.py::test_two" in str(report.longrepr)


def test_an_empty_collection_schedules_nothing():
    sched, (gw0,) = started(1, [])
    assert gw0.sent == [] and sched.tests_finished and not sched.has_pending


def test_the_workers_are_counted_from_the_tx_specs():
    def count(tx: list[str]) -> int:
        return worker_count(SimpleNamespace(getoption=lambda name, default=None: tx))

    assert count(["popen"] * 3) == 3
    assert count(["2*popen", "ssh=host//python=python3"]) == 3
    assert count([]) == 0
