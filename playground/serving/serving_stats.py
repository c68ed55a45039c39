"""From what the serving lab's ranks returned to its figures (serving_report.py turns them into tables).

Pure functions over plain data: the clients' per-request rows (serving_clients.request_row), the
server's stats, memory samples and engine step log (engine/llm_engine.LLMEngine.step_log).
"""

import numpy as np

from playground.kvcache.engine.llm_engine import STEP_LOG_COLUMNS
from playground.kvcache.stats import summarize_samples
from playground.transformer.text import decode_sample


def quantiles(values, qs=(50, 99)) -> dict[str, float]:
    """{"p50": .., "p99": ..} of the values (nan if none)."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    return {f"p{q}": float(np.percentile(a, q)) if a.size else float("nan") for q in qs}


def requests_of(clients: dict) -> list[dict]:
    return [row for c in clients.values() for row in c.get("requests", [])]


def replay_figures(setup: dict) -> dict:
    """One setup of the section 4.6 (or prefix) workload: throughput, concurrency, latency."""
    rows = requests_of(setup["clients"])
    done = [r for r in rows if r["ok"]]
    stats, engine = setup["stats"], setup["stats"]["engine"]
    busy = summarize_samples(setup["samples"], stats["capacity_slots"])
    log = np.asarray(setup["step_log"], dtype=float).reshape(-1, len(STEP_LOG_COLUMNS))
    decodes = log[:, 1][log[:, 1] > 0]
    elapsed_s = max((c.get("elapsed_s", 0.0) for c in setup["clients"].values()), default=0.0)
    generated = sum(r["num_tokens"] for r in done)
    prompt_tokens = sum(r["num_prompt_tokens"] for r in done)
    ttft, tpot, queue = (quantiles(r[k] for r in done) for k in ("ttft_s", "tpot_s", "queue_s"))
    return {
        "policy": setup["policy"],
        "prefix_caching": setup["prefix_caching"],
        "requests": len(rows),
        "done": len(done),
        "failed": len(rows) - len(done),
        "peak_seqs": engine["peak_running"],
        "mean_seqs": busy["mean_live_seqs"],
        "util_pct": 100 * busy["utilisation"],
        "mean_batch": float(decodes.mean()) if decodes.size else float("nan"),
        "steps": engine["steps"],
        "preempted": engine["preempted"],
        "generated_tokens": generated,
        "elapsed_s": elapsed_s,
        "tokens_per_s": generated / elapsed_s if elapsed_s else float("nan"),
        "hit_rate_pct": 100 * sum(r["num_cached_tokens"] for r in done) / prompt_tokens
        if prompt_tokens
        else 0.0,
        "ttft_p50_s": ttft["p50"],
        "ttft_p99_s": ttft["p99"],
        "tpot_p50_ms": 1e3 * tpot["p50"],
        "tpot_p99_ms": 1e3 * tpot["p99"],
        "queue_p50_s": queue["p50"],
    }


def history(setup: dict) -> dict:
    """The setup's requests as a history (chaos --recover reads it): `asked` (what the clients
    send), `replied` (a reply each: a client collects each id once), `answered` (an ok reply),
    `generated` (the engine's finished requests, plus those a restarted server found in its
    journal), `twice` = generated - answered and `never` = asked - replied, both 0 when nothing was
    lost or done twice; `replayed`: answers a re-send got from the finished-id table instead of a
    second generation; `rerun`: requests a resumed setup's new server generated from their prompts."""
    answered = replied = 0
    for c in setup["clients"].values():
        rows = c.get("requests", [])
        answered += sum(1 for r in rows if r["ok"]) + len(c.get("modes", []))
        replied += len(rows) + len(c.get("modes", []))
        answered += sum(b["batch"] - b["failed"] for b in c.get("batches", []))
        replied += sum(b["batch"] for b in c.get("batches", []))
    answers = setup["stats"].get("answers") or {}
    loaded = answers.get("loaded", 0)
    generated = setup["stats"]["engine"]["finished_requests"] + loaded
    return {
        "asked": setup.get("asked", replied),
        "replied": replied,
        "answered": answered,
        "generated": generated,
        "twice": generated - answered,
        "never": setup.get("asked", replied) - replied,
        "replayed": answers.get("replayed", 0),
        "loaded": loaded,
        "rerun": generated - loaded if setup.get("resumed") else 0,
    }


def batch_figures(batches: list[dict]) -> list[dict]:
    """Per batch size: a decode step's median time (its p10-p90), tokens/s = batch / step."""
    rows = []
    for b in batches:
        gaps = np.asarray(b["step_gaps_s"], dtype=float)
        step_s = float(np.median(gaps)) if gaps.size else float("nan")
        rows.append(
            {
                "batch": b["batch"],
                "step_ms": 1e3 * step_s,
                "step_p10_ms": 1e3 * float(np.percentile(gaps, 10)) if gaps.size else float("nan"),
                "step_p90_ms": 1e3 * float(np.percentile(gaps, 90)) if gaps.size else float("nan"),
                "tokens_per_s": b["batch"] / step_s if gaps.size else float("nan"),
                "failed": b["failed"],
            }
        )
    return rows


def digests_by_request(clients: dict) -> dict[int, list[int]]:
    return {r["req_id"]: r["digests"] for r in requests_of(clients) if r["ok"]}


def differing_requests(per_setup: list[dict]) -> list[int]:
    """Requests whose tokens differ between setups (every setup must generate the same)."""
    maps = [digests_by_request(s["clients"]) for s in per_setup]
    if len(maps) < 2:
        return []
    common = set.intersection(*(set(m) for m in maps))
    return sorted(k for k in common if any(m[k] != maps[0][k] for m in maps[1:]))


CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # inside a UTF-8 character, never its first byte


def shown_text(prompt: list[int], tokens: list[int]) -> tuple[str, str]:
    """(prompt, generated) as text. A prompt is a slice of the lecture's bytes and may start or end
    inside a character, and a byte-level model may stop inside one: the prompt is shown from its
    first whole character, the two are decoded together (a character the prompt began and the
    model finished is the model's), and an unfinished last character is cut (decode_sample); a
    line break shows as ⏎."""
    head = bytes(prompt).lstrip(CONTINUATION_BYTES)
    prompt_text = decode_sample(head)
    whole = decode_sample(head + bytes(t % 256 for t in tokens))
    return _one_line(prompt_text), _one_line(whole[len(prompt_text) :])


def _one_line(text: str) -> str:
    """A line break shown as ⏎, so that a table row stays one row (in the terminal and in markdown)."""
    return text.replace("\r\n", "⏎").replace("\n", "⏎").replace("|", "¦")


def text_rows(setup: dict) -> list[dict]:
    """The requests that came back with their text (serving_clients: `show_texts`, `prompt`)."""
    rows = []
    for r in sorted(requests_of(setup["clients"]), key=lambda r: r["req_id"]):
        if "tokens" in r:
            prompt, generated = shown_text(r["prompt"], r["tokens"])
            name = "your prompt" if r["req_id"] < 0 else str(r["req_id"])
            rows.append(
                {"request": name, "prompt": prompt, "generated": generated, "num_tokens": len(r["tokens"])}
            )
    return rows


def step_split(step_log: list, predicted_s=None) -> dict:
    """Where an engine's steps spent their time (STEP_LOG_COLUMNS), summed, beside the decode-step
    model's prediction of each step (`predicted_s`, one a step, if given); and per batch size of
    the steps that only decoded, the median measured and predicted step."""
    log = np.asarray(step_log, dtype=float).reshape(-1, len(STEP_LOG_COLUMNS))
    col = {k: log[:, i] for i, k in enumerate(STEP_LOG_COLUMNS)}
    pred = np.asarray(predicted_s if predicted_s is not None else np.full(len(log), np.nan), dtype=float)
    decode_only = (col["prefill_tokens"] == 0) & (col["decodes"] > 0)
    by_batch = {}
    for b in np.unique(col["decodes"][decode_only]).astype(int).tolist():
        rows = decode_only & (col["decodes"] == b)
        by_batch[b] = {
            "steps": int(rows.sum()),
            "measured_s": float(np.median(col["step_s"][rows])),
            "predicted_s": float(np.median(pred[rows])),
        }
    out = {k: float(col[k].sum()) for k in ("step_s", "model_s", "attention_s", "bookkeeping_s")}
    return {
        **out,
        "steps": len(log),
        "decode_only_steps": int(decode_only.sum()),
        "decodes": float(col["decodes"].sum()),
        "predicted_s": float(pred.sum()),
        "by_batch": by_batch,
    }
