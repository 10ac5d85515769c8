"""The package zip a driver adds for a cluster's executors (``SparkContext.addPyFile``).

On a cluster, the executors run their own Python: the tasks unpickle ``gateway`` objects (the
data source, its splits, the export's task function) and fail with ``No module named
'gateway'`` unless that Python can import the package. Two ways give it to them
(docs/spark.md):

* a packed environment (``make spark-env``: a venv-pack archive with the package and its
  compiled dependencies) passed with ``--archives ...#environment`` and
  ``spark.pyspark.python=./environment/bin/python``;
* when the executors' Python already has the compiled dependencies (numba, numpy, pyarrow,
  zstandard, ...) but not the package: the driver zips its own ``gateway`` and ``indexcache``
  (pure Python) and adds the zip to the context, which puts it first on the tasks' path. The
  executors then run exactly the code the driver planned with.

:func:`ship_package` does the second for a session on a cluster master, unless the user
shipped the code already (an archive in ``spark.archives`` / ``spark.yarn.dist.archives``, or a
``tiered_gateway`` / ``tiered-gateway`` file in ``spark.submit.pyFiles``) or turned it off with
``spark.tieredGateway.shipPackage=false`` (or ``TIERED_GATEWAY_SHIP_PACKAGE=false`` in the
driver's environment); ``true`` ships even then. Local masters never need it: their workers
run the driver's interpreter (:func:`gateway.spark.source.use_this_interpreter`).

The zip is built once per content: named by the SHA-256 of the packages' files, in
``$TMPDIR/tiered-gateway-pyfiles``, with fixed timestamps so the same sources give the same
bytes. The decision (:func:`ship_decision`) and the zip (:func:`package_zip`) are plain
functions; this module imports pyspark for its types only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import gateway
import indexcache
from gateway.errors import ConfigurationError

if TYPE_CHECKING:  # pyspark is imported by source and export only (gateway.spark)
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SHIP_CONF = "spark.tieredGateway.shipPackage"
SHIP_ENV = "TIERED_GATEWAY_SHIP_PACKAGE"
ARCHIVE_CONFS = ("spark.archives", "spark.yarn.dist.archives")
PY_FILES_CONF = "spark.submit.pyFiles"
ZIP_PREFIX = "tiered_gateway-"
_SHIPPED_NAMES = ("tiered_gateway", "tiered-gateway")
_CHOICES = {"auto": None, "true": True, "false": False}
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can hold: the same bytes every build
_SKIP_DIRS = frozenset({"__pycache__"})
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Decision:
    """Whether to ship the zip, and why (logged, and what the tests check)."""

    ship: bool
    reason: str


def ship_decision(master: str, conf: Mapping[str, str], environ: Mapping[str, str]) -> Decision:
    """Ship for a cluster master unless the code is there already or the user said no.

    ``conf`` is the session's Spark configuration, ``environ`` the driver's environment; the
    setting comes from ``spark.tieredGateway.shipPackage``, else ``TIERED_GATEWAY_SHIP_PACKAGE``
    (``auto`` when neither is set). A value other than auto, true or false is a
    :class:`~gateway.errors.ConfigurationError`, never read as one of them."""
    source, raw = SHIP_CONF, conf.get(SHIP_CONF)
    if raw is None:
        source, raw = SHIP_ENV, environ.get(SHIP_ENV)
    choice = _CHOICES.get((raw or "auto").strip().lower(), ...)
    if choice is ...:
        raise ConfigurationError(f"{source}={raw!r}: expected auto, true or false")
    if choice is False:
        return Decision(False, f"turned off by {source}")
    if choice is True:
        return Decision(True, f"forced by {source}")
    if master.startswith("local"):
        return Decision(False, f"local master {master}: its workers run the driver's Python")
    for key in ARCHIVE_CONFS:
        if conf.get(key, "").strip():
            return Decision(False, f"an environment is shipped ({key})")
    for entry in conf.get(PY_FILES_CONF, "").split(","):
        name = PurePosixPath(entry.strip()).name
        if name.startswith(_SHIPPED_NAMES):
            return Decision(False, f"{PY_FILES_CONF} has {name}")
    return Decision(True, f"cluster master {master}")


def _package_dirs() -> list[Path]:
    """The folders of the ``gateway`` and ``indexcache`` packages this driver runs."""
    dirs = [Path(p).parent for p in (gateway.__file__, indexcache.__file__) if p is not None]
    for folder in dirs:
        if not folder.is_dir():  # imported from a zip or an egg: nothing to zip from
            raise ConfigurationError(
                f"cannot zip the package from {folder}: not a folder (the driver imports it "
                f"from an archive; ship it yourself or set {SHIP_CONF}=false)"
            )
    return dirs


def _package_files(dirs: list[Path]) -> Iterator[tuple[str, Path]]:
    """(name in the zip, file) of every source and data file, in a fixed order."""
    for folder in dirs:
        root = folder.parent
        for current, subdirs, files in os.walk(folder):
            subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS)
            for name in sorted(files):
                if not name.endswith(_SKIP_SUFFIXES):
                    path = Path(current, name)
                    yield path.relative_to(root).as_posix(), path


def package_zip(cache_dir: Path | None = None, dirs: list[Path] | None = None) -> Path:
    """The zip of ``gateway`` and ``indexcache`` (or of ``dirs``), built unless the one for
    these exact contents is in ``cache_dir`` (``$TMPDIR/tiered-gateway-pyfiles``) already.

    Written to a temporary name and renamed, so a concurrent driver never adds half a zip."""
    dirs = _package_dirs() if dirs is None else dirs
    files = list(_package_files(dirs))
    digest = hashlib.sha256()
    for arcname, path in files:
        data = path.read_bytes()
        digest.update(f"{arcname}\0{len(data)}\0".encode())
        digest.update(data)
    folder = cache_dir or Path(tempfile.gettempdir()) / "tiered-gateway-pyfiles"
    target = folder / f"{ZIP_PREFIX}{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for arcname, path in files:
                info = zipfile.ZipInfo(arcname, _ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target


def ship_package(spark: SparkSession, cache_dir: Path | None = None) -> Path | None:
    """Add the package zip to ``spark``'s context when :func:`ship_decision` says so; the zip
    added, else None. Adding the same zip again (a reused session) is harmless: Spark keeps
    the first."""
    context = spark.sparkContext
    decision = ship_decision(context.master or "", dict(context.getConf().getAll()), os.environ)
    if not decision.ship:
        log.debug("package zip not shipped: %s", decision.reason)
        return None
    path = package_zip(cache_dir)
    context.addPyFile(str(path))
    log.info("package zip %s shipped to the executors: %s", path, decision.reason)
    return path
