"""The `seqxduce serve` command: load a run once (with its ensemble, as `decode` does) and serve it with uvicorn.

Imports only click at module level: the CLI starts without the `serve` extra, and `serve` says how to get it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from seqxduce.api import UserError
from seqxduce.serving.limits import Limits

EXTRA = "seqxduce serve needs the serve extra (starlette, uvicorn): pip install -e '.[serve]' in the seqxduce checkout"
DEFAULTS = Limits()


def _server_libraries() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError(EXTRA) from None


def source_limit(run: Any, asked: int | None) -> int:
    """The longest source served: as asked, else the model's learned positions if its settings declare
    max_positions (a longer source fails in the model), else 1024."""
    if asked is not None:
        return asked
    declared = getattr(run.recipe.model.settings, "max_positions", None)
    return int(declared) if isinstance(declared, int) and declared > 0 else 1024


@click.command("serve")
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--checkpoint", help="which of the run's checkpoints: best, average, last or a file (as decode; "
              "default the average if any, else the newest)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to listen on (keep 127.0.0.1 behind a reverse proxy; see the README's Serve section)")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="port to listen on")
@click.option("--set", "overrides", multiple=True,
              help="override a recipe value: section.key=value (repeatable), e.g. --set decode.beam=8 (as decode)")
@click.option("--ensemble", multiple=True, type=click.Path(path_type=Path),
              help="also a checkpoint or run directory whose predictions are averaged in (as decode --ensemble)")
@click.option("--max-batch-tokens", type=click.IntRange(min=1), default=DEFAULTS.max_batch_tokens,
              show_default=True, help="padded source tokens decoded together in one batch")
@click.option("--max-wait-ms", type=click.FloatRange(min=0), default=DEFAULTS.max_wait_ms, show_default=True,
              help="how long a batch waits for more sources after its first arrives")
@click.option("--max-request-bytes", type=click.IntRange(min=1), default=DEFAULTS.max_request_bytes,
              show_default=True, help="largest request body accepted (413 beyond)")
@click.option("--max-inputs", type=click.IntRange(min=1), default=DEFAULTS.max_inputs, show_default=True,
              help="most sentences in one request (413 beyond)")
@click.option("--max-source-tokens", type=click.IntRange(min=1),
              help="longest source in tokens (413 beyond) [default: the model's max_positions if declared, "
                   "else 1024]")
@click.option("--max-queue", type=click.IntRange(min=1), default=DEFAULTS.max_queue, show_default=True,
              help="most sources waiting, all requests together (503 with Retry-After beyond)")
@click.option("--batch-delay-ms", type=click.FloatRange(min=0), default=0.0, hidden=True,
              help="sleep before each batch (tests: a slow batch)")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="info", show_default=True, help="uvicorn's log level")
def serve(run: Path, checkpoint: str | None, host: str, port: int, overrides: tuple[str, ...],
          ensemble: tuple[Path, ...],
          max_batch_tokens: int, max_wait_ms: float, max_request_bytes: int, max_inputs: int,
          max_source_tokens: int | None, max_queue: int, batch_delay_ms: float, log_level: str) -> None:
    """Serve a trained run over HTTP: POST /v1/decode, POST /v1/attention, GET /health, GET /v1/info, and a page
    to try it at /. Requests are batched together; SIGTERM or Ctrl-C finishes the requests in flight, exit 0."""
    _server_libraries()
    from seqxduce.decoding.decode import load_run
    from seqxduce.inspection.run_info import run_info
    from seqxduce.serving.app import create_app
    from seqxduce.serving.batching import Batcher
    from seqxduce.serving.service import Service

    loaded = load_run(run, overrides, ensemble, checkpoint)  # exactly as `seqxduce decode` loads it
    click.echo(f"serving {loaded.described()}", err=True)
    limits = Limits(max_request_bytes=max_request_bytes, max_inputs=max_inputs,
                    max_source_tokens=source_limit(loaded, max_source_tokens), max_queue=max_queue,
                    max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms)
    service = Service(loaded)
    batcher = Batcher(service.decode, max_queue=limits.max_queue, max_batch_tokens=limits.max_batch_tokens,
                      max_batch_sources=loaded.recipe.decode.core.batch_size, max_wait_s=limits.max_wait_ms / 1000,
                      delay_s=batch_delay_ms / 1000)
    info = run_info(run).as_dict()
    info["serve"] = {"checkpoint": str(loaded.checkpoint), "ensemble": [str(p) for p in loaded.members],
                     "decode": dataclasses.asdict(loaded.recipe.decode.core)
                     | (dataclasses.asdict(service.settings) if service.settings is not None else {}),
                     "request_keys": ["inputs", "nbest", *service.decode_keys()],
                     "limits": dataclasses.asdict(limits)}
    run_server(create_app(service, batcher, limits, info), host, port, log_level)


def run_server(app: Any, host: str, port: int, log_level: str) -> None:
    """Run uvicorn until SIGTERM or Ctrl-C; it then stops accepting, answers the requests in flight, and this
    returns (exit 0: being asked to stop is how a server ends, not a failure). A second Ctrl-C forces."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # uvicorn would re-raise the signal once shut down, so that the process dies of it; not here
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=None)
    server = Server(config)
    server.run()
    if not server.started:
        raise UserError(f"--host {host} --port {port}: could not listen there (in use?); pick another --port")
