"""``python -m amber_pipeline.models.provider_double``: serve replay files on loopback until interrupted.

For benchmarks and manual runs that need the double in its own process (``bench/``), apart from the code it
serves.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from pathlib import Path

from amber_pipeline.models.provider_double.replay import load_replay
from amber_pipeline.models.provider_double.server import ProviderDouble


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m amber_pipeline.models.provider_double",
        description="Serve replay files as OpenAI, OpenRouter and Anthropic APIs on loopback.",
    )
    parser.add_argument("--replay", type=Path, nargs="+", required=True, help="replay JSON files")
    parser.add_argument("--tasks", type=Path, required=True, help="dir of <task>/instruction.md")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-by", default="amber-double", help="upstream name in chat replies")
    parser.add_argument("--api-key", default=None, help="require this key on every call")
    args = parser.parse_args(argv)
    instructions = {
        d.name: (d / "instruction.md").read_text(encoding="utf-8")
        for d in sorted(args.tasks.iterdir())
        if (d / "instruction.md").is_file()
    }
    replays = [load_replay(p) for p in args.replay]
    double = ProviderDouble(
        replays, instructions, args.host, args.port, served_by=args.served_by, api_key=args.api_key
    )
    with double:
        models = ", ".join(r.model for r in replays)
        print(f"replay provider double: {models} at {double.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
