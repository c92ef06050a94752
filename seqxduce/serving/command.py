"""The `seqxduce serve` command: load a run once (with its ensemble, as `decode` does) and serve it with uvicorn.

Imports only click at module level: the CLI starts without the `serve` extra, and `serve` says how to get it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from seqxduce.api import UserError
from seqxduce.serving.limits import Limits

EXTRA = "seqxduce serve needs the serve extra (starlette, uvicorn): pip install -e '.[serve]' in the seqxduce checkout"
DEFAULTS = Limits()
LOOPBACK = "localhost,127.0.0.1,::1"


def _server_libraries() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError(EXTRA) from None


def model_positions(model: Any) -> int | None:
    """The sequence length the model was built for (Model.positions_limit), if it declares one."""
    declared = model.positions_limit
    return int(declared) if declared is not None and declared > 0 else None


def served_limit(positions: int | None, asked: int | None) -> int:
    """The longest source served, or the longest output a request may ask for: as asked, else the length the
    model was built for (Model.positions_limit: past learned positions a sequence fails in the model), else
    1024."""
    if asked is not None:
        return asked
    return positions or 1024


def public_info(info: dict[str, Any], verbose: bool) -> dict[str, Any]:
    """/v1/info as a client sees it: without --verbose-info no library versions, and every absolute path (the
    run folder, the checkpoint, the data directory) cut to its last part, so that a client learns nothing of the
    machine's layout."""
    if verbose:
        return info
    info = {k: v for k, v in info.items() if k != "versions"}

    def cut(value: Any) -> Any:
        if isinstance(value, str) and os.path.isabs(value):
            return Path(value).name
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    info = cut(info)
    info["notes"] = [n for n in info.get("notes", []) if "/" not in n]  # a note may name a path in its text
    return info


@click.command("serve")
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--checkpoint", metavar="best|average|last|PATH",
              help="which of the run's checkpoints: best, average, last or a file (as decode; "
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
              show_default=True, help="largest request body accepted (413 beyond, and the connection closed)")
@click.option("--max-inputs", type=click.IntRange(min=1), default=DEFAULTS.max_inputs, show_default=True,
              help="most sentences in one request (413 beyond)")
@click.option("--max-source-tokens", type=click.IntRange(min=1),
              help="longest source in tokens (413 beyond) [default: the model's max_positions if declared, "
                   "else 1024]")
@click.option("--max-output-tokens", type=click.IntRange(min=1),
              help="longest output a request may ask for: min_len, max_len_b and max_len_a x source length + "
                   "max_len_b, and /v1/attention's target (422/413 beyond) [default: the model's max_positions if "
                   "declared, else 1024]")
@click.option("--max-work", type=click.IntRange(min=1), default=DEFAULTS.max_work, show_default=True,
              help="most token steps one request may ask for: the sum over its sources of beam (or samples) x "
                   "longest output (413 beyond)")
@click.option("--max-queue", type=click.IntRange(min=1), default=DEFAULTS.max_queue, show_default=True,
              help="most sources waiting, all requests together (503 with Retry-After beyond)")
@click.option("--max-request-seconds", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULTS.max_request_seconds, show_default=True,
              help="a request not answered this long after it arrived: 503 if still queued, 504 if being decoded "
                   "(its batch stops once nobody of it waits)")
@click.option("--busy-after-seconds", type=click.FloatRange(min=0), default=DEFAULTS.busy_after_seconds,
              show_default=True, help="GET /ready answers 503 while the oldest queued source has waited longer")
@click.option("--read-timeout-seconds", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULTS.read_timeout_seconds, show_default=True,
              help="time a client has to send a request's headers (the connection is closed beyond), and again "
                   "its body (408 beyond)")
@click.option("--keep-alive-seconds", type=click.IntRange(min=1), default=DEFAULTS.keep_alive_seconds,
              show_default=True, help="an idle keep-alive connection is closed after this")
@click.option("--max-connections", type=click.IntRange(min=1), default=DEFAULTS.max_connections,
              show_default=True, help="most open connections; one more is answered 503 and closed")
@click.option("--shutdown-grace-seconds", type=click.FloatRange(min=0), default=DEFAULTS.shutdown_grace_seconds,
              show_default=True, help="after SIGTERM or Ctrl-C, clients still sending a request are cut after this")
@click.option("--allowed-hosts", default=LOOPBACK, show_default=True,
              help="Host header values answered, comma-separated (a port is ignored; *.example.com matches "
                   "subdomains; * any); others get 400")
@click.option("--forwarded-allow-ips",
              help="addresses of proxies whose X-Forwarded-For/-Proto are trusted, comma-separated (uvicorn's "
                   "setting) [default: none, the headers are ignored]")
@click.option("--verbose-info", is_flag=True,
              help="GET /v1/info shows absolute paths and library versions (by default only their last part, "
                   "no versions)")
@click.option("--engine", "engine_name", type=click.Choice(["seqxduce", "ctranslate2"]), default="seqxduce",
              show_default=True, help="the decoding engine: seqxduce's own, or CTranslate2 over an export folder "
              "(seqxduce export; a run directory is exported first): its search settings only, no target prefix "
              "or /v1/attention")
@click.option("--threads", type=click.IntRange(min=1),
              help="CPU threads a batch is decoded with (torch's; CTranslate2's too with --engine ctranslate2) "
                   "[default: OMP_NUM_THREADS, else the CPUs this process may use: its CPU affinity and cgroup "
                   "quota]. With the clients on the same few "
                   "cores, 1 is often faster (bench/RESULTS.md: 2.3x on 2 cores)")
@click.option("--batch-delay-ms", type=click.FloatRange(min=0), default=0.0, hidden=True,
              help="sleep before each batch (tests: a slow batch)")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="info", show_default=True, help="uvicorn's log level")
def serve(run: Path, checkpoint: str | None, host: str, port: int, overrides: tuple[str, ...],
          ensemble: tuple[Path, ...],
          max_batch_tokens: int, max_wait_ms: float, max_request_bytes: int, max_inputs: int,
          max_source_tokens: int | None, max_output_tokens: int | None, max_work: int, max_queue: int,
          max_request_seconds: float, busy_after_seconds: float, read_timeout_seconds: float,
          keep_alive_seconds: int, max_connections: int, shutdown_grace_seconds: float, allowed_hosts: str,
          forwarded_allow_ips: str | None, verbose_info: bool, engine_name: str, threads: int | None,
          batch_delay_ms: float, log_level: str) -> None:
    """Serve a trained run over HTTP: POST /v1/decode, POST /v1/attention, GET /health, GET /ready, GET /v1/info,
    and a page to try it at /. Requests are batched together. SIGTERM or Ctrl-C stops accepting, answers what is
    queued 503, stops the running batch at its next step and exits 0 within --shutdown-grace-seconds; a second
    signal exits at once."""
    _server_libraries()
    import torch

    from seqxduce.cpus import fit_threads
    from seqxduce.decoding.decode import load_run
    from seqxduce.inspection.run_info import run_info
    from seqxduce.serving.app import create_app
    from seqxduce.serving.batching import Batcher
    from seqxduce.serving.ct2_service import export_facts
    from seqxduce.serving.service import Service

    # before loading: CTranslate2's translator takes torch's count when it is built; said once loaded (a refusal
    # to load comes alone)
    threads_line = fit_threads((threads, "--threads") if threads is not None else None)
    with contextlib.ExitStack() as stack:
        if engine_name == "ctranslate2":
            loaded, service, positions = _exported(run, overrides, ensemble, checkpoint, stack)
            served = {"engine": "ctranslate2", "export": str(loaded.directory)}
            click.echo(threads_line, err=True)
        else:
            loaded = load_run(run, overrides, ensemble, checkpoint)  # exactly as `seqxduce decode` loads it
            service, positions = Service(loaded), model_positions(loaded.model)
            served = {"checkpoint": str(loaded.checkpoint), "ensemble": [str(p) for p in loaded.members]}
            click.echo(threads_line, err=True)
            click.echo(f"serving {loaded.described()}", err=True)
        limits = Limits(max_request_bytes=max_request_bytes, max_inputs=max_inputs,
                        max_source_tokens=served_limit(positions, max_source_tokens), max_queue=max_queue,
                        max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms,
                        max_output_tokens=served_limit(positions, max_output_tokens), max_work=max_work,
                        max_request_seconds=max_request_seconds, busy_after_seconds=busy_after_seconds,
                        read_timeout_seconds=read_timeout_seconds, keep_alive_seconds=keep_alive_seconds,
                        max_connections=max_connections, shutdown_grace_seconds=shutdown_grace_seconds)
        batcher = Batcher(service.decode, max_queue=limits.max_queue, max_batch_tokens=limits.max_batch_tokens,
                          max_batch_sources=loaded.recipe.decode.core.batch_size,
                          max_wait_s=limits.max_wait_ms / 1000, delay_s=batch_delay_ms / 1000)
        if engine_name == "ctranslate2" and loaded.directory == run:  # an export folder, not a run's
            info = export_facts(loaded)
        else:
            info = run_info(run).as_dict()
        info["serve"] = served | {
            "threads": torch.get_num_threads(),
            "decode": dataclasses.asdict(loaded.recipe.decode.core)
            | (dataclasses.asdict(service.settings) if service.settings is not None else {}),
            "request_keys": ["inputs", "nbest", *service.decode_keys()],
            "limits": dataclasses.asdict(limits)}
        hosts = [h.strip() for h in allowed_hosts.split(",") if h.strip()]
        app = create_app(service, batcher, limits, public_info(info, verbose_info), hosts)
        _log_to_stderr(log_level)
        run_server(app, batcher, limits, host, port, log_level, forwarded_allow_ips)


def _exported(run: Path, overrides: tuple[str, ...], ensemble: tuple[Path, ...], checkpoint: str | None,
              stack: contextlib.ExitStack) -> tuple[Any, Any, int | None]:
    """--engine ctranslate2: the export folder (a run directory exported into a temporary folder first), its
    service, and the length the model was built for (read from the model its recipe builds, on no device)."""
    import tempfile

    import torch

    from seqxduce import components
    from seqxduce.export.ct2_decoding import load_export
    from seqxduce.serving.ct2_service import CT2Service

    for flag, given in (("--ensemble", ensemble), ("--checkpoint", checkpoint)):
        if given:
            raise UserError(f"serve --engine ctranslate2: {flag} is not supported there; export the model you want "
                            "(seqxduce export) and serve that folder, or serve with --engine seqxduce")
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="seqxduce-serve-ct2-")))
    exported = load_export(run, overrides, work)
    click.echo(f"serving {run} with CTranslate2 ({exported.translator.device}, "
               f"{exported.translator.compute_type})", err=True)
    with torch.device("meta"):  # the model's shapes, no weights
        positions = model_positions(components.build_model(exported.recipe, exported.tokenizers.vocab()))
    return exported, CT2Service(exported), positions


def _log_to_stderr(level: str) -> None:
    """The server's own lines (a client that went away, a request cut at shutdown) beside uvicorn's."""
    logger = logging.getLogger("seqxduce.serve")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())


def run_server(app: Any, batcher: Any, limits: Limits, host: str, port: int, log_level: str,
               forwarded_allow_ips: str | None = None) -> None:
    """Run uvicorn until SIGTERM or Ctrl-C; it then stops accepting, answers queued requests 503, stops the
    running batch at its next step, lets clients finish within the grace, and this returns (exit 0: being asked
    to stop is how a server ends, not a failure). A second signal exits at once."""
    import uvicorn

    from seqxduce.serving.connections import guarded_protocol

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # uvicorn would re-raise the signal once shut down, so that the process dies of it; not here
            if self.should_exit:
                os.write(2, b"seqxduce serve: a second signal: exiting now\n")
                os._exit(0)  # nothing is left to save: the first signal already abandoned every request
            self.should_exit = True
            batcher.request_abort()  # a flag only (this is a signal handler): the batch stops at its next step

        async def shutdown(self, sockets: Any = None) -> None:
            batcher.abort()  # queued requests are answered 503 now, not after the connections drain
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        http=guarded_protocol(limits.max_connections, limits.read_timeout_seconds),
        timeout_keep_alive=limits.keep_alive_seconds,
        timeout_graceful_shutdown=limits.shutdown_grace_seconds,  # type: ignore[arg-type]  (a float is fine)
        # X-Forwarded-For/-Proto rewrite the client's address and scheme: trusted only from the proxies named
        proxy_headers=forwarded_allow_ips is not None, forwarded_allow_ips=forwarded_allow_ips,
        server_header=False)  # no "server: uvicorn" (a version hunt starts there)
    server = Server(config)
    server.run()
    if not server.started:
        raise UserError(f"--host {host} --port {port}: could not listen there (in use?); pick another --port")
