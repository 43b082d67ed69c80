"""Pure helpers of :mod:`streamscale.processes` (no process is started)."""

from __future__ import annotations

import pytest

from streamscale.processes import free_port, free_ports, one_per_address_space

JVM = "/usr/lib/jvm/java-17/bin/java -Xmx4g -cp spark.jar org.apache.spark.deploy.SparkSubmit"
WORKER = "python3 -m pyspark.daemon"


@pytest.mark.parametrize(
    ("procs", "kept"),
    [
        ({1: (0, WORKER)}, [1]),
        # a child the JVM is spawning (readlink, not yet exec'd): the JVM's own pages
        ({10: (1, JVM), 11: (10, JVM)}, [10]),
        # two generations of it
        ({10: (1, JVM), 11: (10, JVM), 12: (11, JVM)}, [10]),
        # the child has exec'd: a process of its own
        ({10: (1, JVM), 11: (10, "readlink -f /tmp/x")}, [10, 11]),
        # another JVM started by the same parent, not by the JVM: counted
        ({10: (1, JVM), 11: (1, JVM)}, [10, 11]),
        # Python's forked workers share a command line and are processes of their own
        ({20: (10, WORKER), 21: (20, WORKER)}, [20, 21]),
        # the parent is not among those counted: the child is
        ({11: (10, JVM)}, [11]),
    ],
)
def test_a_jvm_is_counted_once(procs: dict[int, tuple[int, str]], kept: list[int]) -> None:
    assert one_per_address_space(procs) == kept


def test_free_ports_are_distinct_and_avoid_the_taken_ones() -> None:
    taken = free_port()
    ports = free_ports(12, taken=(taken,))
    assert len(set(ports)) == 12 and taken not in ports
