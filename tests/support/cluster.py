"""A Spark standalone cluster for the tests: a master and two one-core workers, started from pyspark's own
`spark-class` on 127.0.0.1 and stopped by pid."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support.sparkjvm import spark_jvm_env


class StandaloneCluster:
    """`url` is the master's spark:// URL; `apps()` what it ran; `executor_workers()` where its executors ran."""

    def __init__(self, tmp: Path, workers: int = 2):
        import pyspark

        self.tmp = tmp
        self.home = Path(pyspark.__file__).parent
        self.url, self.ui = "", 0
        self.env = dict(spark_jvm_env(tmp), SPARK_DAEMON_MEMORY="256m", SPARK_WORKER_DIR=str(tmp / "work"),
                        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self.procs: list[subprocess.Popen] = []
        self.n_workers = workers

    def _daemon(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                                           stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                           start_new_session=True))
        log.close()

    def start(self, timeout: float = 180) -> "StandaloneCluster":
        """Every port is the kernel's choice (0), read back from the master's log: a port picked here and bound
        later can be taken in between by another test's JVM, whose UI then answers the master's queries."""
        deadline = time.monotonic() + timeout
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", "0", "--webui-port", "0")
        while not (self.url and self.ui) and time.monotonic() < deadline and self.procs[0].poll() is None:
            log = (self.tmp / "master.log").read_text(errors="replace")
            url = re.search(r"Starting Spark master at (spark://\S+)", log)
            ui = re.search(r"Successfully started service 'MasterUI' on port (\d+)", log)
            self.url, self.ui = (url[1], int(ui[1])) if url and ui else ("", 0)
            time.sleep(0.2)
        for i in range(self.n_workers if self.url else 0):
            self._daemon(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1500m", "--webui-port", "0",
                         "--work-dir", str(self.tmp / f"work{i}"), self.url)
        while self.url and time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                if sum(w["state"] == "ALIVE" for w in self.state()["workers"]) == self.n_workers:
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        logs = "\n".join((self.tmp / f).read_text(errors="replace")[-2000:] for f in os.listdir(self.tmp)
                         if f.endswith(".log"))
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up:\n{logs}")

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.load(r)

    def apps(self) -> list[dict]:
        """Every application the master has run or runs (name, cores, state)."""
        s = self.state()
        return s.get("activeapps", []) + s.get("completedapps", [])

    def executor_workers(self, app_id: str) -> list[int]:
        """The worker of each executor of the application that joined it (registered with its driver),
        sorted: an executor a worker launches as the application shuts down never does, and is left out."""
        return sorted(i for i in range(self.n_workers) for d in (self.tmp / f"work{i}" / app_id).glob("*")
                      if d.is_dir() and "Successfully registered with driver" in _text(d / "stderr"))

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
