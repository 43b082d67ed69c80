"""Which JVM options map a class archive, and what makes an archive stale (no JVM starts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamscale import class_archives


@pytest.fixture
def lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jars folder of its own, with two broker jars."""
    monkeypatch.setenv("STREAMSCALE_JARS_DIR", str(tmp_path))
    (tmp_path / "broker").mkdir()
    for name in ("a.jar", "b.jar"):
        (tmp_path / "broker" / name).write_bytes(b"jar")
    return tmp_path


def test_no_archive_no_option(lib: Path) -> None:
    # The option on a missing file would also turn off the JDK's own archive.
    assert class_archives.use_options(class_archives.KAFKA) == []


def test_an_archive_is_mapped_quietly(lib: Path) -> None:
    path = class_archives.archive_path(class_archives.KAFKA)
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert path == lib / "cds" / "kafka.jsa"
    assert class_archives.use_options(class_archives.KAFKA) == [
        f"-XX:SharedArchiveFile={path}",
        "-Xlog:cds*=off",
    ]


@pytest.mark.parametrize(
    "change",
    ["jdk", "jar rewritten", "jar added", "jar removed"],
)
def test_stamp_changes_with_the_jdk_and_every_jar(lib: Path, change: str) -> None:
    before = class_archives.stamp(class_archives.KAFKA, "17.0.15")
    jar = lib / "broker" / "a.jar"
    version = "17.0.15"
    if change == "jdk":
        version = "21.0.1"
    elif change == "jar rewritten":
        jar.write_bytes(b"another jar")
        os.utime(jar, ns=(1, 1))
    elif change == "jar added":
        (lib / "broker" / "c.jar").write_bytes(b"jar")
    else:
        jar.unlink()
    assert class_archives.stamp(class_archives.KAFKA, version) != before
    assert class_archives.stamp(class_archives.KAFKA, version) == class_archives.stamp(
        class_archives.KAFKA, version
    )


def test_record_puts_the_archive_in_place_with_its_stamp(
    lib: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(class_archives, "java_version", lambda: "17.0.15")
    seen: list[str] = []

    def workload(option: str) -> None:  # what a JVM does at exit with that option
        seen.append(option)
        assert class_archives.use_options(class_archives.KAFKA) == [], "the old one is gone"
        Path(option.split("=", 1)[1]).write_bytes(b"classes")

    path = class_archives.archive_path(class_archives.KAFKA)
    path.parent.mkdir()
    path.write_bytes(b"old")
    assert class_archives.record(class_archives.KAFKA, workload) == path
    assert seen == [f"-XX:ArchiveClassesAtExit={path.with_suffix('.partial.jsa')}"]
    assert path.read_bytes() == b"classes"
    assert class_archives.is_current(class_archives.KAFKA, "17.0.15")
    assert not class_archives.is_current(class_archives.KAFKA, "21.0.1")


def test_a_workload_that_writes_nothing_is_a_clear_error(
    lib: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(class_archives, "java_version", lambda: "17.0.15")
    with pytest.raises(class_archives.ArchiveError, match="wrote no class archive"):
        class_archives.record(class_archives.KAFKA, lambda option: None)
    assert not class_archives.is_current(class_archives.KAFKA, "17.0.15")


def test_setup_goes_on_without_an_archive_it_cannot_record(
    lib: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only slower without one: a failed recording is one line, and the set-up carries on."""
    monkeypatch.setattr(class_archives, "java_version", lambda: "17.0.15")

    def port_taken(option: str) -> None:
        raise RuntimeError("port 9092 on 127.0.0.1 is taken")

    monkeypatch.setattr(class_archives, "NAMES", (class_archives.KAFKA,))
    monkeypatch.setitem(class_archives.WORKLOADS, class_archives.KAFKA, port_taken)
    assert class_archives.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "setup: no kafka class archive (port 9092 on 127.0.0.1 is taken); its JVMs start without"
    )
