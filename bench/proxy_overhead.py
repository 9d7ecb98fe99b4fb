"""What the model proxy adds to a model call's latency.

The provider double runs in its own process (as a Provider's server would),
the model proxy in this one with a grant for an OpenAI-compatible Model
Configuration answered by the double. One client (httpx's sync Client: one
kept-alive connection per address, so both paths are measured alike) makes N
sequential Chat Completions calls after a warm-up, alternating between the
proxy and the double itself, whole and streamed (a streamed call is timed
until its last byte). The direct call sends the request the proxy would send
(`wire.pin`: the model id, the settings and, streamed, the usage chunk), so
the double does the same work on both paths.

Printed: median and p90 per path and mode, and the figure, the larger of the
two median differences (proxy - direct). Goal: at most 2 ms. `--smoke` is a
small run for the test suite: 20 timed calls per path and mode after 5.

    .venv/bin/python bench/proxy_overhead.py [--n 500] [--warmup 50] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from amber_pipeline.cli.client import tls
from amber_pipeline.models.configurations import ModelConfiguration, Prices, Settings
from amber_pipeline.models.providers import Wire
from amber_pipeline.models.proxy import Grant, ModelProxy
from amber_pipeline.models.wire import pin

INSTRUCTION = "Task 00001: what is 1234 + 5678? Answer with the number."
ANSWER = "The sum of 1234 and 5678 is 6912."


def start_double(root: Path) -> tuple[subprocess.Popen[str], str]:
    task = root / "tasks" / "sum"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text(INSTRUCTION + "\n")
    replay = root / "bench-replay.json"
    replay.write_text(json.dumps({"model": "bench-model", "tasks": {"sum": [ANSWER]}}))
    double = subprocess.Popen([sys.executable, "-m", "amber_pipeline.models.provider_double", "--replay",
                               str(replay), "--tasks", str(root / "tasks")], stdout=subprocess.PIPE, text=True)
    assert double.stdout is not None
    return double, double.stdout.readline().strip().rsplit(" at ", 1)[1]


def timed(call: Callable[[], None], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=500, help="timed calls per path and mode")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per path and mode first")
    parser.add_argument("--smoke", action="store_true", help="--n 20 --warmup 5 (for the test suite)")
    args = parser.parse_args()
    if args.smoke:
        args.n, args.warmup = 20, 5
    with tempfile.TemporaryDirectory(prefix="amber-bench-proxy-") as tmp:
        double, upstream = start_double(Path(tmp))
        try:
            mc = ModelConfiguration(name="bench-model", model="bench-model", provider="openai-compatible",
                                    base_url=upstream, settings=Settings(temperature=0.0),
                                    prices=Prices(input=1.0, cached_input=0.1, output=5.0, source="bench"))
            with ModelProxy() as proxy, httpx.Client(verify=tls(), timeout=30, trust_env=False) as client:
                grant = proxy.grant(Grant("bench", mc, upstream, None))
                results = measure(client, proxy.base_url() + "/v1", upstream, grant, mc, args.n, args.warmup)
                calls = len(grant.calls)
        finally:
            double.terminate()
            double.wait()
    print(f"{calls} calls through the proxy ({args.warmup} warm-up and {args.n} timed per mode), as many "
          "straight to the double; sequential, one kept-alive connection each")
    added = []
    for mode in ("whole", "streamed"):
        via, direct = results[mode]
        diff = statistics.median(via) - statistics.median(direct)
        added.append(diff)
        print(f"{mode:>8}: through the proxy median {statistics.median(via):.2f} ms, p90 {p90(via):.2f} ms; "
              f"straight to the double median {statistics.median(direct):.2f} ms, p90 {p90(direct):.2f} ms; "
              f"added {diff:.2f} ms at the median, {p90(via) - p90(direct):.2f} ms at p90")
    print(f"FIGURE proxy_added_ms_median {max(added):.2f} ms")


def measure(client: httpx.Client, proxy_url: str, upstream: str, grant: Grant, mc: ModelConfiguration, n: int,
            warmup: int) -> dict[str, tuple[list[float], list[float]]]:
    """Per mode (whole, streamed): latencies through the proxy and straight to the double, calls interleaved so
    drift in the machine's load falls on both alike."""
    results: dict[str, tuple[list[float], list[float]]] = {}
    for mode, stream in (("whole", False), ("streamed", True)):
        body = {"model": "whatever", "messages": [{"role": "user", "content": INSTRUCTION}], "stream": stream}
        pinned = pin(Wire.CHAT, body, mc)
        via_proxy = _caller(client, proxy_url, body, {"authorization": f"Bearer {grant.token}"}, stream)
        direct = _caller(client, upstream, pinned, {}, stream)
        for _ in range(warmup):
            via_proxy()
            direct()
        via: list[float] = []
        straight: list[float] = []
        for _ in range(n):
            via += timed(via_proxy, 1)
            straight += timed(direct, 1)
        results[mode] = (via, straight)
    return results


def _caller(client: httpx.Client, base: str, body: dict, headers: dict[str, str], stream: bool) -> Callable[[], None]:
    url = base + "/chat/completions"

    def whole() -> None:
        r = client.post(url, json=body, headers=headers)
        assert r.status_code == 200 and ANSWER in r.text, r.text

    def streamed() -> None:
        with client.stream("POST", url, json=body, headers=headers) as r:
            data = r.read()
        assert r.status_code == 200 and data.endswith(b"data: [DONE]\n\n"), data[-200:]

    return streamed if stream else whole


if __name__ == "__main__":
    main()
