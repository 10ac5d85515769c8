"""The package zip a driver ships to a cluster (:mod:`gateway.spark.ship`): when it is shipped,
and what the zip holds. No SparkSession: a recording stand-in for the context; the real
cluster is tests/spark/test_cluster.py."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gateway
import indexcache
from gateway.errors import ConfigurationError
from gateway.spark.ship import (
    SHIP_CONF,
    SHIP_ENV,
    ZIP_PREFIX,
    ship_decision,
    ship_package,
)
from gateway.spark.ship import package_zip as build_zip

CLUSTER = "spark://10.0.0.1:7077"


@pytest.mark.parametrize(
    ("master", "conf", "environ", "ship"),
    [
        (CLUSTER, {}, {}, True),
        ("yarn", {}, {}, True),
        ("k8s://https://api:6443", {}, {}, True),
        ("local[2]", {}, {}, False),
        ("local", {}, {}, False),
        ("local-cluster[2,1,1024]", {}, {}, False),
        (CLUSTER, {"spark.archives": "env.tar.gz#environment"}, {}, False),
        ("yarn", {"spark.yarn.dist.archives": "hdfs:///envs/env.tar.gz#environment"}, {}, False),
        (CLUSTER, {"spark.archives": "  "}, {}, True),
        (
            CLUSTER,
            {"spark.submit.pyFiles": "file:/jobs/tiered_gateway-0.1-py3-none-any.whl"},
            {},
            False,
        ),
        (CLUSTER, {"spark.submit.pyFiles": "/a/deps.zip,/b/tiered-gateway.zip"}, {}, False),
        (CLUSTER, {"spark.submit.pyFiles": "/a/deps.zip,/b/other.zip"}, {}, True),
        (CLUSTER, {SHIP_CONF: "false"}, {}, False),
        (CLUSTER, {SHIP_CONF: " False "}, {}, False),
        (CLUSTER, {}, {SHIP_ENV: "false"}, False),
        (CLUSTER, {SHIP_CONF: "auto"}, {SHIP_ENV: "false"}, True),  # the conf wins
        (CLUSTER, {SHIP_CONF: "true", "spark.archives": "env.tar.gz#environment"}, {}, True),
        ("local[2]", {}, {SHIP_ENV: "true"}, True),
    ],
)
def test_when_the_zip_is_shipped(
    master: str, conf: dict[str, str], environ: dict[str, str], ship: bool
) -> None:
    decision = ship_decision(master, conf, environ)
    assert decision.ship is ship, decision.reason
    assert decision.reason


@pytest.mark.parametrize(("conf", "environ"), [({SHIP_CONF: "no"}, {}), ({}, {SHIP_ENV: "1"})])
def test_a_bad_setting_is_a_configuration_error_naming_it(
    conf: dict[str, str], environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigurationError, match=r"(spark\.tieredGateway|TIERED_GATEWAY).*auto"):
        ship_decision(CLUSTER, conf, environ)


def _tree(root: Path) -> list[Path]:
    (root / "pkg" / "sub" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "py.typed").write_text("")
    (root / "pkg" / "sub" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "mod.py").write_text("def f() -> int:\n    return 2\n")
    (root / "pkg" / "sub" / "mod.pyc").write_bytes(b"stale")
    (root / "pkg" / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")
    (root / "other").mkdir()
    (root / "other" / "__init__.py").write_text("OTHER = 3\n")
    return [root / "pkg", root / "other"]


def test_the_zip_holds_the_sources_and_is_reused_per_content(tmp_path: Path) -> None:
    dirs = _tree(tmp_path / "src")
    cache = tmp_path / "cache"
    first = build_zip(cache, dirs)
    assert first.name.startswith(ZIP_PREFIX) and first.suffix == ".zip"
    with zipfile.ZipFile(first) as zf:
        assert sorted(zf.namelist()) == [
            "other/__init__.py", "pkg/__init__.py", "pkg/py.typed", "pkg/sub/__init__.py",
            "pkg/sub/mod.py",
        ]  # fmt: skip
        assert zf.read("pkg/sub/mod.py") == (dirs[0] / "sub" / "mod.py").read_bytes()
    stamp = first.stat().st_mtime_ns
    assert build_zip(cache, dirs) == first  # the same content: the same file, not rebuilt
    assert first.stat().st_mtime_ns == stamp
    (dirs[0] / "sub" / "mod.py").write_text("def f() -> int:\n    return 3\n")
    second = build_zip(cache, dirs)
    assert second != first and second.is_file() and first.is_file()
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, second.name])


def test_the_same_sources_give_the_same_bytes(tmp_path: Path) -> None:
    """Fixed timestamps: another driver (or a rebuilt cache) ships an identical file."""
    dirs = _tree(tmp_path / "src")
    one = build_zip(tmp_path / "a", dirs).read_bytes()
    assert build_zip(tmp_path / "b", dirs).read_bytes() == one


def test_the_package_zip_imports_gateway_without_the_source_tree(tmp_path: Path) -> None:
    """The real packages: a Python with the zip first on its path imports the executors'
    modules (and whatever they import of both packages) from it, not from the source tree.
    (Modules without pyarrow: `make unit-without-spark` runs this too.)"""
    path = build_zip(tmp_path)
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    assert {"gateway/__init__.py", "gateway/spark/ship.py", "indexcache/__init__.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import gateway.spark.plan, gateway.kafka.kernel, indexcache; "
        "print(*sorted({m.__file__.split('.zip/')[0] + '.zip' for m in list(sys.modules.values())"
        " if m.__name__.split('.')[0] in ('gateway', 'indexcache')}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(path)]  # every module of both packages from the zip
    assert Path(gateway.__file__ or "").parent.is_dir()
    assert Path(indexcache.__file__ or "").parent.is_dir()


class _Context:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.master = master
        self.conf = conf
        self.added: list[str] = []

    def getConf(self) -> Any:  # noqa: N802 - pyspark's name
        return SimpleNamespace(getAll=lambda: list(self.conf.items()))

    def addPyFile(self, path: str) -> None:  # noqa: N802
        self.added.append(path)


@pytest.mark.parametrize(
    ("master", "conf", "shipped"),
    [(CLUSTER, {}, True), ("local[*]", {}, False), (CLUSTER, {SHIP_CONF: "false"}, False)],
)
def test_ship_package_adds_the_zip_to_the_context(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    master: str,
    conf: dict[str, str],
    shipped: bool,
) -> None:
    monkeypatch.delenv(SHIP_ENV, raising=False)
    context = _Context(master, conf)
    result = ship_package(SimpleNamespace(sparkContext=context), cache_dir=tmp_path)  # type: ignore[arg-type]
    if shipped:
        assert result is not None and context.added == [str(result)]
        assert result.parent == tmp_path and result.is_file()
    else:
        assert result is None and context.added == []
        assert list(tmp_path.iterdir()) == []  # nothing built either
