"""The `seqxduce serve` command: load a run once (with its ensemble, as `decode` does) and serve it with uvicorn.

Imports only click at module level: the CLI starts without the `serve` extra, and `serve` says how to get it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from seqxduce.api import UserError
from seqxduce.export.command import engine_option
from seqxduce.serving.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.jobs import RunSpec

EXTRA = "seqxduce serve needs the serve extra (starlette, uvicorn): pip install -e '.[serve]' in the seqxduce checkout"
LOOPBACK = "localhost,127.0.0.1,::1"
PROBE_SOURCE_TOKENS = 32  # the pace probe's source length: a sentence's


def limit_options(command: Callable) -> Callable:
    """One option per field of Limits (--max-batch-tokens for max_batch_tokens), with its declared lower bound,
    default and help: the settings class is where each limit is declared, once."""
    for f in reversed(dataclasses.fields(Limits)):
        meta, integer = f.metadata, str(f.type).startswith("int")
        low, high = meta["min"], meta["max"]
        kind = (click.IntRange(min=int(low), max=None if high is None else int(high)) if integer
                else click.FloatRange(min=low, max=high, min_open=meta["min_exclusive"],
                                      max_open=meta["max_exclusive"]))
        command = click.option("--" + f.name.replace("_", "-"), f.name, type=kind, default=f.default,
                               show_default=f.default is not None, help=meta["help"])(command)
    return command


def _server_libraries() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError(EXTRA) from None


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
@limit_options
@click.option("--allowed-hosts", default=LOOPBACK, show_default=True,
              help="Host header values answered, comma-separated (a port is ignored; *.example.com matches "
                   "subdomains; * any); others get 400")
@click.option("--forwarded-allow-ips",
              help="addresses of proxies whose X-Forwarded-For/-Proto are trusted, comma-separated (uvicorn's "
                   "setting) [default: none, the headers are ignored]")
@click.option("--verbose-info", is_flag=True,
              help="GET /v1/info shows absolute paths and library versions (by default only their last part, "
                   "no versions)")
@engine_option(help="the decoding engine (`seqxduce plugins --kind engine` lists them): seqxduce's own, "
                   "CTranslate2 over an export folder (seqxduce export; a run directory is exported first): its search "
                   "settings and target prefixes (CTranslate2's target_prefix), no /v1/attention; or a plugin's, "
                   "served through the service it declares")
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
          ensemble: tuple[Path, ...], allowed_hosts: str, forwarded_allow_ips: str | None, verbose_info: bool,
          engine_name: str, threads: int | None, batch_delay_ms: float, log_level: str, **limits: Any) -> None:
    """Serve a trained run over HTTP: POST /v1/decode, POST /v1/attention, GET /health, GET /ready, GET /v1/info,
    and a page to try it at /. Requests are batched together. SIGTERM or Ctrl-C stops accepting, answers what is
    queued 503, stops the running batch at its next step and exits 0 within --shutdown-grace-seconds; a second
    signal exits at once."""
    from seqxduce.decoding.jobs import RunSpec

    spec = RunSpec(str(run), tuple(overrides), tuple(str(e) for e in ensemble), checkpoint)
    serve_run(spec, engine_name, Limits(**limits), host=host, port=port, allowed_hosts=allowed_hosts,
              forwarded_allow_ips=forwarded_allow_ips, verbose_info=verbose_info, threads=threads,
              batch_delay_ms=batch_delay_ms, log_level=log_level)


def serve_run(spec: RunSpec, engine: str, limits: Limits, *, host: str = "127.0.0.1", port: int = 8000,
              allowed_hosts: str = LOOPBACK, forwarded_allow_ips: str | None = None, verbose_info: bool = False,
              threads: int | None = None, batch_delay_ms: float = 0.0, log_level: str = "info") -> None:
    """Load what `spec` names once with the engine named (decoding/engines.py: refused before any load when the
    engine lacks a feature asked for) and serve it until SIGTERM or Ctrl-C (`seqxduce serve`, seqxduce.serve)."""
    _server_libraries()
    import torch

    from seqxduce.cpus import fit_threads
    from seqxduce.export.engine_choice import engine_named
    from seqxduce.serving.app import create_app
    from seqxduce.serving.batching import Batcher

    chosen = engine_named(engine)
    chosen.check(spec, "serve")
    # before loading: CTranslate2's translator takes torch's count when it is built; said once loaded (a refusal
    # to load comes alone)
    threads_line = fit_threads((threads, "--threads") if threads is not None else None)
    with chosen.open(spec) as loaded:  # exactly as `seqxduce decode` loads it
        service = _service_for(chosen, loaded)
        click.echo(threads_line, err=True)
        click.echo(f"serving {service.described()}", err=True)
        limits = limits.served(service.positions())
        batcher = Batcher(service.decode, max_queue=limits.max_queue, max_batch_tokens=limits.max_batch_tokens,
                          max_batch_sources=loaded.recipe.decode.core.batch_size,
                          max_wait_s=limits.max_wait_ms / 1000, delay_s=batch_delay_ms / 1000)
        pace = _measured_pace(service, limits, batcher.max_batch_sources)
        info = service.facts(Path(spec.run))
        info["serve"] = service.served() | {
            "threads": torch.get_num_threads(),
            "decode": dataclasses.asdict(loaded.recipe.decode.core)
            | (dataclasses.asdict(service.settings) if service.settings is not None else {}),
            "request_keys": ["inputs", "nbest", *service.decode_keys()],
            "limits": dataclasses.asdict(limits), "pace": None if pace is None else dataclasses.asdict(pace)}
        hosts = [h.strip() for h in allowed_hosts.split(",") if h.strip()]
        app = create_app(service, batcher, limits, public_info(info, verbose_info), hosts, pace)
        _log_to_stderr(log_level)
        run_server(app, batcher, limits, host, port, log_level, forwarded_allow_ips)
        if batcher.abort_requested_at is not None:  # the whole shutdown, within one grace
            click.echo(f"seqxduce serve: stopped {time.monotonic() - batcher.abort_requested_at:.1f} s after the "
                       f"signal (--shutdown-grace-seconds {limits.shutdown_grace_seconds:g})", err=True)
        if batcher.thread.is_alive():
            # a call that cannot be cut (CTranslate2's) outlived the grace: finalizing the interpreter would free
            # the model under it (SIGSEGV); nothing is left to save, every request was answered 503
            click.echo("seqxduce serve: a batch was still decoding after the grace; exiting without waiting for it",
                       err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def _measured_pace(service: Any, limits: Limits, max_batch_sources: int) -> Any:
    """The engine's pace on this machine (serving.pace), measured by decoding probe batches before the server
    listens, and said in one line; None, said too, when the decoder cannot force an output's length."""
    from seqxduce.serving.limits import RequestError
    from seqxduce.serving.pace import SHORT, WIDE_SOURCES, measure

    source = service.probe_source(PROBE_SOURCE_TOKENS)
    tokens = service.source_tokens(source)
    try:
        rows = service.lengths(service.forced(SHORT)).rows
    except RequestError as err:
        click.echo(f"pace: not measured ({err.message}); a request is bounded by --max-work alone", err=True)
        return None
    wide = max(1, min(WIDE_SOURCES, max_batch_sources, limits.max_batch_tokens // tokens))
    start = time.perf_counter()
    try:
        pace = measure(service.probe, source, rows, wide)
    except Exception as err:  # noqa: BLE001 - a search that cannot force a length (a task's constraints) still serves
        click.echo(f"pace: not measured (the probe failed: {err}); a request is bounded by --max-work alone",
                   err=True)
        return None
    allowed = limits.admit_share * limits.max_request_seconds
    click.echo(f"pace: {pace.described()} (probed in {time.perf_counter() - start:.1f} s); a request is admitted "
               f"when its decode is estimated within {allowed:g} s (--admit-share x --max-request-seconds)", err=True)
    return pace


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
    to stop is how a server ends, not a failure). The grace runs once, from the signal: the connections and then
    the batcher's worker each get what is left of it. A second signal exits at once."""
    import uvicorn

    from seqxduce.serving.connections import guarded_protocol, trusted

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
            # the connections get what is left of the grace, which runs once from the signal; the batcher then
            # gets the rest (app.py's lifespan): one grace for the whole shutdown
            self.config.timeout_graceful_shutdown = batcher.grace_left(limits.shutdown_grace_seconds)
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        http=guarded_protocol(limits.max_connections, limits.read_timeout_seconds, limits.write_timeout_seconds,
                              limits.max_unread_bytes, limits.max_connections_per_client,
                              trusted(forwarded_allow_ips)),
        timeout_keep_alive=limits.keep_alive_seconds,
        timeout_graceful_shutdown=limits.shutdown_grace_seconds,  # type: ignore[arg-type]  (a float is fine)
        # X-Forwarded-For/-Proto rewrite the client's address and scheme: trusted only from the proxies named
        proxy_headers=forwarded_allow_ips is not None, forwarded_allow_ips=forwarded_allow_ips,
        server_header=False)  # no "server: uvicorn" (a version hunt starts there)
    server = Server(config)
    server.run()
    if not server.started:
        raise UserError(f"--host {host} --port {port}: could not listen there (in use?); pick another --port")


def _service_for(engine: Any, loaded: object) -> Any:
    """The server's view of what an engine loaded: the service the engine declares (Engine.service, "module:callable"
    as an entry point names one; named, not imported, by the engine, since serving sits above the engines and they
    never import it)."""
    from importlib.metadata import EntryPoint

    try:
        factory = EntryPoint(engine.name, engine.service, "seqxduce.services").load()
    except (ImportError, AttributeError, ValueError) as err:
        raise UserError(f"serve --engine {engine.name}: its service {engine.service!r} cannot be loaded "
                        f"({type(err).__name__}: {err}); fix or uninstall the plugin that registers it") from None
    return factory(engine, loaded)
