"""A client process of the standalone KV server, for the chaos command's `kvserver` workload:
`python -m playground.chaos.kvclient --address ADDR --requests N`.

It pings, submits N generate requests at once, says `submitted` on stdout (the chaos command fires
its fault after that line), collects every reply and says `done` (exit 0). A failure is one line on
stderr and exit 1: the server silent for the timeout (WaitTimeout), or requests lost to a restart
(ServerLost).
"""

import argparse
import re
import sys

from playground.core.errors import PlaygroundError
from playground.kvcache.server.client import KVClient

ERROR_LINE = re.compile(r"^error: (\w+): ", re.MULTILINE)


def error_kind(stderr: str) -> str | None:
    """The error class a client failed with, read from its one line `error: <class>: <message>`
    (what `main` prints for a PlaygroundError); None when there is no such line."""
    found = ERROR_LINE.search(stderr)
    return found[1] if found else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m playground.chaos.kvclient", description=__doc__)
    ap.add_argument("--address", required=True)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=400)
    ap.add_argument("--timeout-s", type=float, default=6.0)
    ap.add_argument("--name", default="client")
    args = ap.parse_args(argv)
    client = KVClient(args.address, timeout_s=args.timeout_s)
    try:
        client.ping()
        ids = [
            client.submit(f"{args.name} asks question {i}: ", args.max_new_tokens, seed=i)
            for i in range(args.requests)
        ]
        print(f"submitted {ids}", flush=True)
        replies = client.collect(ids)
        refused = [h for h in replies.values() if not h.get("ok")]
        if refused:
            print(f"error: {len(refused)} requests refused: {refused[0].get('message')}", file=sys.stderr)
            return 1
        print(f"done {len(replies)}", flush=True)
        return 0
    except PlaygroundError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()


if __name__ == "__main__":
    raise SystemExit(main())
