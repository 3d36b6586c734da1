"""`enablebot run MODEL_ID`: one architecture through eager and torch.compile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..fileio import write_text as write_redacted

DEVICES = ("cpu", "cuda")


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        model_id: str = typer.Argument(..., help="model_type (llama), class (LlamaForCausalLM), Hub repo (org/name) or config.json path"),
        device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)"),
        mode: str = typer.Option("eval", help="eval, or train (forward + backward on a loss)"),
        dtype: str = typer.Option("float32", help="float32 or bfloat16"),
        backend: str = typer.Option("inductor", help="torch.compile backend (inductor, aot_eager, eager, ...)"),
        dynamic: bool = typer.Option(False, "--dynamic", help="compile with dynamic shapes"),
        size: str = typer.Option("tiny", help="tiny (CPU checks) or small (hidden 512, 4 layers: speed runs)"),
        batch_size: int = typer.Option(2, min=2, help="batch (>= 2 so shapes do not specialise on 0/1)"),
        seq_len: int = typer.Option(32, min=2),
        repeats: int = typer.Option(20, min=1, help="timed repeats (median)"),
        warmup: int = typer.Option(5, min=0),
        task: Optional[str] = typer.Option(None, help="base, head, or a class name (default: the registry's head)"),
        timeout: float = typer.Option(900.0, help="wall-clock limit for the model process, seconds"),
        trace: Optional[Path] = typer.Option(None, "--trace", help="keep torch's structured trace (TORCH_TRACE) here for tlparse"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="write the full result JSON here"),
        registry: Optional[Path] = typer.Option(None, help="model_registry.yaml (default: the repo's)"),
        allow_remote_code: bool = typer.Option(False, "--allow-remote-code", help="allow this repo's auto_map code (never by default)"),
        no_isolation: bool = typer.Option(False, "--no-isolation", help="run in this process (debugging)"),
        pass_: str = typer.Option("inductor", "--pass", help="build (create + eager), dynamo (graph breaks, "
                                  "eager backend), inductor (also numerics and speedup with --backend)"),
        scenario: str = typer.Option("call", help="call (a user's padded-batch forward), decode (prefill + a "
                                     "decode step with the cache), dynamic (two shapes, recompiles)"),
    ) -> None:
        """Build MODEL_ID as a tiny random-init model; run eager and torch.compile; log every
        graph break, numerics against fp64, and speedup. Exit 0 when the run completed (any verdict)."""
        from ..isolation import run_in_child
        from ..registry import Registry, RegistryError
        from ..render import rich_summary
        from ..resolve import UsageError, resolve
        from ..results import RunSpec

        err = Console(stderr=True)
        if mode not in ("eval", "train"):
            raise typer.BadParameter("mode must be eval or train", param_hint="--mode")
        if dtype not in ("float32", "bfloat16"):
            raise typer.BadParameter("dtype must be float32 or bfloat16", param_hint="--dtype")
        if size not in ("tiny", "small"):
            raise typer.BadParameter("size must be tiny or small", param_hint="--size")
        dev = device or default_device()
        if dev not in DEVICES:
            raise typer.BadParameter(f"device must be one of {DEVICES}", param_hint="--device")
        if dev == "cuda" and default_device() != "cuda":
            err.print("[red]--device cuda: no CUDA device is visible here[/red] (use --device cpu)")
            raise typer.Exit(2)
        try:
            reg = Registry.load(registry)
            res = resolve(model_id, reg, allow_remote_code=allow_remote_code)
        except (UsageError, RegistryError) as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        except Exception as e:  # noqa: BLE001 - Hub errors: clear message, not a traceback
            err.print(f"[red]error:[/red] {type(e).__name__}: {e}")
            raise typer.Exit(2 if "Hub" in type(e).__name__ else 1)

        spec = RunSpec(model_id=model_id, device=dev, mode=mode, dtype=dtype, backend=backend, dynamic=dynamic,
                       size=size, batch_size=batch_size, seq_len=seq_len, repeats=repeats, warmup=warmup,
                       task=task, timeout_s=timeout, trace_dir=str(trace) if trace else None,
                       registry=str(reg.path), allow_remote_code=allow_remote_code, scenario=scenario,
                       pass_name=pass_, resolved=res.to_dict())  # the child does not resolve (or fetch) the id again
        with err.status(f"[bold]{model_id}[/bold]: starting") as status:
            def progress(msg: str) -> None:
                status.update(f"[bold]{model_id}[/bold]: {msg}")

            if no_isolation:
                from ..runner import run_spec

                result = run_spec(spec, progress=progress)
            else:
                result = run_in_child(spec, progress=progress)
        Console().print(rich_summary(result))
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            write_redacted(json_path, json.dumps(result.to_dict(), indent=1))
            err.print(f"result written to {json_path}")
