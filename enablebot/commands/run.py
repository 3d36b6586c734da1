"""`enablebot run MODEL_ID`: one architecture through eager and torch.compile."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from .choices import TASK_HELP, Device, Dtype, Mode, Pass, Scenario, Size, parse_task, require_device


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        model_id: str = typer.Argument(..., help="model_type (llama), class (LlamaForCausalLM), Hub repo (org/name) or config.json path"),
        device: Optional[Device] = typer.Option(None, help="default: cuda when present, else cpu"),
        mode: Mode = typer.Option(Mode.eval, help="eval, or train (forward + backward on a loss)"),
        dtype: Dtype = typer.Option(Dtype.float32),
        backend: str = typer.Option("inductor", help="torch.compile backend (inductor, aot_eager, eager, ...)"),
        dynamic: bool = typer.Option(False, "--dynamic", help="compile with dynamic shapes"),
        size: Size = typer.Option(Size.tiny, help="tiny (CPU checks) or small (hidden 512, 4 layers: speed runs)"),
        batch_size: int = typer.Option(2, min=2, help="batch (>= 2 so shapes do not specialise on 0/1)"),
        seq_len: int = typer.Option(32, min=2),
        repeats: int = typer.Option(20, min=1, help="timed repeats (median)"),
        warmup: int = typer.Option(5, min=0),
        task: Optional[str] = typer.Option(None, callback=parse_task, help=TASK_HELP + " (default: main)"),
        timeout: float = typer.Option(900.0, help="wall-clock limit for the model process, seconds"),
        trace: Optional[Path] = typer.Option(None, "--trace", help="keep torch's structured trace (TORCH_TRACE) here for tlparse"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="write the full result JSON here (- for stdout; "
                                                 "the human summary then goes to stderr)"),
        registry: Optional[Path] = typer.Option(None, help="model_registry.yaml (default: the repo's)"),
        allow_remote_code: bool = typer.Option(False, "--allow-remote-code", help="allow this repo's auto_map code (never by default)"),
        no_isolation: bool = typer.Option(False, "--no-isolation", help="run in this process (debugging)"),
        pass_: Pass = typer.Option(Pass.inductor, "--pass", help="build (create + eager), dynamo (graph breaks, "
                                   "eager backend), inductor (also numerics and speedup with --backend)"),
        scenario: Scenario = typer.Option(Scenario.call, help="call (a user's padded-batch forward), decode (prefill + a "
                                     "decode step with the cache), dynamic (two shapes, recompiles)"),
    ) -> None:
        """Build MODEL_ID as a tiny random-init model; run eager and torch.compile; log every
        graph break, numerics against fp64, and speedup. Exit 0 when the run completed (any verdict)."""
        from ..execute.isolation import run_in_child
        from ..model.registry import Registry, RegistryError
        from ..measure.render import out_console, rich_summary
        from ..results import RunSpec

        err = Console(stderr=True, soft_wrap=True)
        dev = require_device(device)
        try:
            reg = Registry.load(registry)
        except RegistryError as e:
            err.print(f"[red]error:[/red] {escape(str(e))}")  # the message may hold [brackets]: not markup
            raise typer.Exit(2)
        # The child resolves the id (its first stage): this process never imports torch or
        # transformers, which would cost a second import of both (harness overhead).
        spec = RunSpec(model_id=model_id, device=dev, mode=mode.value, dtype=dtype.value, backend=backend,
                       dynamic=dynamic, size=size.value, batch_size=batch_size, seq_len=seq_len, repeats=repeats, warmup=warmup,
                       task=task, timeout_s=timeout, trace_dir=str(trace) if trace else None,
                       registry=str(reg.path), allow_remote_code=allow_remote_code, scenario=scenario.value,
                       pass_name=pass_.value)
        from ..progress import stages

        with stages(err, model_id) as progress:
            if no_isolation:
                from ..measure.runner import run_spec

                result = run_spec(spec, progress=progress)
            else:
                result = run_in_child(spec, progress=progress)
        if result.error and result.error.stage == "resolve":
            # Bad input (unknown id, malformed config, remote code refused, Hub errors): no run happened.
            err.print(f"[red]error:[/red] {result.error.message}")
            raise typer.Exit(2)
        from ..outputs import to_stdout, write_json

        out_console(stderr=to_stdout(json_path)).print(rich_summary(result))
        if json_path:
            where = write_json(json_path, result.to_dict())
            err.print(f"result written to {where}")
