"""Spark's own output kept out of the terminal: its log in a file, its console bar off.

A failed export used to print ~150-280 lines of Java and Python traces before the one line
that said what was wrong. :func:`quiet_session_conf` gives the settings of a session the
command starts itself: Spark's log4j2 writes everything (INFO and up, traces included) to a log
file, nothing to the console, and Spark's console progress bar is off (the command shows its
own progress). The command prints the typed error and the log's path. A session that already
exists (spark-submit, a notebook, the tests) keeps its own logging.
"""

from __future__ import annotations

import datetime
import tempfile
from pathlib import Path

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


def default_log_path(command: str) -> Path:
    """``$TMPDIR/tiered-gateway-<command>-<UTC time>.log``: out of the working directory, which
    may be read-only or a data folder, and named so the newest is easy to find."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.gettempdir()) / f"tiered-gateway-{command}-{stamp}.log"


def quiet_session_conf(log_path: Path) -> dict[str, str]:
    """Spark settings that send its log to ``log_path`` (created now, with the log4j2
    configuration beside it) and turn its console progress bar off."""
    log_path = log_path.resolve()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.touch()
    config = log_path.with_name(log_path.name + ".log4j2.properties")
    config.write_text(_LOG4J2.format(path=log_path), encoding="utf-8")
    return {
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config.as_uri()}",
    }
