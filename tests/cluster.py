"""A Spark standalone cluster for the tests: a master and two one-core workers, started from pyspark's own
`spark-class` on 127.0.0.1 and stopped by pid."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from sparkjvm import spark_jvm_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """`url` is the master's spark:// URL; `apps()` what the master ran; `executor_dirs()` the workers' app dirs."""

    def __init__(self, tmp: Path, workers: int = 2):
        import pyspark

        self.tmp = tmp
        self.home = Path(pyspark.__file__).parent
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = dict(spark_jvm_env(tmp), SPARK_DAEMON_MEMORY="256m", SPARK_WORKER_DIR=str(tmp / "work"))
        self.procs: list[subprocess.Popen] = []
        self.n_workers = workers

    def _daemon(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                                           stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                           start_new_session=True))
        log.close()

    def start(self, timeout: float = 180) -> "StandaloneCluster":
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui))
        for i in range(self.n_workers):
            self._daemon(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1500m", "--webui-port", str(free_port()),
                         "--work-dir", str(self.tmp / f"work{i}"), self.url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
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

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The executors an application ran on the workers (one directory each)."""
        return [d for i in range(self.n_workers) for d in (self.tmp / f"work{i}" / app_id).glob("*") if d.is_dir()]

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
