"""A client process of the standalone KV server, for the chaos command's `kvserver` workload:
`python -m playground.chaos.kvclient --address ADDR --requests N`.

It pings, submits N generate requests at once (greedy and seeded sampling, alternately), says
`submitted` on stdout (the chaos command fires its fault after that line), collects every reply
and says `done` (exit 0). A failure is one line on stderr and exit 1: the server silent for the
timeout (WaitTimeout), or requests lost to a restart (ServerLost: at once with `--resends 0`, the
default; after that many re-sends otherwise). With `--verify` it compares every reply's tokens
with dense generation on the served model (random weights of seed 0 in the shape `ping` gives).
Its last line on stdout is its history, `history {json}`: requests asked, answered, sent again,
second replies dropped (a re-send crossing the first reply: the same answer), and replies whose
tokens differ from dense generation.
"""

import argparse
import json
import re
import sys
import time

from playground.core.errors import PlaygroundError
from playground.kvcache.server.client import KVClient
from playground.transformer import ModelConfig, Transformer, generate

ERROR_LINE = re.compile(r"^error: (\w+): ", re.MULTILINE)
ANSWERED_LINE = re.compile(r"^answered \d+ at ([0-9.]+)$", re.MULTILINE)


def answered_at(stdout: str) -> float | None:
    """When a client had every answer (its `answered N at T` line), None before that."""
    found = ANSWERED_LINE.search(stdout)
    return float(found[1]) if found else None


def error_kind(stderr: str) -> str | None:
    """The error class a client failed with, read from its one line `error: <class>: <message>`
    (what `main` prints for a PlaygroundError); None when there is no such line."""
    found = ERROR_LINE.search(stderr)
    return found[1] if found else None


def sampling(i: int) -> dict:
    """Request i's sampling: greedy for even i, seeded for odd."""
    return {"seed": i} if i % 2 == 0 else {"seed": i, "temperature": 0.8}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m playground.chaos.kvclient", description=__doc__)
    ap.add_argument("--address", required=True)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=400)
    ap.add_argument("--timeout-s", type=float, default=6.0)
    ap.add_argument("--name", default="client")
    ap.add_argument("--resends", type=int, default=0, help="re-sends of a request a restarted server lost")
    ap.add_argument("--verify", action="store_true", help="compare every reply with dense generation")
    args = ap.parse_args(argv)
    client = KVClient(args.address, timeout_s=args.timeout_s, resends=args.resends)
    history = {"asked": args.requests, "answered": 0, "resent": 0, "duplicates": 0, "differs": 0}
    try:
        info = client.ping()
        prompts = {}
        for i in range(args.requests):
            prompt = f"{args.name} asks question {i}: "
            prompts[client.submit(prompt, args.max_new_tokens, **sampling(i))] = (prompt, sampling(i))
        print(f"submitted {list(prompts)}", flush=True)
        replies = client.collect(prompts)
        # when the last answer came (the machine's monotonic clock, as the chaos run's): a fault after
        # it found this client done
        print(f"answered {len(replies)} at {time.monotonic():.6f}", flush=True)
        history["answered"] = len(replies)
        refused = [h for h in replies.values() if not h.get("ok")]
        if refused:
            print(f"error: {len(refused)} requests refused: {refused[0].get('message')}", file=sys.stderr)
            return 1
        if args.verify:
            model = Transformer(ModelConfig.from_dict(info["model"]), seed=0)
            for rid, (prompt, s) in prompts.items():
                want = generate(model, list(prompt.encode()), args.max_new_tokens, **s).tolist()
                history["differs"] += replies[rid]["tokens"] != [want]
        print(f"done {len(replies)}", flush=True)
        return 0
    except PlaygroundError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        history["resent"], history["duplicates"] = client.num_resent, client.num_duplicates
        print(f"history {json.dumps(history)}", flush=True)
        client.close()


if __name__ == "__main__":
    raise SystemExit(main())
