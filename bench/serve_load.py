"""`seqxduce serve` under load: N concurrent clients for T seconds, every answer checked against decode's output.

    python bench/serve_load.py runs/quickstart                      # 1 client, then 32, in turns, 20 s each
    python bench/serve_load.py runs/quickstart --clients 1,8,32 --seconds 30 --rounds 2
    python bench/serve_load.py runs/quickstart --clients 32 --requests 10000   # RSS growth over 10,000 requests
    python bench/serve_load.py runs/multi30k --split valid --server-arg=--max-batch-tokens=8192
    python bench/serve_load.py runs/quickstart --engine both       # seqxduce's engine, then CTranslate2's

It starts `seqxduce serve RUN` in a subprocess on a free local port, takes the sources of one of the run's task
splits (or --input FILE), decodes them once in this process as `seqxduce decode` does (the reference), then
drives each client count in turn: every client sends one source per request (a random one, fixed seed) on its
own keep-alive connection, waits for the answer, and sends the next. It prints per client count: sources/s,
p50/p95/p99 latency, errors (non-200 answers or failed connections), mismatches (an answer whose text is not
decode's for its source: a lost or misrouted output), and the server's RSS before and after. The figure to read
on a shared machine is the ratio of throughputs measured in one run (--rounds alternates the client counts, so
that a change of load hits them alike). With --engine both, the same clients drive `serve --engine seqxduce`, then
`serve --engine ctranslate2` (the run exported by the server), each checked against its own engine's decode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid: int) -> float:
    """The process's resident memory now (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reference_sources(run: Path, split: str, input_file: Path | None, limit: int) -> list[str]:
    if input_file is not None:
        return [s for s in input_file.read_text(encoding="utf-8").splitlines() if s.strip()][:limit]
    from seqxduce import engine
    from seqxduce.components import build_task, data_dir

    recipe = engine.load_run_recipe(run)
    examples = build_task(recipe).examples(split, data_dir(recipe))
    return [ex.source for ex in examples][:limit]


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    mismatches: int = 0
    first_error: str = ""


def client(port: int, sources: list[str], expected: dict[str, str], stop: threading.Event, budget: list[int],
           lock: threading.Lock, seed: int, tally: Tally) -> None:
    """Send one random source per request until stop (or the shared request budget runs out)."""
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        with lock:
            if budget[0] == 0:
                return
            budget[0] -= 1
        source = rng.choice(sources)
        start = time.perf_counter()
        try:
            connection.request("POST", "/v1/decode", json.dumps({"inputs": [source]}),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            body = answer.read()
            took = time.perf_counter() - start
            if answer.status != 200:
                with lock:
                    tally.errors += 1
                    tally.first_error = tally.first_error or f"{answer.status} {body[:200]!r}"
                continue
            text = json.loads(body)["outputs"][0][0]["text"]
            with lock:
                tally.latencies.append(took)
                if text != expected[source]:
                    tally.mismatches += 1
        except (OSError, http.client.HTTPException, ValueError, KeyError) as err:
            with lock:
                tally.errors += 1
                tally.first_error = tally.first_error or repr(err)
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.close()


def drive(port: int, pid: int, clients: int, seconds: float, requests: int | None, sources: list[str],
          expected: dict[str, str], seed: int) -> dict:
    """Run `clients` clients for `seconds` (or until `requests` answers); the figures of that stretch."""
    stop, lock, tally = threading.Event(), threading.Lock(), Tally()
    budget = [requests if requests is not None else -1]
    rss_before = rss_mib(pid)
    counters_before = health(port)
    threads = [threading.Thread(target=client, args=(port, sources, expected, stop, budget, lock, seed * 1000 + k,
                                                     tally)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    if requests is None:
        time.sleep(seconds)
        stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    lat = sorted(tally.latencies)
    counters = health(port)
    batches = counters["batches"] - counters_before["batches"]
    decoded = counters["decoded_sources"] - counters_before["decoded_sources"]

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {"clients": clients, "answers": len(lat), "seconds": elapsed, "sources_per_s": len(lat) / elapsed,
            "p50_ms": pct(0.50), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
            "mean_ms": statistics.fmean(lat) * 1000 if lat else float("nan"), "errors": tally.errors,
            "mismatches": tally.mismatches, "mean_batch": decoded / batches if batches else float("nan"),
            "first_error": tally.first_error, "rss_before_mib": rss_before,
            "rss_after_mib": rss_mib(pid)}


def health(port: int) -> dict:
    """The server's /health counters (batches and sources decoded so far)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60) as answer:
        return json.loads(answer.read())


def start_server(run: Path, port: int, extra: list[str]) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "seqxduce", "serve", str(run), "--port", str(port),
                                "--log-level", "warning", *extra])
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            sys.exit(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return process
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            sys.exit("the server did not answer /health within 300 s")
        time.sleep(0.5)


def set_overrides(server_args: list[str]) -> list[str]:
    """The `--set s.k=v` values among the arguments passed on to `seqxduce serve`."""
    found = []
    for i, arg in enumerate(server_args):
        if arg == "--set" and i + 1 < len(server_args):
            found.append(server_args[i + 1])
        elif arg.startswith("--set="):
            found.append(arg.removeprefix("--set="))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--clients", default="1,32", help="client counts, comma-separated, driven in turns")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each client count runs")
    parser.add_argument("--requests", type=int, help="instead of --seconds: stop after this many requests")
    parser.add_argument("--rounds", type=int, default=1, help="times the client counts are driven, in turns")
    parser.add_argument("--split", default="test", help="the task split whose sources are sent")
    parser.add_argument("--input", type=Path, help="sources, one per line, instead of a split")
    parser.add_argument("--sources", type=int, default=500, help="at most this many distinct sources")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--server-arg", action="append", default=[], help="passed on to seqxduce serve")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--engine", choices=("seqxduce", "ctranslate2", "both"), default="seqxduce",
                        help="the server's decoding engine (both: one after the other, with their ratio)")
    args = parser.parse_args()

    sources = reference_sources(args.run, args.split, args.input, args.sources)
    engines = ["seqxduce", "ctranslate2"] if args.engine == "both" else [args.engine]
    rows = []
    for name in engines:
        rows += drive_engine(args, name, sources)
    for name in engines:
        print_ratios(name, [r for r in rows if r["engine"] == name])
    if len(engines) == 2:
        for clients in sorted({r["clients"] for r in rows}):
            means = [statistics.fmean(r["sources_per_s"] for r in rows if r["clients"] == clients
                                      and r["engine"] == name) for name in engines]
            print(f"{clients} clients: ctranslate2 / seqxduce throughput {means[1] / means[0]:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))


def drive_engine(args: argparse.Namespace, name: str, sources: list[str]) -> list[dict]:
    """Start `seqxduce serve --engine NAME` and drive its client counts; the rows, each checked against that
    engine's own decode of the sources."""
    from seqxduce import engine

    print(f"{len(sources)} sources; decoding them once as `seqxduce decode --engine {name}` does (the reference)",
          flush=True)
    overrides = set_overrides(args.server_arg)  # the reference decodes with the server's --set values
    outputs = engine.decode(args.run, sources, overrides=overrides, engine=name)
    expected = dict(zip(sources, engine.format_outputs(outputs)))
    port = free_port()
    server = start_server(args.run, port, [*args.server_arg, "--engine", name])
    rows = []
    try:
        drive(port, server.pid, 4, 3.0, None, sources, expected, args.seed)  # warm-up: first batches, allocator
        for round_ in range(args.rounds):
            for clients in [int(c) for c in args.clients.split(",")]:
                row = drive(port, server.pid, clients, args.seconds, args.requests, sources, expected,
                            args.seed + round_)
                row["round"], row["engine"] = round_ + 1, name
                rows.append(row)
                print(f"{name} round {row['round']} clients {clients:>3}: {row['sources_per_s']:8.1f} sources/s  "
                      f"p50 {row['p50_ms']:7.1f} ms  p95 {row['p95_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms  "
                      f"mean batch {row['mean_batch']:.1f}  answers {row['answers']}  "
                      f"errors {row['errors']}  mismatches {row['mismatches']}  "
                      f"RSS {row['rss_before_mib']:.1f} -> {row['rss_after_mib']:.1f} MiB"
                      + (f"  first error: {row['first_error']}" if row["first_error"] else ""), flush=True)
    finally:
        server.terminate()
        code = server.wait(timeout=120)
    print(f"{name}: server exit status after SIGTERM: {code}")
    for row in rows:
        row["exit_status"] = code
    return rows


def print_ratios(name: str, rows: list[dict]) -> None:
    counts = sorted({r["clients"] for r in rows})
    if len(counts) > 1:
        base = statistics.fmean(r["sources_per_s"] for r in rows if r["clients"] == counts[0])
        for c in counts[1:]:
            mean = statistics.fmean(r["sources_per_s"] for r in rows if r["clients"] == c)
            print(f"{name}: throughput {c} clients / {counts[0]}: {mean / base:.2f}x")


if __name__ == "__main__":
    main()
