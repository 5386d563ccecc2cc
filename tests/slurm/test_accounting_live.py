"""The rendered accounting.sh applied for real: MariaDB, slurmdbd, slurmctld and one slurmd on this machine.

A tenant whose QOS holds GrpTRES=gres/gpu=8 runs one job of 6 GPUs; a second job of 4 GPUs under the
same --account/--qos the rendered sbatch names stays PENDING with reason QOSGrpGRES, Slurm's reason for
a QOS group GRES limit. Needs root and Debian's slurmdbd, mariadb-server, slurmctld, slurmd and munge;
skipped otherwise. It shares nothing with the sandbox (own directory, munge key and loopback ports).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.slurmgen import ACCOUNTING_PATH, SBATCH_PATH, render_files
from tests.conftest import unavailable
from tests.slurm.variants import variant

TOOLS = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "slurmctld", "slurmd", "munged", "sacctmgr", "sbatch")
QUOTA = 8

if os.geteuid() != 0:
    pytest.skip("needs root (the daemons run as root)", allow_module_level=True)
_missing = [t for t in TOOLS if shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") is None]
if _missing:
    unavailable(f"needs slurmdbd, mariadb-server, slurmctld, slurmd and munge (missing: {' '.join(_missing)})")


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _wait(what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _env(tmp: Path) -> Any:
    """The sandbox stack with one node, `localhost`, and a tenant quota of 8 GPUs on its own QOS."""

    def edit(d: dict[str, Any]) -> None:
        d["pools"][0]["hosts"] = "localhost"
        d["slurm"]["accounting"] = "slurmdbd"
        d["slurm"]["gres"] = {"files": f"{tmp}/dev/nvidia[0-7]"}
        d["tenants"] = [{"name": "alignment", "queue": "grpo-alignment", "gpuQuota": QUOTA}]
        d["job"].update(tenant="alignment", nodes=1)

    return variant("local-slurm", edit)


@contextlib.contextmanager
def _cluster(tmp: Path, fragment: str, gres: str) -> Iterator[dict[str, str]]:
    """MariaDB, munged, slurmdbd, slurmctld and slurmd in `tmp`, on free loopback ports; all stopped after."""
    db_port, dbd_port, ctld_port, slurmd_port = _free_ports(4)
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str, env: dict[str, str] | None = None) -> None:
        with open(tmp / log, "wb") as out:
            procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env))

    for d in ("db", "munge", "state", "spool", "dev"):
        (tmp / d).mkdir()
    for i in range(8):
        (tmp / "dev" / f"nvidia{i}").touch()
    shutil.chown(tmp / "db", "mysql", "mysql")
    key = tmp / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    shutil.chown(tmp / "munge", "munge", "munge")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    sock = tmp / "munge" / "munge.sock"
    conf = tmp / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        subprocess.run(
            [
                "mariadb-install-db",
                "--user=mysql",
                f"--datadir={tmp / 'db'}",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            capture_output=True,
        )
        db_sock = tmp / "db" / "mysqld.sock"
        start(
            ["mariadbd", "--user=mysql", f"--datadir={tmp / 'db'}", f"--socket={db_sock}", f"--port={db_port}",
             "--bind-address=127.0.0.1", "--skip-name-resolve"],
            "mariadbd.log",
        )  # fmt: skip
        sql = "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        _wait("mariadbd", lambda: subprocess.run(["mariadb", f"--socket={db_sock}", "-uroot", "-e", "SELECT 1"],
                                                 capture_output=True).returncode == 0)  # fmt: skip
        subprocess.run(["mariadb", f"--socket={db_sock}", "-uroot", "-e", sql], check=True)
        start(
            ["runuser", "-u", "munge", "--", "munged", "--foreground", f"--key-file={key}", f"--socket={sock}",
             f"--pid-file={tmp / 'munge' / 'munged.pid'}", f"--seed-file={tmp / 'munge' / 'seed'}",
             f"--log-file={tmp / 'munge' / 'munged.log'}"],
            "munged.out",
        )  # fmt: skip
        _wait("munged", sock.exists)
        dbd_conf = tmp / "slurmdbd.conf"
        dbd_conf.write_text(
            f"AuthType=auth/munge\nAuthInfo=socket={sock}\nDbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\n"
            f"SlurmUser=root\nPidFile={tmp / 'slurmdbd.pid'}\nStorageType=accounting_storage/mysql\n"
            f"StorageHost=127.0.0.1\nStoragePort={db_port}\nStorageUser=slurm\nStoragePass=slurm\n"
            "StorageLoc=slurm_acct_db\n"
        )
        dbd_conf.chmod(0o600)
        (tmp / "fragment.conf").write_text(fragment)
        (tmp / "gres.conf").write_text(gres)
        conf.write_text(
            f"ClusterName=sandbox\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={ctld_port}\n"
            f"SlurmdPort={slurmd_port}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n"
            f"AuthInfo=socket={sock}\nStateSaveLocation={tmp / 'state'}\nSlurmdSpoolDir={tmp / 'spool'}\n"
            f"SlurmctldPidFile={tmp / 'slurmctld.pid'}\nSlurmdPidFile={tmp / 'slurmd.pid'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\nSlurmdParameters=config_overrides\nMpiDefault=none\n"
            "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={dbd_port}\nAccountingStoragePass={sock}\n"
            "AccountingStorageEnforce=associations,limits,qos\nJobCompType=jobcomp/none\nReturnToService=2\n"
            f"Include {tmp / 'fragment.conf'}\n"
        )
        start(["slurmdbd", "-D"], "slurmdbd.log", env)
        sacctmgr = ["sacctmgr", "--noheader", "--parsable2"]
        _wait(
            "slurmdbd", lambda: subprocess.run([*sacctmgr, "show", "qos"], env=env, capture_output=True).returncode == 0
        )
        start(["slurmctld", "-D", "-c", "-i"], "slurmctld.log", env)
        start(["slurmd", "-D", "-N", "localhost"], "slurmd.log", env)
        _wait(
            "the node to be idle",
            lambda: (
                subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip()
                == "idle"
            ),
        )
        yield env
    finally:
        _end_jobs(env, conf, {proc.pid for proc in procs})
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _end_jobs(env: dict[str, str], conf: Path, daemons: set[int]) -> None:
    """Cancel every job and wait for them to go; then kill whatever of this cluster's jobs is left (with
    proctrack/linuxproc a step daemon outlives a stopped slurmd, and keeps its job's processes): every
    process but the daemons whose environment names this cluster's slurm.conf."""
    subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True, check=False)
    with contextlib.suppress(AssertionError):
        _wait(
            "the jobs to end",
            lambda: not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip(),
            timeout=20,
        )
    marker = f"SLURM_CONF={conf}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in daemons or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), 9)


def _directive(script: str, name: str) -> str:
    return next(line.split("=", 1)[1] for line in script.splitlines() if line.startswith(f"#SBATCH --{name}="))


def test_rendered_quota_holds_a_job_over_it_pending() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="grpo-accounting-", dir="/tmp"))
    tmp.chmod(0o755)
    try:
        env = _env(tmp)
        files = render_files(env)
        script = tmp / "accounting.sh"
        script.write_text(files[ACCOUNTING_PATH])
        account, qos = _directive(files[SBATCH_PATH], "account"), _directive(files[SBATCH_PATH], "qos")
        assert (account, qos) == ("alignment", "grpo-alignment")
        with _cluster(tmp, files["slurm/slurm.conf"], files["slurm/gres.conf"]) as slurm_env:
            applied = subprocess.run(["bash", str(script)], env=slurm_env, capture_output=True, text=True)
            assert applied.returncode == 0, applied.stdout + applied.stderr
            assert "grpo-alignment|gres/gpu=8" in applied.stdout
            assert "sandbox|alignment||grpo-alignment|grpo-alignment" in applied.stdout
            again = subprocess.run(["bash", str(script)], env=slurm_env, capture_output=True, text=True)
            assert again.returncode == 0, again.stdout + again.stderr
            subprocess.run(["sacctmgr", "-i", "add", "user", "root", f"Account={account}"], env=slurm_env,
                           check=True, capture_output=True)  # fmt: skip

            def submit(gpus: int) -> str:
                return subprocess.run(
                    ["sbatch", "--parsable", "-p", "grpo", f"--account={account}", f"--qos={qos}",
                     f"--gres=gpu:sim:{gpus}", "-N1", "-o", "/dev/null", "--wrap", "sleep 120"],
                    env=slurm_env, check=True, capture_output=True, text=True,
                ).stdout.strip()  # fmt: skip

            def state(job: str) -> str:
                return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], env=slurm_env,
                                      capture_output=True, text=True).stdout.strip()  # fmt: skip

            first = submit(6)
            _wait("the first job to run", lambda: state(first).startswith("RUNNING"))
            second = submit(4)  # 6 + 4 GPUs > the QOS's 8
            # The reason is `Resources` until the scheduler's next pass tests the QOS limits (its node is
            # busy too); without the limit it would stay `Resources`.
            with contextlib.suppress(AssertionError):
                _wait("the QOS limit", lambda: state(second) == "PENDING QOSGrpGRES", timeout=45)
            assert state(second) == "PENDING QOSGrpGRES"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
